// api/generation.h — one HTTP generation request's progress, as bytes to send.
// Owns the per-choice state of a completion or chat request (text, logprobs,
// finish, usage) and turns backend events into SSE chunks (streaming) or the
// final JSON body. Pure state machine: never touches sockets or the backend.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "api/event_queue.h"
#include "api/openai_request.h"
#include "api/openai_response.h"

namespace cairn::api {

class Generation {
 public:
  Generation(const ParsedGenerate& req, ResponseMeta meta);

  bool streaming() const { return stream_; }
  // Streaming: what to send right after the headers (chat role chunks,
  // echoed prompts).
  std::string opening();
  // Consumes one event; streaming: returns the bytes to send (maybe empty).
  std::string on_event(int32_t index, const Event& ev);
  // True once every choice finished or any failed.
  bool done() const { return finished_ == static_cast<int32_t>(choices_.size()) || failed_; }
  bool failed() const { return failed_; }
  const Status& error() const { return error_; }
  // Once done. Streaming: the usage chunk (if asked) and [DONE], or an error
  // event. Not streaming: the response (or error) JSON; see status().
  std::string closing();
  int status() const { return failed_ ? to_http_error(error_).status : 200; }

 private:
  ResponseMeta meta_;
  int32_t n_;
  bool stream_;
  bool include_usage_;
  std::vector<ChoiceResult> choices_;
  std::vector<int64_t> offsets_;  // text bytes sent per choice (completions text_offset)
  std::vector<std::string> echo_;  // per choice: the prompt text opening() puts first
  // Per choice, once the backend said how to read a chat output: the
  // options (non-streaming: parsed whole at the end) and the streaming parser.
  std::vector<std::optional<chat::OutputParserOptions>> syntax_;
  std::vector<std::optional<chat::OutputParser>> parsers_;
  // Streaming: parsed pieces as chunks (logprobs of `tok` on the first).
  std::string delta_chunks(int32_t index, const std::vector<chat::OutputDelta>& deltas,
                           const serving::TokenEvent* tok);
  int32_t finished_ = 0;
  bool failed_ = false;
  Status error_;
};

}  // namespace cairn::api
