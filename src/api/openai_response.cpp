// api/openai_response.cpp — OpenAI response JSON, SSE framing, errors and /metrics text.
#include "api/openai_response.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "api/servable_json.h"
#include "serving/prometheus.h"

namespace cairn::api {

using nlohmann::json;
using serving::TokenEvent;

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

HttpError to_http_error(const Status& s) {
  struct Shape {
    int status;
    const char* type;
    const char* code;  // nullptr: null in the body
  };
  constexpr const char* kInvalid = "invalid_request_error";
  constexpr const char* kServer = "server_error";
  Shape shape{500, kServer, nullptr};
  switch (s.code()) {
    case StatusCode::InvalidArgument:
      shape = {400, kInvalid, nullptr};
      break;
    case StatusCode::NotFound:
      shape = {404, kInvalid, "model_not_found"};
      break;
    case StatusCode::Unavailable:
      shape = {503, kServer, "service_unavailable"};
      break;
    case StatusCode::Ok:  // not an error; answered as one rather than as success
    case StatusCode::Internal:
      shape = {500, kServer, nullptr};
      break;
    case StatusCode::Unauthenticated:
      shape = {401, "authentication_error", "invalid_api_key"};
      break;
    case StatusCode::NoRoute:
      shape = {404, "not_found_error", "not_found"};
      break;
    case StatusCode::MethodNotAllowed:
      shape = {405, kInvalid, "method_not_allowed"};
      break;
    case StatusCode::BodyTooLarge:
      shape = {413, kInvalid, "request_too_large"};
      break;
    case StatusCode::HeadersTooLarge:
      shape = {431, kInvalid, "request_header_fields_too_large"};
      break;
    case StatusCode::MalformedRequest:
      shape = {400, kInvalid, "bad_request"};
      break;
    case StatusCode::DeadlineExceeded:
      shape = {504, kServer, "timeout"};
      break;
    case StatusCode::Cancelled:
      shape = {499, kInvalid, "cancelled"};
      break;
  }
  json err = {{"message", s.message()},
              {"type", shape.type},
              {"param", s.param().empty() ? json(nullptr) : json(s.param())},
              {"code", shape.code ? json(shape.code) : json(nullptr)}};
  return HttpError{shape.status, {{"error", std::move(err)}}};
}

std::string sse_data(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

std::string new_response_id(Endpoint endpoint) {
  // Unique enough for correlating logs: a random 64-bit value plus a counter.
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}() * 0x9E3779B97F4A7C15ull;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%04llx",
                static_cast<unsigned long long>(salt ^ (counter.fetch_add(1) * 0xBF58476D1CE4E5B9ull)),
                static_cast<unsigned long long>(counter.load() & 0xffff));
  return (endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-") + std::string(buf);
}

namespace {

// The token's own text: from its top-N entry when there is one (the event's
// `text` may hold back bytes or merge a released prefix).
const std::string& token_text(const TokenEvent& ev) {
  for (const auto& t : ev.top)
    if (t.id == ev.id) return t.text;
  return ev.text;
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Log-probabilities can be -inf for impossible tokens; JSON has no infinity.
double finite_lp(float lp) { return std::isfinite(lp) ? lp : -9999.0; }

json chat_logprob_entry(const TokenEvent& ev) {
  json top = json::array();
  for (const auto& t : ev.top)
    top.push_back({{"token", t.text}, {"logprob", finite_lp(t.logprob)}, {"bytes", bytes_of(t.text)}});
  const std::string& text = token_text(ev);
  return {{"token", text},
          {"logprob", finite_lp(ev.logprob)},
          {"bytes", bytes_of(text)},
          {"top_logprobs", std::move(top)}};
}

json completion_top(const TokenEvent& ev) {
  json top = json::object();
  for (const auto& t : ev.top) top[t.text] = finite_lp(t.logprob);
  if (top.empty()) top[token_text(ev)] = finite_lp(ev.logprob);
  return top;
}

json completion_logprobs(const std::vector<TokenEvent>& tokens, int64_t offset) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const auto& ev : tokens) {
    const std::string& text = token_text(ev);
    toks.push_back(text);
    lps.push_back(finite_lp(ev.logprob));
    tops.push_back(completion_top(ev));
    offs.push_back(offset);
    offset += static_cast<int64_t>(text.size());
  }
  return {{"tokens", std::move(toks)},
          {"token_logprobs", std::move(lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offs)}};
}

json chunk_base(const ResponseMeta& meta) {
  return {{"id", meta.id},
          {"object", meta.endpoint == Endpoint::Chat ? "chat.completion.chunk" : "text_completion"},
          {"created", meta.created},
          {"model", meta.model}};
}

json null_if_empty(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

}  // namespace

json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

json total_usage(const std::vector<ChoiceResult>& choices, int32_t n) {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    completion += choices[i].usage.completion_tokens;
    if (n <= 0 || i % static_cast<size_t>(n) == 0) {
      prompt += choices[i].usage.prompt_tokens;
      cached += choices[i].usage.cached_prompt_tokens;
    }
  }
  return usage_json(prompt, completion, cached);
}

// A chat message from parsed output: content null when it is empty beside
// tool calls (as OpenAI sends it); reasoning_content and tool_calls only
// when there are some.
json parsed_message(const chat::ParsedOutput& p) {
  json m = {{"role", "assistant"}};
  m["content"] = p.content.empty() && !p.tool_calls.empty() ? json(nullptr) : json(p.content);
  if (!p.reasoning_content.empty()) m["reasoning_content"] = p.reasoning_content;
  if (!p.tool_calls.empty()) {
    json calls = json::array();
    for (const auto& call : p.tool_calls)
      calls.push_back({{"id", call.id},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

json full_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices, int32_t n) {
  json out = {{"id", meta.id},
              {"object", meta.endpoint == Endpoint::Chat ? "chat.completion" : "text_completion"},
              {"created", meta.created},
              {"model", meta.model}};
  json arr = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const auto& c = choices[i];
    json choice = {{"index", i}, {"finish_reason", null_if_empty(c.finish_reason)}};
    if (meta.endpoint == Endpoint::Chat) {
      choice["message"] = c.parsed ? parsed_message(*c.parsed)
                                   : json{{"role", "assistant"}, {"content", c.text}};
      if (meta.logprobs) {
        json content = json::array();
        for (const auto& ev : c.tokens) content.push_back(chat_logprob_entry(ev));
        choice["logprobs"] = {{"content", std::move(content)}};
      } else {
        choice["logprobs"] = nullptr;
      }
    } else {
      choice["text"] = c.text;
      choice["logprobs"] = meta.logprobs ? completion_logprobs(c.tokens, 0) : json(nullptr);
    }
    arr.push_back(std::move(choice));
  }
  out["choices"] = std::move(arr);
  out["usage"] = total_usage(choices, n);
  return out;
}

json role_chunk(const ResponseMeta& meta, int32_t index) {
  json c = chunk_base(meta);
  c["choices"] = json::array({{{"index", index},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  return c;
}

json token_chunk(const ResponseMeta& meta, int32_t index, const TokenEvent& ev,
                 int64_t text_offset) {
  json c = chunk_base(meta);
  json choice = {{"index", index}, {"finish_reason", nullptr}};
  if (meta.endpoint == Endpoint::Chat) {
    choice["delta"] = {{"content", ev.text}};
    choice["logprobs"] =
        meta.logprobs ? json{{"content", json::array({chat_logprob_entry(ev)})}} : json(nullptr);
  } else {
    choice["text"] = ev.text;
    choice["logprobs"] = meta.logprobs ? completion_logprobs({ev}, text_offset) : json(nullptr);
  }
  c["choices"] = json::array({std::move(choice)});
  return c;
}

json delta_chunk(const ResponseMeta& meta, int32_t index, const chat::OutputDelta& d,
                 const TokenEvent* logprobs_of) {
  using Kind = chat::OutputDelta::Kind;
  json delta;
  switch (d.kind) {
    case Kind::Content:
      delta = {{"content", d.text}};
      break;
    case Kind::Reasoning:
      delta = {{"reasoning_content", d.text}};
      break;
    case Kind::ToolCallBegin:
      delta = {{"tool_calls", json::array({{{"index", d.index},
                                             {"id", d.id},
                                             {"type", "function"},
                                             {"function", {{"name", d.name}, {"arguments", ""}}}}})}};
      break;
    case Kind::ToolCallArgs:
      delta = {{"tool_calls",
                json::array({{{"index", d.index}, {"function", {{"arguments", d.text}}}}})}};
      break;
  }
  json c = chunk_base(meta);
  json choice = {{"index", index}, {"delta", std::move(delta)}, {"finish_reason", nullptr}};
  choice["logprobs"] = logprobs_of && meta.logprobs
                           ? json{{"content", json::array({chat_logprob_entry(*logprobs_of)})}}
                           : json(nullptr);
  c["choices"] = json::array({std::move(choice)});
  return c;
}

json finish_chunk(const ResponseMeta& meta, int32_t index, const std::string& text,
                  const std::string& finish_reason) {
  json c = chunk_base(meta);
  json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
  if (meta.endpoint == Endpoint::Chat)
    choice["delta"] = text.empty() ? json::object() : json{{"content", text}};
  else
    choice["text"] = text;
  c["choices"] = json::array({std::move(choice)});
  return c;
}

json usage_chunk(const ResponseMeta& meta, const json& usage) {
  json c = chunk_base(meta);
  c["choices"] = json::array();
  c["usage"] = usage;
  return c;
}

namespace {

void histogram(std::string& out, const std::string& name, const char* help,
               const serving::Histogram& h, const std::string& labels) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cum = 0;
  char buf[64];
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cum += i < h.counts.size() ? h.counts[i] : 0;
    std::snprintf(buf, sizeof buf, "%g", h.bounds[i]);
    out += name + "_bucket{" + labels + ",le=\"" + buf + "\"} " + std::to_string(cum) + "\n";
  }
  out += name + "_bucket{" + labels + ",le=\"+Inf\"} " + std::to_string(h.count) + "\n";
  std::snprintf(buf, sizeof buf, "%.9g", h.sum);
  out += name + "_sum{" + labels + "} " + buf + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(h.count) + "\n";
}

void scalar(std::string& out, const std::string& name, const char* type, const char* help,
            const std::string& labels, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  out += name + "{" + labels + "} " + buf + "\n";
}


}  // namespace

std::string metrics_text(const serving::BackendStats& s, const RequestCounts& requests,
                         const std::string& model) {
  const std::string labels = "model=\"" + serving::prometheus_label(model) + "\"";
  std::string out;
  out += "# HELP cairn_http_requests_total HTTP requests by route and status code.\n";
  out += "# TYPE cairn_http_requests_total counter\n";
  for (const auto& [key, count] : requests)
    out += "cairn_http_requests_total{route=\"" + serving::prometheus_label(key.first) + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(count) + "\n";
  struct Row {
    const char* name;
    const char* type;
    const char* help;
    double value;
  };
  const Row rows[] = {
      {"cairn_prompt_tokens_total", "counter", "Prompt tokens processed.",
       double(s.prompt_tokens_total)},
      {"cairn_generation_tokens_total", "counter", "Tokens generated.",
       double(s.generated_tokens_total)},
      {"cairn_requests_running", "gauge", "Requests in the running batch.", double(s.running)},
      {"cairn_requests_waiting", "gauge", "Requests waiting to be scheduled.", double(s.waiting)},
      {"cairn_kv_blocks_used", "gauge", "KV cache blocks held by live sequences.",
       double(s.kv_blocks_used)},
      {"cairn_kv_blocks_total", "gauge", "KV cache blocks in the pool.", double(s.kv_blocks_total)},
      {"cairn_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
       double(s.prefix_cache_queries)},
      {"cairn_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
       double(s.prefix_cache_hits)},
      {"cairn_preemptions_total", "counter", "Sequences preempted for lack of KV blocks.",
       double(s.preemptions)},
      {"cairn_spec_draft_tokens_total", "counter",
       "Speculative draft tokens verified (prompt lookup or a draft model).",
       double(s.spec_draft_tokens_total)},
      {"cairn_spec_accepted_tokens_total", "counter",
       "Speculative draft tokens accepted (emitted without a step of their own).",
       double(s.spec_accepted_tokens_total)},
      {"cairn_requests_cancelled_total", "counter", "Requests cancelled before they ended.",
       double(s.requests_cancelled)},
      {"cairn_embedding_inputs_total", "counter", "Inputs embedded (embeddings and rerank).",
       double(s.embedding_inputs_total)},
      {"cairn_embedding_tokens_total", "counter", "Tokens of the inputs embedded.",
       double(s.embedding_tokens_total)},
  };
  for (const auto& r : rows) scalar(out, r.name, r.type, r.help, labels, r.value);
  histogram(out, "cairn_time_to_first_token_seconds", "Time to first token.",
            s.time_to_first_token_s, labels);
  histogram(out, "cairn_inter_token_latency_seconds", "Time between generated tokens.",
            s.inter_token_latency_s, labels);
  histogram(out, "cairn_request_queue_time_seconds", "Time requests waited before running.",
            s.queue_time_s, labels);
  histogram(out, "cairn_e2e_request_latency_seconds", "End-to-end request latency.",
            s.e2e_latency_s, labels);
  return out;
}

json embeddings_response(const std::string& model, const serving::EmbedResult& result,
                         bool base64) {
  json data = json::array();
  for (size_t i = 0; i < result.vectors.size(); ++i) {
    const auto& v = result.vectors[i];
    json entry = {{"object", "embedding"}, {"index", i}};
    if (base64) {
      std::string bytes(v.size() * sizeof(float), '\0');
      for (size_t k = 0; k < v.size(); ++k) {
        uint32_t bits;
        std::memcpy(&bits, &v[k], sizeof bits);
        for (int b = 0; b < 4; ++b) bytes[k * 4 + (size_t)b] = static_cast<char>((bits >> (8 * b)) & 0xff);
      }
      entry["embedding"] = base64_encode(bytes);
    } else {
      entry["embedding"] = v;
    }
    data.push_back(std::move(entry));
  }
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", model},
          {"usage", {{"prompt_tokens", result.prompt_tokens}, {"total_tokens", result.prompt_tokens}}}};
}

json rerank_response(const RerankRequest& request, const serving::EmbedResult& result) {
  std::vector<size_t> order(result.vectors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto score = [&](size_t i) { return result.vectors[i].empty() ? 0.0f : result.vectors[i][0]; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score(a) > score(b); });
  if (request.top_n && (size_t)*request.top_n < order.size()) order.resize((size_t)*request.top_n);
  json results = json::array();
  for (size_t i : order) {
    json r = {{"index", i}, {"relevance_score", score(i)}};
    if (request.return_documents && i < request.documents.size())
      r["document"] = {{"text", request.documents[i]}};
    results.push_back(std::move(r));
  }
  return {{"object", "list"},
          {"model", request.model},
          {"results", std::move(results)},
          {"usage", {{"prompt_tokens", result.prompt_tokens}, {"total_tokens", result.prompt_tokens}}}};
}

}  // namespace cairn::api
