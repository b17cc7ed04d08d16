// Conversations the golden file lacks (an assistant tool call with its result, a
// reasoning turn) over every template in ../shared/templates, against Jinja2 renders
// stored by gen_toolflow_cases.py.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "test_util.h"

namespace cairn::chat {
namespace {

struct ToolflowCase {
  const char* template_file;
  const char* conversation;
  const char* context;
  const char* render;
  const char* error;
};

#include "chat_toolflow_cases.inc"

TEST(ChatToolflow, MatchesJinja2OnToolCallsAndReasoning) {
  CAIRN_REQUIRE_SHARED("templates");
  size_t passed = 0;
  for (const ToolflowCase& c : kToolflowCases) {
    SCOPED_TRACE(std::string(c.template_file) + " / " + c.conversation);
    auto path = *test::shared_dir() / "templates" / c.template_file;
    if (!std::filesystem::exists(path))
      GTEST_SKIP() << "skipped: ../shared/templates/" << c.template_file << " is not available";
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    auto tmpl = ChatTemplate::parse(ss.str());
    ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().message();
    RenderOptions opt;  // the renders were made on 2026-01-15 (strftime_now)
    std::tm day{};
    day.tm_year = 2026 - 1900;
    day.tm_mday = 15;
    opt.now = day;
    auto out = tmpl->render(nlohmann::ordered_json::parse(c.context), opt);
    std::string want_error = c.error;
    if (want_error.empty()) {
      EXPECT_TRUE(out.is_ok()) << out.status().message();
      if (!out.is_ok()) continue;
      EXPECT_EQ(*out, c.render);
      passed += *out == c.render;
    } else {
      EXPECT_FALSE(out.is_ok());
      if (out.is_ok()) continue;
      EXPECT_EQ(out.status().message().substr(0, want_error.size()), want_error);
      passed += out.status().message().rfind(want_error, 0) == 0;
    }
  }
  EXPECT_EQ(passed, std::size(kToolflowCases));
}

}  // namespace
}  // namespace cairn::chat
