// api/generation.cpp — one generation request's events turned into SSE chunks or a JSON body.
#include "api/generation.h"

namespace cairn::api {

Generation::Generation(const ParsedGenerate& req, ResponseMeta meta)
    : meta_(std::move(meta)),
      n_(req.n),
      stream_(req.stream),
      include_usage_(req.include_usage),
      choices_(static_cast<size_t>(req.choices())),
      offsets_(choices_.size(), 0) {}

std::string Generation::opening() {
  std::string out;
  if (stream_ && meta_.endpoint == Endpoint::Chat)
    for (size_t i = 0; i < choices_.size(); ++i)
      out += sse_data(role_chunk(meta_, static_cast<int32_t>(i)));
  return out;
}

std::string Generation::on_event(int32_t index, const Event& ev) {
  if (index < 0 || static_cast<size_t>(index) >= choices_.size() || done()) return {};
  ChoiceResult& c = choices_[static_cast<size_t>(index)];
  if (!c.finish_reason.empty()) return {};
  if (const auto* tok = std::get_if<serving::TokenEvent>(&ev)) {
    c.text += tok->text;
    if (!stream_) {
      if (meta_.logprobs) c.tokens.push_back(*tok);
      return {};
    }
    // A token whose text is held back carries nothing unless logprobs were asked for.
    if (tok->text.empty() && !meta_.logprobs) return {};
    std::string out = sse_data(token_chunk(meta_, index, *tok, offsets_[size_t(index)]));
    offsets_[size_t(index)] += static_cast<int64_t>(tok->text.size());
    return out;
  }
  if (const auto* fin = std::get_if<serving::FinishEvent>(&ev)) {
    c.text += fin->text;
    c.finish_reason = fin->reason.empty() ? "stop" : fin->reason;
    c.usage = fin->usage;
    ++finished_;
    if (!stream_) return {};
    std::string out = sse_data(finish_chunk(meta_, index, fin->text, c.finish_reason));
    if (include_usage_ && done()) out += sse_data(usage_chunk(meta_, total_usage(choices_, n_)));
    return out;
  }
  failed_ = true;
  error_ = std::get<Status>(ev);
  return {};
}

std::string Generation::closing() {
  if (stream_) {
    if (failed_) return sse_data(to_http_error(error_).body) + kSseDone;
    return kSseDone;
  }
  if (failed_) return dump_json(to_http_error(error_).body);
  return dump_json(full_response(meta_, choices_, n_));
}

}  // namespace cairn::api
