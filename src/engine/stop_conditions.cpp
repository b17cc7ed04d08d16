// engine/stop_conditions.cpp — a sequence's end checks and the text they let through.
#include "engine/stop_conditions.h"

#include <algorithm>
#include <utility>

namespace cairn::engine {

const char* end_reason_name(EndReason r) {
  static constexpr const char* kNames[] = {"stop", "length", "cancelled", "handoff"};
  return kNames[static_cast<int>(r)];
}

StopChecker::StopChecker(const Tokenizer& tok, StopConfig cfg)
    : tok_(tok), cfg_(std::move(cfg)), detok_(tok, cfg_.render_special, /*at_start=*/false) {
  std::erase_if(cfg_.stop, [](const std::string& s) { return s.empty(); });
}

bool StopChecker::cut_at_stop() {
  size_t first = std::string::npos;
  for (const auto& s : cfg_.stop) first = std::min(first, pending_.find(s));
  if (first == std::string::npos) return false;
  pending_.resize(first);
  return true;
}

std::string StopChecker::release_safe() {
  // The longest tail of pending_ that is a proper prefix of some stop string
  // might still grow into it, so it stays; everything before it cannot be
  // part of a stop string any more (cut_at_stop found no whole one).
  size_t keep_from = pending_.size();
  for (size_t p = 0; p < pending_.size() && keep_from == pending_.size(); ++p) {
    const std::string_view tail = std::string_view(pending_).substr(p);
    for (const auto& s : cfg_.stop)
      if (s.size() > tail.size() && std::string_view(s).substr(0, tail.size()) == tail) {
        keep_from = p;
        break;
      }
  }
  std::string out = pending_.substr(0, keep_from);
  pending_.erase(0, keep_from);
  return out;
}

std::string StopChecker::finish() {
  if (ended_) return {};
  ended_ = true;
  pending_ += detok_.flush();
  cut_at_stop();
  return std::exchange(pending_, {});
}

StopStep StopChecker::push(Token t, int32_t total_tokens) {
  StopStep step;
  if (ended_) return step;
  ++generated_;
  if (!cfg_.ignore_eos && tok_.is_eog(t)) {
    step.text = finish();  // the end token itself has no text
    step.end = EndReason::Stop;
    return step;
  }
  pending_ += detok_.push(t);
  if (cut_at_stop()) {
    ended_ = true;
    step.text = std::exchange(pending_, {});
    step.end = EndReason::Stop;
    return step;
  }
  const bool at_limit = cfg_.max_tokens >= 0 && generated_ >= cfg_.max_tokens;
  // A token stream never grows past the context: the last token's K/V would
  // have nowhere to go, so with total == n_ctx nothing more can follow.
  const bool ctx_full = cfg_.n_ctx > 0 && total_tokens >= cfg_.n_ctx;
  if (at_limit || ctx_full) {
    pending_ += detok_.flush();
    step.end = cut_at_stop() ? EndReason::Stop : EndReason::Length;
    ended_ = true;
    step.text = std::exchange(pending_, {});
    return step;
  }
  step.text = release_safe();
  return step;
}

}  // namespace cairn::engine
