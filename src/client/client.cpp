// client/client.cpp — the C++ Serving client: requests, replies, gRPC failures as values.
// A reply from the server is input like any other: indexes and counts are
// checked before they are used, and a malformed reply is an error, not a crash.
#include "client/client.h"

#include <grpcpp/grpcpp.h>

#include <exception>

#include "cairn/v1/serving.grpc.pb.h"

namespace cairn {

namespace v1 = cairn::v1;

std::string InferValue::as_string(std::string fallback) const {
  if (auto* s = std::get_if<std::string>(&v_)) return *s;
  return fallback;
}
int64_t InferValue::as_int(int64_t fallback) const {
  if (auto* i = std::get_if<int64_t>(&v_)) return *i;
  return fallback;
}
double InferValue::as_double(double fallback) const {
  if (auto* d = std::get_if<double>(&v_)) return *d;
  if (auto* i = std::get_if<int64_t>(&v_)) return static_cast<double>(*i);
  return fallback;
}
bool InferValue::as_bool(bool fallback) const {
  if (auto* b = std::get_if<bool>(&v_)) return *b;
  return fallback;
}

std::string InferOutput::text() const {
  auto it = values.find("text");
  return it == values.end() ? std::string() : it->second.as_string();
}

namespace {

v1::Value to_proto(const InferValue& v) {
  v1::Value out;
  std::visit(
      [&out](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>)
          out.set_string_value(x);
        else if constexpr (std::is_same_v<T, int64_t>)
          out.set_int_value(x);
        else if constexpr (std::is_same_v<T, double>)
          out.set_double_value(x);
        else if constexpr (std::is_same_v<T, bool>)
          out.set_bool_value(x);
        else if constexpr (std::is_same_v<T, values::Bytes>)
          out.set_bytes_value(x.data);
        else {
          auto* t = out.mutable_tensor_value();
          t->set_dtype(values::dtype_name(x.dtype));
          t->mutable_shape()->Add(x.shape.begin(), x.shape.end());
          t->set_data(x.data);
        }
      },
      v.get());
  return out;
}

// A reply's values; a tensor whose dtype, shape and data disagree (or a
// value with no kind) makes the reply malformed.
Result<InferInstance> from_proto(const v1::Instance& inst) {
  InferInstance out;
  for (const auto& [name, v] : inst.items()) {
    switch (v.kind_case()) {
      case v1::Value::kStringValue:
        out[name] = v.string_value();
        break;
      case v1::Value::kIntValue:
        out[name] = v.int_value();
        break;
      case v1::Value::kDoubleValue:
        out[name] = v.double_value();
        break;
      case v1::Value::kBoolValue:
        out[name] = v.bool_value();
        break;
      case v1::Value::kBytesValue:
        out[name] = values::Bytes{v.bytes_value()};
        break;
      case v1::Value::kTensorValue: {
        const auto& t = v.tensor_value();
        auto dtype = values::dtype_from_name(t.dtype());
        if (!dtype)
          return Status::internal("the server sent output '" + name.substr(0, 64) +
                                  "' with an unknown tensor dtype");
        if (static_cast<size_t>(t.shape_size()) > values::kMaxTensorRank)
          return Status::internal("the server sent output '" + name.substr(0, 64) +
                                  "' with too many dimensions");
        auto made = values::Tensor::make(*dtype, {t.shape().begin(), t.shape().end()}, t.data());
        if (!made.is_ok())
          return Status::internal("the server sent a malformed tensor for output '" +
                                  name.substr(0, 64) + "': " + made.status().message());
        out[name] = std::move(made).value();
        break;
      }
      case v1::Value::KIND_NOT_SET:
        return Status::internal("the server sent output '" + name.substr(0, 64) +
                                "' with no value");
    }
  }
  return out;
}

// A failed call, told in the client's words (the server's message kept).
Status from_status(const grpc::Status& st, const std::string& address,
                   std::chrono::milliseconds deadline) {
  switch (st.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      return Status::invalid_argument(st.error_message());
    case grpc::StatusCode::NOT_FOUND:
      return Status::not_found(st.error_message());
    case grpc::StatusCode::CANCELLED:
      return Status::error(StatusCode::Cancelled, "the call was cancelled: " + st.error_message());
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return Status::error(StatusCode::DeadlineExceeded,
                           "no reply from " + address + " within the deadline of " +
                               std::to_string(deadline.count()) + " ms");
    case grpc::StatusCode::UNAVAILABLE:
      return Status::unavailable("the Serving endpoint at " + address +
                                 " is unavailable: " + st.error_message());
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return Status::unavailable(st.error_message());
    case grpc::StatusCode::UNIMPLEMENTED:
      return Status::not_found(address + " does not serve cairn.v1.Serving: " + st.error_message());
    default:
      return Status::internal(st.error_message());
  }
}

// An error entry of a reply: its HTTP-like code (400, 404, 503, 500) as a kind.
Status reply_error(const v1::ErrorMsg& e) {
  switch (e.error_code()) {
    case 400:
      return Status::invalid_argument(e.error_msg());
    case 404:
      return Status::not_found(e.error_msg());
    case 503:
      return Status::unavailable(e.error_msg());
    default:
      return Status::internal(e.error_msg());
  }
}

}  // namespace

struct Client::Impl {
  std::string address;
  std::string servable;
  std::string method;
  ClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Serving::Stub> stub;

  void prepare(grpc::ClientContext& ctx) const {
    ctx.set_deadline(std::chrono::system_clock::now() + options.deadline);
  }
  v1::PredictRequest request(const std::vector<InferInstance>& inputs) const {
    v1::PredictRequest req;
    req.mutable_servable_spec()->set_name(servable);
    req.mutable_servable_spec()->set_method_name(method);
    req.mutable_servable_spec()->set_version_number(options.version);
    for (const auto& inst : inputs) {
      auto* items = req.add_instances()->mutable_items();
      for (const auto& [name, value] : inst) (*items)[name] = to_proto(value);
    }
    return req;
  }
  Status error(const grpc::Status& st) const { return from_status(st, address, options.deadline); }
};

Client::Client(std::string address, std::string servable, std::string method, ClientOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->address = std::move(address);
  impl_->servable = std::move(servable);
  impl_->method = std::move(method);
  impl_->options = options;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  impl_->channel =
      grpc::CreateCustomChannel(impl_->address, grpc::InsecureChannelCredentials(), args);
  impl_->stub = v1::Serving::NewStub(impl_->channel);
}

Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

void Client::set_deadline(std::chrono::milliseconds deadline) {
  impl_->options.deadline = deadline;
}

void Client::set_version(uint64_t version) { impl_->options.version = version; }

ClientResult<std::vector<InferOutput>> Client::infer(const std::vector<InferInstance>& inputs) {
  grpc::ClientContext ctx;
  impl_->prepare(ctx);
  v1::PredictReply reply;
  grpc::Status st = impl_->stub->Predict(&ctx, impl_->request(inputs), &reply);
  if (!st.ok()) return impl_->error(st);
  // One error entry and no instances: the whole request was refused.
  if (reply.instances_size() == 0 && reply.error_msg_size() >= 1)
    return reply_error(reply.error_msg(0));
  if (static_cast<size_t>(reply.instances_size()) != inputs.size())
    return Status::internal("the server replied with " + std::to_string(reply.instances_size()) +
                            " instances for " + std::to_string(inputs.size()) + " inputs");
  if (reply.error_msg_size() != 0 && reply.error_msg_size() != reply.instances_size())
    return Status::internal("the server replied with a malformed error list");
  std::vector<InferOutput> out(inputs.size());
  for (int i = 0; i < reply.instances_size(); ++i) {
    auto values = from_proto(reply.instances(i));
    if (!values.is_ok()) return values.status();
    out[i].values = std::move(values).value();
    out[i].version = reply.servable_spec().version_number();
    if (reply.error_msg_size() != 0 && reply.error_msg(i).error_code() != 0)
      out[i].error = reply_error(reply.error_msg(i));
  }
  return out;
}

ClientResult<std::vector<InferOutput>> Client::infer_stream(
    const std::vector<InferInstance>& inputs, const StreamCallback& on_event) {
  grpc::ClientContext ctx;
  impl_->prepare(ctx);
  auto reader = impl_->stub->PredictStream(&ctx, impl_->request(inputs));
  std::vector<InferOutput> out(inputs.size());
  std::vector<std::string> texts(inputs.size());
  std::vector<bool> finished(inputs.size(), false);
  std::optional<Status> bad_reply;
  v1::PredictReply reply;
  while (reader->Read(&reply)) {
    const uint32_t i = reply.instance_index();
    std::optional<Result<InferInstance>> values;
    if (i < inputs.size() && reply.instances_size() == 1) values = from_proto(reply.instances(0));
    if (i >= inputs.size() || reply.instances_size() > 1 || finished[i] ||
        (values && !values->is_ok())) {
      bad_reply = values && !values->is_ok()
                      ? values->status()
                      : Status::internal("the server sent a malformed stream reply (instance " +
                                         std::to_string(i) + ")");
      ctx.TryCancel();  // stop reading; Finish below then returns promptly
      break;
    }
    StreamEvent ev;
    ev.instance = i;
    if (reply.error_msg_size() > 0) {
      ev.last = true;
      ev.error = reply_error(reply.error_msg(0));
      out[i].error = ev.error;
      out[i].version = reply.servable_spec().version_number();
    } else if (reply.final()) {
      // A servable's last reply: all the instance's outputs.
      ev.last = true;
      if (values) out[i].values = std::move(**values);
      out[i].version = reply.servable_spec().version_number();
    } else if (values) {
      InferInstance& v = **values;
      auto fr = v.find("finish_reason");
      if (fr != v.end()) {  // a model's last reply
        ev.text = v["text"].as_string();
        texts[i] += ev.text;
        ev.last = true;
        ev.finish_reason = fr->second.as_string();
        ev.prompt_tokens = v["prompt_tokens"].as_int();
        ev.completion_tokens = v["completion_tokens"].as_int();
        v["text"] = texts[i];
        out[i].values = std::move(v);
        out[i].version = 1;
      } else if (!v.empty()) {  // new text of one output
        ev.output = v.begin()->first;
        ev.text = v.begin()->second.as_string();
        if (ev.output == "text") texts[i] += ev.text;
      }
    }
    if (ev.last) finished[i] = true;
    if (on_event) on_event(ev);
  }
  grpc::Status st = reader->Finish();
  if (bad_reply) return *bad_reply;
  if (!st.ok()) return impl_->error(st);
  for (size_t i = 0; i < out.size(); ++i)
    if (!finished[i])
      out[i].error =
          Status::internal("the stream ended before instance " + std::to_string(i) + " finished");
  return out;
}

ClientResult<std::vector<ServableInfo>> Client::list_servables() {
  grpc::ClientContext ctx;
  impl_->prepare(ctx);
  v1::ListServablesReply reply;
  grpc::Status st = impl_->stub->ListServables(&ctx, v1::ListServablesRequest(), &reply);
  if (!st.ok()) return impl_->error(st);
  std::vector<ServableInfo> out;
  for (const auto& s : reply.servables()) {
    ServableInfo info;
    info.name = s.name();
    info.methods.assign(s.methods().begin(), s.methods().end());
    info.n_ctx = s.n_ctx();
    info.versions.assign(s.versions().begin(), s.versions().end());
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace cairn
