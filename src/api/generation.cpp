// api/generation.cpp — one generation request's events turned into SSE chunks or a JSON body.
#include "api/generation.h"

#include <algorithm>

namespace cairn::api {

Generation::Generation(const ParsedGenerate& req, ResponseMeta meta)
    : meta_(std::move(meta)),
      n_(req.n),
      stream_(req.stream),
      include_usage_(req.include_usage),
      choices_(static_cast<size_t>(req.choices())),
      offsets_(choices_.size(), 0),
      syntax_(choices_.size()),
      parsers_(choices_.size()) {
  if (!req.echo) return;
  echo_.resize(choices_.size());
  for (size_t i = 0; i < choices_.size(); ++i) {
    const size_t prompt = i / static_cast<size_t>(std::max(1, n_));
    if (prompt < req.echo_text.size()) echo_[i] = choices_[i].text = req.echo_text[prompt];
  }
}

namespace {

// The parser options a backend's OutputSyntax asks for; unset when the
// output is plain content (no tool format, no reasoning split).
std::optional<chat::OutputParserOptions> parser_options(const serving::OutputSyntax& s) {
  chat::OutputParserOptions o;
  if (!s.tool_format.empty()) {
    auto f = chat::tool_format_from_name(s.tool_format);
    if (f.is_ok()) o.format = *f;  // a name from a newer worker: no tool parsing
  }
  const bool split = !s.reasoning_open.empty() && !s.reasoning_close.empty();
  o.reasoning = split ? chat::ReasoningMode::Split : chat::ReasoningMode::Off;
  if (split) o.reasoning_tags = {s.reasoning_open, s.reasoning_close};
  o.starts_in_reasoning = split && s.starts_in_reasoning;
  if (o.format == chat::ToolFormat::None && o.reasoning == chat::ReasoningMode::Off)
    return std::nullopt;
  return o;
}

}  // namespace

std::string Generation::delta_chunks(int32_t index, const std::vector<chat::OutputDelta>& deltas,
                                     const serving::TokenEvent* tok) {
  std::string out;
  for (const auto& d : deltas) {
    if (d.kind != chat::OutputDelta::Kind::ToolCallBegin && d.text.empty()) continue;
    out += sse_data(delta_chunk(meta_, index, d, tok));
    tok = nullptr;  // logprobs go with the first piece only
  }
  // A token whose text is all held back still carries its logprobs.
  if (tok && meta_.logprobs)
    out += sse_data(delta_chunk(meta_, index, chat::OutputDelta{}, tok));
  return out;
}

std::string Generation::opening() {
  std::string out;
  if (stream_ && meta_.endpoint == Endpoint::Chat)
    for (size_t i = 0; i < choices_.size(); ++i)
      out += sse_data(role_chunk(meta_, static_cast<int32_t>(i)));
  // Echoed prompts go first, as one chunk per choice (vLLM's order).
  for (size_t i = 0; i < echo_.size() && stream_; ++i) {
    if (echo_[i].empty()) continue;
    serving::TokenEvent ev{-1, echo_[i], 0.0f, {}};
    out += sse_data(token_chunk(meta_, static_cast<int32_t>(i), ev, offsets_[i]));
    offsets_[i] += static_cast<int64_t>(echo_[i].size());
  }
  echo_.clear();
  return out;
}

std::string Generation::on_event(int32_t index, const Event& ev) {
  if (index < 0 || static_cast<size_t>(index) >= choices_.size() || done()) return {};
  ChoiceResult& c = choices_[static_cast<size_t>(index)];
  if (!c.finish_reason.empty()) return {};
  const size_t i = static_cast<size_t>(index);
  if (const auto* syntax = std::get_if<serving::OutputSyntax>(&ev)) {
    // Before any token; a retried request's new worker may send another.
    if (meta_.endpoint != Endpoint::Chat || !c.text.empty()) return {};
    syntax_[i] = parser_options(*syntax);
    parsers_[i].reset();
    if (syntax_[i] && stream_) parsers_[i].emplace(*syntax_[i]);
    return {};
  }
  if (const auto* tok = std::get_if<serving::TokenEvent>(&ev)) {
    c.text += tok->text;
    if (!stream_) {
      if (meta_.logprobs) c.tokens.push_back(*tok);
      return {};
    }
    if (parsers_[i]) return delta_chunks(index, parsers_[i]->feed(tok->text), tok);
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
    std::string out;
    size_t calls = 0;
    if (stream_ && parsers_[i]) {
      out += delta_chunks(index, parsers_[i]->feed(fin->text), nullptr);
      out += delta_chunks(index, parsers_[i]->finish(), nullptr);
      calls = parsers_[i]->n_tool_calls();
    } else if (syntax_[i]) {
      c.parsed = chat::parse_output(c.text, *syntax_[i]);
      calls = c.parsed->tool_calls.size();
    }
    // OpenAI's reason when the model ended on its own after calling tools.
    if (calls > 0 && c.finish_reason == "stop") c.finish_reason = "tool_calls";
    if (!stream_) return {};
    out += sse_data(
        finish_chunk(meta_, index, parsers_[i] ? std::string() : fin->text, c.finish_reason));
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
