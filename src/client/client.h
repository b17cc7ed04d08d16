// client/client.h — the C++ client of the cairn.v1.Serving gRPC API.
// Owns one channel to a Serving endpoint (`cairn serve --grpc-port`, `cairn
// controller`) and the conversion between small C++ values and the wire.
// Never throws across this header (failures are cairn::Status values) and
// never includes gRPC (an Impl pointer hides it), so users compile fast. Every
// call has a deadline (default 600 s).
//
//   cairn::Client client("127.0.0.1:5500", "stories260K", "generate");
//   auto out = client.infer({{{"prompt", "Once upon a time"}, {"max_tokens", 16}}});
//   if (!out.is_ok()) ... out.status().code(), out.status().message()
//
// A servable from a servable_config.py takes and returns tensors and bytes
// too (core/value.h; core/npy.h reads and writes .npy files):
//   cairn::Client calc("127.0.0.1:5500", "calc", "add");
//   calc.set_version(1);  // 0 (the default): the newest loaded version
//   auto y = calc.infer({{{"x1", values::make_tensor(std::vector<float>{1, 2}, {2})},
//                         {"x2", values::make_tensor(std::vector<float>{3, 4}, {2})}}});
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/status.h"
#include "core/value.h"

namespace cairn {

// One named input or output value: a string, an integer, a double, a bool,
// a tensor or raw bytes.
class InferValue {
 public:
  using Variant = std::variant<std::string, int64_t, double, bool, values::Tensor, values::Bytes>;
  InferValue() = default;
  InferValue(std::string s) : v_(std::move(s)) {}     // NOLINT: implicit by design
  InferValue(const char* s) : v_(std::string(s)) {}   // NOLINT
  InferValue(int i) : v_(static_cast<int64_t>(i)) {}  // NOLINT
  InferValue(int64_t i) : v_(i) {}                    // NOLINT
  InferValue(double d) : v_(d) {}                     // NOLINT
  InferValue(bool b) : v_(b) {}                       // NOLINT
  InferValue(values::Tensor t) : v_(std::move(t)) {}  // NOLINT
  InferValue(values::Bytes b) : v_(std::move(b)) {}   // NOLINT

  const Variant& get() const { return v_; }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_double() const { return std::holds_alternative<double>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_tensor() const { return std::holds_alternative<values::Tensor>(v_); }
  bool is_bytes() const { return std::holds_alternative<values::Bytes>(v_); }
  // The value if it has that type, else the fallback.
  std::string as_string(std::string fallback = {}) const;
  int64_t as_int(int64_t fallback = 0) const;
  double as_double(double fallback = 0) const;  // an int converts
  bool as_bool(bool fallback = false) const;
  // The tensor or bytes, or null when the value is something else.
  const values::Tensor* as_tensor() const { return std::get_if<values::Tensor>(&v_); }
  const values::Bytes* as_bytes() const { return std::get_if<values::Bytes>(&v_); }
  bool operator==(const InferValue& o) const { return v_ == o.v_; }

 private:
  Variant v_ = std::string();
};

using InferInstance = std::map<std::string, InferValue>;

// A call's result or its failure: InvalidArgument (bad input), NotFound
// (unknown servable or method), Cancelled, Unavailable (busy or unreachable),
// DeadlineExceeded, Internal (anything else).
template <typename T>
using ClientResult = Result<T>;

// One instance's result: its outputs (a model's: text, finish_reason,
// prompt_tokens, completion_tokens; a servable's: its method's outputs), or
// the error that instance got, and the servable version that ran (a model's
// is 1; 0 when the server did not say).
struct InferOutput {
  InferInstance values;
  std::optional<Status> error;
  uint64_t version = 0;
  bool ok() const { return !error.has_value(); }
  std::string text() const;
};

// One streamed event of one instance. The last event of an instance has
// `last` set and carries its finish_reason and usage, or its error (a
// servable's last event carries no text: its outputs are in the result).
struct StreamEvent {
  uint32_t instance = 0;
  std::string output = "text";  // the output the text belongs to
  std::string text;             // the new text (may be empty)
  bool last = false;
  std::string finish_reason;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::optional<Status> error;
};

struct ServableInfo {
  std::string name;
  std::vector<std::string> methods;
  int32_t n_ctx = 0;               // a model's context; 0 for a servable
  std::vector<uint64_t> versions;  // a servable's loaded versions, ascending
};

struct ClientOptions {
  std::chrono::milliseconds deadline{std::chrono::seconds(600)};  // per call
  int max_message_bytes = 64 << 20;
  uint64_t version = 0;  // the servable version to call; 0: the newest
};

class Client {
 public:
  // Connects lazily: an unreachable server is an error of the first call.
  Client(std::string address, std::string servable, std::string method, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;

  void set_deadline(std::chrono::milliseconds deadline);
  // The servable version later calls ask for (0: the newest loaded).
  void set_version(uint64_t version);

  // Unary Predict: one output per input, in order. A whole-request failure
  // (server down, unknown servable, too many instances) is the error; a
  // failed instance has its own error in its output.
  ClientResult<std::vector<InferOutput>> infer(const std::vector<InferInstance>& inputs);

  // PredictStream: `on_event` (optional) runs on the calling thread for each
  // event as it arrives; the outputs are the assembled texts, as infer gives.
  using StreamCallback = std::function<void(const StreamEvent&)>;
  ClientResult<std::vector<InferOutput>> infer_stream(const std::vector<InferInstance>& inputs,
                                                      const StreamCallback& on_event = {});

  ClientResult<std::vector<ServableInfo>> list_servables();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cairn
