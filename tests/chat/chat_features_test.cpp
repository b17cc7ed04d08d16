// Small templates for each language feature, with renders made by real Jinja2 (see
// gen_feature_cases.py); they need nothing from ../shared.
#include <gtest/gtest.h>

#include "chat/chat_template.h"

namespace cairn::chat {
namespace {

struct FeatureCase {
  const char* name;
  const char* source;
  const char* render;
  const char* error;
};

#include "chat_feature_cases.inc"

RenderOptions fixed_day() {
  RenderOptions opt;
  std::tm day{};
  day.tm_year = 2026 - 1900;
  day.tm_mday = 15;
  day.tm_wday = 4;
  day.tm_yday = 14;
  opt.now = day;
  return opt;
}

class Feature : public ::testing::TestWithParam<FeatureCase> {};

TEST_P(Feature, MatchesJinja2) {
  const FeatureCase& c = GetParam();
  auto context = nlohmann::ordered_json::parse(kContextJson);
  auto tmpl = ChatTemplate::parse(c.source);
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().message();
  auto out = tmpl->render(context, fixed_day());
  std::string want_error = c.error;
  if (want_error.empty()) {
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    EXPECT_EQ(*out, c.render);
  } else {
    ASSERT_FALSE(out.is_ok()) << "rendered: " << *out;
    EXPECT_EQ(out.status().message().substr(0, want_error.size()), want_error);
  }
}

INSTANTIATE_TEST_SUITE_P(Jinja2, Feature, ::testing::ValuesIn(kFeatureCases),
                         [](const ::testing::TestParamInfo<FeatureCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace cairn::chat
