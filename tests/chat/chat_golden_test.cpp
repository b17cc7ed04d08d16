// Every render in ../shared/golden/chat-templates.json, made by Jinja2 3.1.2 configured as
// Hugging Face configures it, must come out byte-identical (or fail with the same error).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "test_util.h"

namespace cairn::chat {
namespace {

using json = nlohmann::ordered_json;

using test::read_file;

RenderOptions golden_options() {
  RenderOptions opt;
  std::tm day{};
  day.tm_year = 2026 - 1900;
  day.tm_mon = 0;
  day.tm_mday = 15;
  day.tm_wday = 4;  // a Thursday
  day.tm_yday = 14;
  opt.now = day;
  return opt;
}

TEST(ChatGolden, EveryCaseMatchesJinja2) {
  CAIRN_REQUIRE_SHARED("golden/chat-templates.json");
  const auto shared = *test::shared_dir();
  json golden = json::parse(read_file(shared / "golden/chat-templates.json"));
  ASSERT_EQ(golden["cases"].size(), 85u);
  size_t passed = 0, with_error = 0;
  for (const json& c : golden["cases"]) {
    std::string name =
        c["template"].get<std::string>() + " / " + c["conversation"].get<std::string>();
    SCOPED_TRACE(name);
    auto tmpl =
        ChatTemplate::parse(read_file(shared / "templates" / c["template"].get<std::string>()));
    ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().message();
    json ctx = golden["context"];
    ctx["messages"] = c["messages"];
    // The golden renderer leaves `tools` undefined when a conversation has none.
    if (!c["tools"].is_null()) ctx["tools"] = c["tools"];
    auto out = tmpl->render(ctx, golden_options());
    if (c["error"].is_null()) {
      EXPECT_TRUE(out.is_ok()) << out.status().message();
      if (!out.is_ok()) continue;
      EXPECT_EQ(*out, c["render"].get<std::string>());
      if (out.is_ok() && *out == c["render"].get<std::string>()) ++passed;
    } else {
      ++with_error;
      std::string want = c["error"].get<std::string>();
      EXPECT_FALSE(out.is_ok()) << "expected " << want << ", rendered:\n" << *out;
      if (out.is_ok()) continue;
      EXPECT_EQ(out.status().message().substr(0, want.size()), want);
      if (out.status().message().rfind(want, 0) == 0) ++passed;
    }
  }
  std::printf("chat golden: %zu of %zu cases pass (%zu expected errors)\n", passed,
              golden["cases"].size(), with_error);
  EXPECT_EQ(passed, 85u);
}

}  // namespace
}  // namespace cairn::chat
