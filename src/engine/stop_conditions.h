// engine/stop_conditions.h — when a sequence ends, and which of its text may be sent.
// Owns the per-sequence end checks (end-of-generation token, token limit, stop
// strings, full context) and the text hold-back they imply: complete UTF-8
// only (via StreamingDetokenizer), and never a stop string or any text that
// could still become the start of one. Never samples, schedules or touches
// K/V; sees generated token ids only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace cairn::engine {

// Why a sequence ended, as OpenAI's finish_reason reports it.
// Handoff: the prefill side of a handoff stopped after the first token (not a
// client-visible end; see EngineRequest::export_kv).
enum class EndReason { Stop, Length, Cancelled, Handoff };

const char* end_reason_name(EndReason r);  // "stop", "length", "cancelled", "handoff"

struct StopConfig {
  int32_t max_tokens = -1;        // generated tokens; -1: no limit but the context
  int32_t n_ctx = 0;              // prompt + generated tokens the context holds
  bool ignore_eos = false;        // keep going past end-of-generation tokens
  std::vector<std::string> stop;  // stop strings; empty ones are ignored
  bool render_special = false;    // control tokens' text is output text
};

// The outcome of one generated token.
struct StopStep {
  std::string text;              // text that may be sent now (may be empty)
  std::optional<EndReason> end;  // set when the sequence ends with this token
};

class StopChecker {
 public:
  StopChecker(const Tokenizer& tok, StopConfig cfg);

  // Feeds the next generated token; `total_tokens` counts prompt + generated
  // including this one. On an end, `text` already includes every held-back
  // byte that may still be sent (an incomplete character becomes U+FFFD), and
  // the checker must not be fed again.
  StopStep push(Token t, int32_t total_tokens);

  // Ends the sequence from outside (cancellation, errors): the held-back text
  // that is safe to send.
  std::string finish();

  int32_t generated() const { return generated_; }

 private:
  // Splits pending_ into sendable text and the tail that could begin a stop
  // string; returns the sendable part.
  std::string release_safe();
  // If a stop string occurs in pending_, cuts pending_ before its first
  // occurrence and returns true.
  bool cut_at_stop();

  const Tokenizer& tok_;
  StopConfig cfg_;
  StreamingDetokenizer detok_;
  std::string pending_;  // complete UTF-8 text not yet sent
  int32_t generated_ = 0;
  bool ended_ = false;
};

}  // namespace cairn::engine
