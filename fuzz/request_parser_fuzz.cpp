// libFuzzer target: any bytes as an HTTP request body must become a parsed
// request or an OpenAI-shaped error, never a crash, for every JSON route.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "api/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cairn;
  static const std::vector<serving::ModelInfo> models = {{"m", 128, 512, 0}};
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto parsed = api::parse_json_object(body);
  if (parsed.is_ok()) {
    const api::RequestJson* json = &*parsed;
    (void)api::parse_generate(api::Endpoint::Completions, *json, models);
    (void)api::parse_generate(api::Endpoint::Chat, *json, models);
    (void)api::parse_tokenize(*json, models);
    (void)api::parse_detokenize(*json, models);
  }
  return 0;
}
