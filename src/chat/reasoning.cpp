// chat/reasoning.cpp — splitting `<think>…</think>` from the rest of an output.
#include "chat/reasoning.h"

#include "chat/stream_text.h"

#include <utility>

namespace cairn::chat {
ReasoningTags reasoning_tags_for_template(std::string_view template_text) {
  if (template_text.find("<|START_THINKING|>") != std::string_view::npos)
    return {"<|START_THINKING|>", "<|END_THINKING|>"};
  return {};
}

bool prompt_opens_reasoning(std::string_view prompt, const ReasoningTags& tags) {
  size_t end = prompt.size();
  while (end > 0 && detail::is_space(prompt[end - 1])) --end;
  prompt = prompt.substr(0, end);
  const std::string_view open = tags.open;
  return !open.empty() && prompt.size() >= open.size() && prompt.substr(prompt.size() - open.size()) == open;
}

ReasoningSplitter::ReasoningSplitter(ReasoningMode mode, bool starts_in_reasoning, ReasoningTags tags)
    : mode_(mode),
      tags_(std::move(tags)),
      state_(mode == ReasoningMode::Off ? State::Rest
             : starts_in_reasoning       ? State::Reasoning
                                         : State::Start) {}

ReasoningSplitter::Delta ReasoningSplitter::feed(std::string_view text) {
  buf_.append(text);
  return step(false);
}

ReasoningSplitter::Delta ReasoningSplitter::finish() { return step(true); }

ReasoningSplitter::Delta ReasoningSplitter::step(bool final) {
  Delta d;
  const std::string_view kOpen = tags_.open, kClose = tags_.close;
  // Reasoning text, without whitespace at its start, and with whitespace at
  // its (current) end held until more reasoning follows it.
  const bool raw = mode_ == ReasoningMode::Inline;  // tags and whitespace kept
  const auto emit_reasoning = [&](std::string_view s) {
    if (raw) {
      d.reasoning.append(s);
      return;
    }
    if (!reasoning_started_) {
      size_t i = 0;
      while (i < s.size() && detail::is_space(s[i])) ++i;
      s.remove_prefix(i);
      if (s.empty()) return;
      reasoning_started_ = true;
    }
    size_t end = s.size();
    while (end > 0 && detail::is_space(s[end - 1])) --end;
    if (end == 0) {
      reasoning_ws_.append(s);
      return;
    }
    d.reasoning += reasoning_ws_;
    reasoning_ws_.clear();
    d.reasoning.append(s.substr(0, end));
    reasoning_ws_.append(s.substr(end));
  };
  if (state_ == State::Start) {
    size_t i = 0;
    while (i < buf_.size() && detail::is_space(buf_[i])) ++i;
    const std::string_view after = std::string_view(buf_).substr(i);
    if (after.substr(0, kOpen.size()) == kOpen) {
      if (raw) d.reasoning.append(buf_, 0, i + kOpen.size());
      buf_.erase(0, i + kOpen.size());
      state_ = State::Reasoning;
    } else if (!final && after.size() < kOpen.size() && kOpen.substr(0, after.size()) == after) {
      return d;  // may still become `<think>`
    } else {
      state_ = State::Rest;
    }
  }
  if (state_ == State::Reasoning) {
    const size_t close = buf_.find(kClose);
    if (close != std::string::npos) {
      emit_reasoning(std::string_view(buf_).substr(0, close));
      if (raw) d.reasoning.append(kClose);
      reasoning_ws_.clear();  // the reasoning's trailing whitespace is dropped
      buf_.erase(0, close + kClose.size());
      state_ = State::Rest;
    } else {
      size_t upto = buf_.size();
      if (!final)
        upto = detail::complete_utf8_prefix(
            std::string_view(buf_).substr(0, upto - detail::marker_prefix_at_end(buf_, kClose)));
      emit_reasoning(std::string_view(buf_).substr(0, upto));
      buf_.erase(0, upto);
      return d;
    }
  }
  // The rest goes on whole; the tool-call parser holds back what it must.
  d.rest = std::move(buf_);
  buf_.clear();
  return d;
}

}  // namespace cairn::chat
