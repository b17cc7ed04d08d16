// libFuzzer target: bytes as a JSON Schema (when they are JSON) and as a
// regular expression. Each must compile or fail with a Status, and what
// compiles must be GBNF that parse_gbnf accepts, whose matcher then takes
// bytes without crashing or running away.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace {

void exercise(const std::string& gbnf) {
  auto g = cairn::grammar::parse_gbnf(gbnf);
  if (!g) std::abort();  // the compilers wrote a grammar the parser refuses
  auto grammar = std::make_shared<const cairn::grammar::Grammar>(std::move(*g));
  cairn::grammar::Matcher m(grammar);
  for (const char* probe : {"{", "\"", "a", "0", " ", "\xC3", "\xA9", "}", "]"}) {
    (void)m.can_end();
    if (!m.accept(probe)) break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto schema = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!schema.is_discarded()) {
    auto gbnf = cairn::grammar::json_schema_to_gbnf(schema);
    if (gbnf) exercise(*gbnf);
  }
  for (auto context : {cairn::grammar::RegexContext::Whole, cairn::grammar::RegexContext::JsonString}) {
    auto expr = cairn::grammar::regex_to_gbnf(std::string(text), context);
    if (!expr) continue;
    exercise(context == cairn::grammar::RegexContext::Whole
                 ? "root ::= " + *expr + "\n"
                 : "root ::= \"\\\"\" " + *expr + " \"\\\"\"\n");
  }
  return 0;
}
