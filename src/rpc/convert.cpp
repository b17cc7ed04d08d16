// rpc/convert.cpp — serving types to and from cairn.v1 messages; Status to and from gRPC.
#include "rpc/convert.h"

#include <algorithm>
#include <variant>

namespace cairn::rpc {
namespace {

Status invalid(std::string message, std::string param) {
  return Status::invalid_argument(std::move(message), std::move(param));
}

v1::Error::Kind to_proto_kind(StatusCode k) {
  switch (k) {
    case StatusCode::InvalidArgument:
      return v1::Error::INVALID_REQUEST;
    case StatusCode::NotFound:
      return v1::Error::NOT_FOUND;
    case StatusCode::Unavailable:
      return v1::Error::UNAVAILABLE;
    default:
      return v1::Error::INTERNAL;
  }
}

StatusCode from_proto_kind(v1::Error::Kind k) {
  switch (k) {
    case v1::Error::INVALID_REQUEST:
      return StatusCode::InvalidArgument;
    case v1::Error::NOT_FOUND:
      return StatusCode::NotFound;
    case v1::Error::UNAVAILABLE:
      return StatusCode::Unavailable;
    default:
      return StatusCode::Internal;
  }
}

}  // namespace

v1::GenerateRequest to_proto(const serving::GenerateRequest& req, const std::string& request_id) {
  v1::GenerateRequest m;
  m.set_request_id(request_id);
  m.set_model(req.model);
  if (const auto* text = std::get_if<std::string>(&req.prompt)) {
    m.set_text(*text);
  } else if (const auto* ids = std::get_if<std::vector<serving::Token>>(&req.prompt)) {
    m.mutable_tokens()->mutable_ids()->Add(ids->begin(), ids->end());
  } else {
    auto* chat = m.mutable_chat();
    for (const auto& msg : std::get<std::vector<serving::ChatMessage>>(req.prompt)) {
      auto* out = chat->add_messages();
      out->set_role(msg.role);
      out->set_content(msg.content);
      out->set_extra_json(msg.extra_json);
    }
  }
  m.set_tools_json(req.tools_json);
  m.set_add_generation_prompt(req.add_generation_prompt);
  m.set_max_tokens(req.max_tokens);
  for (const auto& s : req.stop) m.add_stop(s);
  m.set_ignore_eos(req.ignore_eos);
  m.set_no_speculation(!req.speculative);
  auto* s = m.mutable_sampling();
  s->set_temperature(req.sampling.temperature);
  s->set_top_k(req.sampling.top_k);
  s->set_top_p(req.sampling.top_p);
  s->set_min_p(req.sampling.min_p);
  s->set_presence_penalty(req.sampling.presence_penalty);
  s->set_frequency_penalty(req.sampling.frequency_penalty);
  s->set_repetition_penalty(req.sampling.repetition_penalty);
  for (const auto& [tok, bias] : req.sampling.logit_bias) (*s->mutable_logit_bias())[tok] = bias;
  if (req.sampling.seed) s->set_seed(*req.sampling.seed);
  m.set_top_logprobs(req.top_logprobs);
  m.set_user(req.user);
  m.set_grammar(req.grammar);
  m.set_tool_choice(static_cast<v1::GenerateRequest::ToolChoice>(req.tool_choice));
  m.set_tool_choice_name(req.tool_choice_name);
  m.set_no_parallel_tool_calls(!req.parallel_tool_calls);
  m.set_chat_template_kwargs_json(req.chat_template_kwargs_json);
  if (req.handoff) {
    m.mutable_handoff()->set_peer(req.handoff->peer);
    m.mutable_handoff()->set_id(req.handoff->id);
  }
  if (req.resume) {
    m.mutable_resume()->set_handoff_id(req.resume->handoff_id);
    m.mutable_resume()->mutable_forced_tokens()->Add(req.resume->forced.begin(),
                                                     req.resume->forced.end());
  }
  return m;
}

Result<serving::GenerateRequest> from_proto(const v1::GenerateRequest& m) {
  serving::GenerateRequest req;
  req.model = m.model();
  switch (m.prompt_case()) {
    case v1::GenerateRequest::kText:
      req.prompt = m.text();
      break;
    case v1::GenerateRequest::kTokens:
      if (static_cast<size_t>(m.tokens().ids_size()) > kMaxPromptTokens)
        return invalid("prompt has more than " + std::to_string(kMaxPromptTokens) + " tokens",
                       "prompt");
      req.prompt = std::vector<serving::Token>(m.tokens().ids().begin(), m.tokens().ids().end());
      break;
    case v1::GenerateRequest::kChat: {
      if (static_cast<size_t>(m.chat().messages_size()) > kMaxChatMessages)
        return invalid("more than " + std::to_string(kMaxChatMessages) + " messages", "messages");
      std::vector<serving::ChatMessage> msgs;
      msgs.reserve(m.chat().messages_size());
      for (const auto& cm : m.chat().messages())
        msgs.push_back({cm.role(), cm.content(), cm.extra_json()});
      req.prompt = std::move(msgs);
      break;
    }
    default:
      return invalid("the request has no prompt (text, tokens or chat)", "prompt");
  }
  req.tools_json = m.tools_json();
  req.add_generation_prompt = m.add_generation_prompt();
  req.max_tokens = m.max_tokens();
  if (static_cast<size_t>(m.stop_size()) > kMaxStopStrings)
    return invalid("at most " + std::to_string(kMaxStopStrings) + " stop strings", "stop");
  req.stop.assign(m.stop().begin(), m.stop().end());
  req.ignore_eos = m.ignore_eos();
  req.speculative = !m.no_speculation();
  if (m.has_sampling()) {
    const auto& s = m.sampling();
    req.sampling.temperature = s.temperature();
    req.sampling.top_k = s.top_k();
    req.sampling.top_p = s.top_p();
    req.sampling.min_p = s.min_p();
    req.sampling.presence_penalty = s.presence_penalty();
    req.sampling.frequency_penalty = s.frequency_penalty();
    req.sampling.repetition_penalty = s.repetition_penalty();
    if (static_cast<size_t>(s.logit_bias_size()) > kMaxLogitBias)
      return invalid("logit_bias has more than " + std::to_string(kMaxLogitBias) + " entries",
                     "logit_bias");
    for (const auto& [tok, bias] : s.logit_bias()) req.sampling.logit_bias[tok] = bias;
    if (s.has_seed()) req.sampling.seed = s.seed();
  }
  req.top_logprobs = m.top_logprobs();
  req.user = m.user();
  req.grammar = m.grammar();
  switch (m.tool_choice()) {
    case v1::GenerateRequest::TOOL_CHOICE_AUTO: req.tool_choice = serving::ToolChoice::Auto; break;
    case v1::GenerateRequest::TOOL_CHOICE_NONE: req.tool_choice = serving::ToolChoice::None; break;
    case v1::GenerateRequest::TOOL_CHOICE_REQUIRED:
      req.tool_choice = serving::ToolChoice::Required;
      break;
    case v1::GenerateRequest::TOOL_CHOICE_NAMED: req.tool_choice = serving::ToolChoice::Named; break;
    default: return invalid("unknown tool_choice", "tool_choice");
  }
  req.tool_choice_name = m.tool_choice_name();
  req.parallel_tool_calls = !m.no_parallel_tool_calls();
  req.chat_template_kwargs_json = m.chat_template_kwargs_json();
  if (m.has_handoff()) {
    const auto& h = m.handoff();
    if (h.peer().empty() || h.peer().size() > kMaxPeerBytes)
      return invalid("handoff.peer must have 1 to " + std::to_string(kMaxPeerBytes) + " bytes",
                     "handoff");
    if (h.id().empty() || h.id().size() > kMaxHandoffIdBytes)
      return invalid("handoff.id must have 1 to " + std::to_string(kMaxHandoffIdBytes) + " bytes",
                     "handoff");
    req.handoff = serving::GenerateRequest::Handoff{h.peer(), h.id()};
  }
  if (m.has_resume()) {
    const auto& r = m.resume();
    if (r.handoff_id().size() > kMaxHandoffIdBytes)
      return invalid(
          "resume.handoff_id is longer than " + std::to_string(kMaxHandoffIdBytes) + " bytes",
          "resume");
    if (static_cast<size_t>(r.forced_tokens_size()) > kMaxPromptTokens)
      return invalid("resume has more than " + std::to_string(kMaxPromptTokens) + " forced tokens",
                     "resume");
    serving::GenerateRequest::Resume res;
    res.handoff_id = r.handoff_id();
    res.forced.assign(r.forced_tokens().begin(), r.forced_tokens().end());
    req.resume = std::move(res);
  }
  return req;
}

v1::KvHeader to_proto(const KvHeader& h) {
  v1::KvHeader m;
  m.set_version(h.geometry.version);
  m.set_model(h.model);
  m.set_n_layer(h.geometry.n_layer);
  m.set_row_elems(h.geometry.row_elems);
  m.set_elem_bytes(h.geometry.elem_bytes);
  m.set_block_tokens(h.geometry.block_tokens);
  m.set_kv_type(std::string(type_info(h.geometry.dtype).name));
  m.mutable_prompt()->Add(h.prompt.begin(), h.prompt.end());
  return m;
}

Result<KvHeader> from_proto(const v1::KvHeader& m) {
  if (m.prompt_size() == 0) return invalid("the K/V header has no prompt", "prompt");
  if (static_cast<size_t>(m.prompt_size()) > kMaxPromptTokens)
    return invalid(
        "the K/V header's prompt has more than " + std::to_string(kMaxPromptTokens) + " tokens",
        "prompt");
  if (m.model().size() > kMaxModelNameBytes)
    return invalid("the K/V header's model name is longer than " +
                       std::to_string(kMaxModelNameBytes) + " bytes",
                   "model");
  KvHeader h;
  h.model = m.model();
  h.geometry.version = m.version();
  h.geometry.n_layer = m.n_layer();
  h.geometry.row_elems = m.row_elems();
  h.geometry.elem_bytes = m.elem_bytes();
  h.geometry.block_tokens = m.block_tokens();
  if (m.kv_type().empty())
    h.geometry.dtype = m.elem_bytes() == 4 ? TensorType::F32 : TensorType::F16;
  else if (m.kv_type() == "f16")
    h.geometry.dtype = TensorType::F16;
  else if (m.kv_type() == "f32")
    h.geometry.dtype = TensorType::F32;
  else if (m.kv_type() == "q8_0")
    h.geometry.dtype = TensorType::Q8_0;
  else
    return invalid(
        "the K/V header's kv_type '" + m.kv_type().substr(0, 32) + "' is not f16, f32 or q8_0",
        "kv_type");
  h.prompt.assign(m.prompt().begin(), m.prompt().end());
  for (serving::Token t : h.prompt)
    if (t < 0) return invalid("the K/V header's prompt has a negative token id", "prompt");
  return h;
}

v1::GenerateEvent to_proto(const serving::OutputSyntax& syntax) {
  v1::GenerateEvent m;
  auto* s = m.mutable_start();
  s->set_tool_format(syntax.tool_format);
  s->set_reasoning_open(syntax.reasoning_open);
  s->set_reasoning_close(syntax.reasoning_close);
  s->set_starts_in_reasoning(syntax.starts_in_reasoning);
  return m;
}

serving::OutputSyntax from_proto(const v1::OutputSyntax& msg) {
  return {msg.tool_format(), msg.reasoning_open(), msg.reasoning_close(), msg.starts_in_reasoning()};
}

v1::GenerateEvent to_proto(const serving::TokenEvent& ev) {
  v1::GenerateEvent m;
  auto* t = m.mutable_token();
  t->set_id(ev.id);
  t->set_text(ev.text);
  t->set_logprob(ev.logprob);
  for (const auto& top : ev.top) {
    auto* o = t->add_top();
    o->set_id(top.id);
    o->set_text(top.text);
    o->set_logprob(top.logprob);
  }
  return m;
}

v1::GenerateEvent to_proto(const serving::FinishEvent& ev) {
  v1::GenerateEvent m;
  auto* f = m.mutable_finish();
  f->set_reason(ev.reason);
  f->set_text(ev.text);
  f->mutable_usage()->set_prompt_tokens(ev.usage.prompt_tokens);
  f->mutable_usage()->set_completion_tokens(ev.usage.completion_tokens);
  f->mutable_usage()->set_cached_prompt_tokens(ev.usage.cached_prompt_tokens);
  f->set_handoff_error(ev.handoff_error);
  return m;
}

v1::Error to_proto_error(const Status& err) {
  v1::Error e;
  e.set_kind(to_proto_kind(err.code()));
  e.set_message(err.message());
  e.set_param(err.param());
  return e;
}

v1::GenerateEvent to_proto(const Status& err) {
  v1::GenerateEvent m;
  *m.mutable_error() = to_proto_error(err);
  return m;
}

serving::TokenEvent from_proto(const v1::TokenEvent& m) {
  serving::TokenEvent ev{m.id(), m.text(), m.logprob(), {}};
  ev.top.reserve(m.top_size());
  for (const auto& t : m.top()) ev.top.push_back({t.id(), t.text(), t.logprob()});
  return ev;
}

serving::FinishEvent from_proto(const v1::FinishEvent& m) {
  serving::FinishEvent ev;
  ev.reason = m.reason();
  ev.text = m.text();
  ev.usage.prompt_tokens = m.usage().prompt_tokens();
  ev.usage.completion_tokens = m.usage().completion_tokens();
  ev.usage.cached_prompt_tokens = m.usage().cached_prompt_tokens();
  ev.handoff_error = m.handoff_error();
  return ev;
}

Status from_proto(const v1::Error& m) {
  const StatusCode code = from_proto_kind(m.kind());
  return Status::error(code, m.message(), m.param());
}

v1::ModelInfo to_proto(const serving::ModelInfo& mi) {
  v1::ModelInfo m;
  m.set_id(mi.id);
  m.set_n_ctx(mi.n_ctx);
  m.set_n_vocab(mi.n_vocab);
  m.set_created(mi.created);
  m.set_parent(mi.parent);
  m.set_root(mi.root);
  m.set_n_ctx_train(mi.n_ctx_train);
  m.set_n_embd(mi.n_embd);
  m.set_n_params(mi.n_params);
  m.set_arch(mi.arch);
  m.set_embeddings_only(!mi.generates);
  m.set_pooling(mi.pooling);
  m.set_chat_template(mi.chat_template);
  return m;
}

serving::ModelInfo from_proto(const v1::ModelInfo& m) {
  serving::ModelInfo mi{m.id(), m.n_ctx(), m.n_vocab(), m.created(), m.parent(), m.root()};
  mi.n_ctx_train = m.n_ctx_train();
  mi.n_embd = m.n_embd();
  mi.n_params = m.n_params();
  mi.arch = m.arch();
  mi.generates = !m.embeddings_only();
  mi.pooling = m.pooling();
  mi.chat_template = m.chat_template();
  return mi;
}

v1::EmbedRequest to_proto(const serving::EmbedRequest& req) {
  v1::EmbedRequest m;
  m.set_model(req.model);
  for (const auto& in : req.inputs) {
    auto* out = m.add_inputs();
    if (const auto* text = std::get_if<std::string>(&in))
      out->set_text(*text);
    else
      out->mutable_tokens()->mutable_ids()->Add(std::get<std::vector<serving::Token>>(in).begin(),
                                                std::get<std::vector<serving::Token>>(in).end());
  }
  if (req.query) m.set_query(*req.query);
  m.set_normalize(req.normalize);
  return m;
}

Result<serving::EmbedRequest> from_proto(const v1::EmbedRequest& m) {
  serving::EmbedRequest req;
  req.model = m.model();
  if (m.inputs_size() == 0) return invalid("the request has no inputs", "input");
  if (static_cast<size_t>(m.inputs_size()) > kMaxEmbedInputs)
    return invalid("more than " + std::to_string(kMaxEmbedInputs) + " inputs", "input");
  size_t tokens = 0;
  req.inputs.reserve(m.inputs_size());
  for (int i = 0; i < m.inputs_size(); ++i) {
    const auto& in = m.inputs(i);
    switch (in.input_case()) {
      case v1::EmbedInput::kText:
        req.inputs.emplace_back(in.text());
        break;
      case v1::EmbedInput::kTokens:
        tokens += static_cast<size_t>(in.tokens().ids_size());
        if (tokens > kMaxPromptTokens)
          return invalid("the inputs hold more than " + std::to_string(kMaxPromptTokens) +
                             " tokens",
                         "input");
        req.inputs.emplace_back(
            std::vector<serving::Token>(in.tokens().ids().begin(), in.tokens().ids().end()));
        break;
      default:
        return invalid("input " + std::to_string(i) + " has neither text nor tokens", "input");
    }
  }
  if (m.has_query()) req.query = m.query();
  req.normalize = m.normalize();
  return req;
}

v1::EmbedResponse to_proto(const serving::EmbedResult& r) {
  v1::EmbedResponse m;
  for (const auto& v : r.vectors) m.add_vectors()->mutable_values()->Add(v.begin(), v.end());
  m.set_prompt_tokens(r.prompt_tokens);
  return m;
}

serving::EmbedResult from_proto(const v1::EmbedResponse& m) {
  serving::EmbedResult r;
  r.vectors.reserve(m.vectors_size());
  for (const auto& v : m.vectors()) r.vectors.emplace_back(v.values().begin(), v.values().end());
  r.prompt_tokens = m.prompt_tokens();
  return r;
}

v1::WorkerStatus worker_status(const serving::Backend& backend) {
  v1::WorkerStatus st;
  for (const auto& m : backend.models()) *st.add_models() = to_proto(m);
  const serving::Health h = backend.health();
  switch (h.state) {
    case serving::HealthState::Loading:
      st.set_state(v1::WorkerStatus::LOADING);
      break;
    case serving::HealthState::Ready:
      st.set_state(v1::WorkerStatus::READY);
      break;
    case serving::HealthState::Draining:
      st.set_state(v1::WorkerStatus::DRAINING);
      break;
  }
  const serving::BackendStats s = backend.stats();
  st.set_running(s.running);
  st.set_waiting(s.waiting);
  st.set_kv_blocks_used(s.kv_blocks_used);
  st.set_kv_blocks_total(s.kv_blocks_total);
  st.set_queue_length(s.running + s.waiting);
  st.set_requests_total(s.e2e_latency_s.count);
  st.set_prompt_tokens_total(s.prompt_tokens_total);
  st.set_generated_tokens_total(s.generated_tokens_total);
  st.set_prefix_cache_queries(s.prefix_cache_queries);
  st.set_prefix_cache_hits(s.prefix_cache_hits);
  st.set_preemptions(s.preemptions);
  st.set_spec_draft_tokens_total(s.spec_draft_tokens_total);
  st.set_spec_accepted_tokens_total(s.spec_accepted_tokens_total);
  return st;
}

v1::WorkerStatus worker_status(const serving::Backend& backend, const std::string& role,
                               const serving::HandoffCounters* handoff) {
  v1::WorkerStatus st = worker_status(backend);
  st.set_role(role);
  if (handoff) *st.mutable_handoff() = to_proto(handoff->snapshot());
  return st;
}

v1::HandoffCounters to_proto(const serving::HandoffCountersSnapshot& c) {
  v1::HandoffCounters m;
  m.set_sent(c.sent);
  m.set_send_failed(c.send_failed);
  m.set_bytes_sent(c.bytes_sent);
  m.set_received(c.received);
  m.set_bytes_received(c.bytes_received);
  m.set_resumed(c.resumed);
  m.set_expired(c.expired);
  m.mutable_seconds_bounds()->Add(c.seconds.bounds.begin(), c.seconds.bounds.end());
  m.mutable_seconds_counts()->Add(c.seconds.counts.begin(), c.seconds.counts.end());
  m.set_seconds_sum(c.seconds.sum);
  return m;
}

serving::HandoffCountersSnapshot from_proto(const v1::HandoffCounters& m) {
  serving::HandoffCountersSnapshot c;
  c.sent = m.sent();
  c.send_failed = m.send_failed();
  c.bytes_sent = m.bytes_sent();
  c.received = m.received();
  c.bytes_received = m.bytes_received();
  c.resumed = m.resumed();
  c.expired = m.expired();
  // A peer's histogram is used only when its shape is sound.
  if (m.seconds_counts_size() == m.seconds_bounds_size() + 1 &&
      static_cast<size_t>(m.seconds_bounds_size()) <= 64) {
    c.seconds.bounds.assign(m.seconds_bounds().begin(), m.seconds_bounds().end());
    c.seconds.counts.assign(m.seconds_counts().begin(), m.seconds_counts().end());
    c.seconds.sum = m.seconds_sum();
    for (uint64_t n : c.seconds.counts) c.seconds.count += n;
  }
  return c;
}

serving::Health health_of(const v1::WorkerStatus& st) {
  serving::Health h;
  switch (st.state()) {
    case v1::WorkerStatus::READY:
      h.state = serving::HealthState::Ready;
      break;
    case v1::WorkerStatus::DRAINING:
      h.state = serving::HealthState::Draining;
      break;
    default:
      h.state = serving::HealthState::Loading;
      break;
  }
  h.running = st.running();
  h.waiting = st.waiting();
  return h;
}

serving::BackendStats stats_of(const v1::WorkerStatus& st) {
  serving::BackendStats s;
  s.running = st.running();
  s.waiting = st.waiting();
  s.kv_blocks_used = st.kv_blocks_used();
  s.kv_blocks_total = st.kv_blocks_total();
  s.prompt_tokens_total = st.prompt_tokens_total();
  s.generated_tokens_total = st.generated_tokens_total();
  s.prefix_cache_queries = st.prefix_cache_queries();
  s.prefix_cache_hits = st.prefix_cache_hits();
  s.preemptions = st.preemptions();
  s.spec_draft_tokens_total = st.spec_draft_tokens_total();
  s.spec_accepted_tokens_total = st.spec_accepted_tokens_total();
  return s;
}

grpc::Status to_grpc_status(const Status& status) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (status.code()) {
    case StatusCode::Ok:
      return grpc::Status::OK;
    case StatusCode::InvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case StatusCode::NotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case StatusCode::Unavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case StatusCode::Cancelled:
      code = grpc::StatusCode::CANCELLED;
      break;
    case StatusCode::DeadlineExceeded:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case StatusCode::Unauthenticated:
      code = grpc::StatusCode::UNAUTHENTICATED;
      break;
    case StatusCode::Internal:
    case StatusCode::NoRoute:
    case StatusCode::MethodNotAllowed:
    case StatusCode::BodyTooLarge:
    case StatusCode::HeadersTooLarge:
    case StatusCode::MalformedRequest:
      code = grpc::StatusCode::INTERNAL;
      break;
  }
  return grpc::Status(code, status.message(), status.param());
}

Status from_grpc_status(const grpc::Status& st) {
  StatusCode code = StatusCode::Internal;
  switch (st.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::FAILED_PRECONDITION:
      code = StatusCode::InvalidArgument;
      break;
    case grpc::StatusCode::NOT_FOUND:
      code = StatusCode::NotFound;
      break;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::CANCELLED:
      code = StatusCode::Unavailable;
      break;
    default:
      break;
  }
  return Status::error(code, st.error_message(), st.error_details());
}

v1::Value to_proto(const values::Value& v) {
  v1::Value out;
  struct Visitor {
    v1::Value& out;
    void operator()(const values::Tensor& t) const {
      auto* m = out.mutable_tensor_value();
      m->set_dtype(values::dtype_name(t.dtype));
      m->mutable_shape()->Add(t.shape.begin(), t.shape.end());
      m->set_data(t.data);
    }
    void operator()(const std::string& s) const { out.set_string_value(s); }
    void operator()(const values::Bytes& b) const { out.set_bytes_value(b.data); }
    void operator()(bool b) const { out.set_bool_value(b); }
    void operator()(int64_t i) const { out.set_int_value(i); }
    void operator()(double d) const { out.set_double_value(d); }
  };
  std::visit(Visitor{out}, v);
  return out;
}

Result<values::Value> from_proto(const v1::Value& v) {
  switch (v.kind_case()) {
    case v1::Value::kStringValue:
      return values::Value(v.string_value());
    case v1::Value::kIntValue:
      return values::Value(static_cast<int64_t>(v.int_value()));
    case v1::Value::kDoubleValue:
      return values::Value(v.double_value());
    case v1::Value::kBoolValue:
      return values::Value(v.bool_value());
    case v1::Value::kBytesValue:
      return values::Value(values::Bytes{v.bytes_value()});
    case v1::Value::kTensorValue: {
      const auto& t = v.tensor_value();
      auto dtype = values::dtype_from_name(t.dtype());
      if (!dtype) {
        std::string name = t.dtype().substr(0, 32);
        for (char& c : name)
          if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
            c = '?';
        return Status::invalid_argument(
            "unknown tensor dtype '" + name +
            "' (bool, int8..int64, uint8..uint64, float16, bfloat16, float32, float64)");
      }
      // The rank is checked before the shape is copied.
      if (static_cast<size_t>(t.shape_size()) > values::kMaxTensorRank)
        return Status::invalid_argument("a tensor has rank " + std::to_string(t.shape_size()) +
                                        ", at most " + std::to_string(values::kMaxTensorRank) +
                                        " is allowed");
      std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
      auto made = values::Tensor::make(*dtype, std::move(shape), t.data());
      if (!made.is_ok()) return made.status();
      return values::Value(std::move(made).value());
    }
    case v1::Value::KIND_NOT_SET:
      break;
  }
  return Status::invalid_argument("a value has no kind set");
}

v1::Instance to_proto(const values::Instance& inst) {
  v1::Instance out;
  auto* items = out.mutable_items();
  for (const auto& [name, value] : inst) (*items)[name] = to_proto(value);
  return out;
}

Result<values::Instance> from_proto(const v1::Instance& inst) {
  values::Instance out;
  for (const auto& [name, value] : inst.items()) {
    auto v = from_proto(value);
    if (!v.is_ok()) {
      // Names are cut short (at a UTF-8 boundary) so an error stays small.
      size_t n = std::min<size_t>(name.size(), 64);
      while (n > 0 && n < name.size() && (static_cast<unsigned char>(name[n]) & 0xC0) == 0x80) --n;
      return v.status().with_context("input '" + name.substr(0, n) +
                                     (n < name.size() ? "...'" : "'"));
    }
    out.emplace(name, std::move(v).value());
  }
  return out;
}

}  // namespace cairn::rpc
