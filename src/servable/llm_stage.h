// servable/llm_stage.h — a GGUF model as a stage of a servable's method.
// Owns the mapping between stage values and a generation: the prompt (a str,
// or int token ids), generation options (the declared model's defaults, then
// the stage's own kwargs; structured outputs by the OpenAI API's field names,
// e.g. response_format as JSON text), and the outputs (1: the text; 2: and the generated
// token ids as an int32 tensor; 3: and the finish reason). Runs through a
// serving::Backend, so the engine's batching and limits apply as to any
// OpenAI request. Never blocks: results arrive through callbacks.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/value.h"
#include "serving/backend.h"

namespace cairn::servable {

inline constexpr int kMaxLlmOutputs = 3;

// The generation a stage's values ask for. `stage` names the stage in errors.
Result<serving::GenerateRequest> llm_request(const std::string& stage,
                                             const std::vector<values::Value>& args,
                                             const std::map<std::string, values::Value>& defaults,
                                             const std::map<std::string, values::Value>& kwargs);

struct LlmCallbacks {
  std::function<void(const std::string& text)> on_text;  // may be empty
  // Called once: the stage's outputs_count values, or the failure.
  std::function<void(Result<std::vector<values::Value>>)> on_done;
};

// Submits the generation; errors from submit come back through on_done too.
// Returns the backend's request id (0 when submit failed).
serving::RequestId run_llm(serving::Backend& backend, serving::GenerateRequest req,
                           int outputs_count, LlmCallbacks callbacks);

// An LLM stage whose option `task` is "embed" (the automatic `embed` method's,
// or add_stage(model, text, task="embed")): one argument, a str or token
// ids, and one output, the input's embedding as a float32 vector of unit
// length. Any other option is refused.
bool is_embed_task(const std::map<std::string, values::Value>& kwargs);
Result<serving::EmbedRequest> llm_embed_request(const std::string& stage,
                                                const std::vector<values::Value>& args,
                                                const std::map<std::string, values::Value>& kwargs);
// Submits it; the embedding (or the failure) comes back through on_done.
serving::RequestId run_llm_embed(serving::Backend& backend, serving::EmbedRequest req,
                                 LlmCallbacks callbacks);

// A synchronous call (model.call() from Python): waits up to `timeout_s`,
// cancelling the generation when it passes.
Result<std::vector<values::Value>> call_llm(serving::Backend& backend, serving::GenerateRequest req,
                                            int outputs_count, double timeout_s);
Result<std::vector<values::Value>> call_llm_embed(serving::Backend& backend,
                                                  serving::EmbedRequest req, double timeout_s);
// Either call: `start` submits with the callbacks given and returns the id
// to cancel when the time runs out.
Result<std::vector<values::Value>> wait_for_llm(
    serving::Backend& backend, const std::function<serving::RequestId(LlmCallbacks)>& start,
    double timeout_s);

}  // namespace cairn::servable
