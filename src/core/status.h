// core/status.h — errors as values across module boundaries.
// Owns Status (a StatusCode kind, a one-line message and the offending
// request field), Result<T> and the early-return macros. Never throws: library exceptions are caught at the
// edge of the module that calls the library and turned into a Status here.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace cairn {

// What kind of failure a Status is: front-ends choose their reply from it
// (HTTP status and OpenAI error type in api/, gRPC code in rpc/), so a kind
// names a reason a caller can act on, never a wire number. The kinds after
// Internal are the HTTP front-end's own refusals; other layers do not use them.
enum class StatusCode {
  Ok,
  InvalidArgument,   // the request or input is wrong; retrying it unchanged fails again
  NotFound,          // a named thing (a model) does not exist
  Unavailable,       // try again later: queue full, loading, draining, a worker lost
  Internal,          // a fault on this side; what Status::error(message) gives
  Cancelled,         // the caller went away or cancelled the call
  DeadlineExceeded,  // the request did not finish in time
  Unauthenticated,   // missing or wrong API key
  NoRoute,           // no endpoint at this path
  MethodNotAllowed,  // the endpoint exists, the method does not
  BodyTooLarge,      // the request body is over the limit
  HeadersTooLarge,   // the request headers are over the limit
  MalformedRequest,  // the request could not be parsed as HTTP at all
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  // A failure of kind Internal: what most layers below the front-ends report.
  static Status error(std::string message) {
    return Status(StatusCode::Internal, std::move(message), {});
  }
  // A failure of a given kind; `param` names the offending request field
  // (e.g. "max_tokens") or is empty. `code` must not be Ok.
  static Status error(StatusCode code, std::string message, std::string param = {}) {
    assert(code != StatusCode::Ok);
    return Status(code, std::move(message), std::move(param));
  }
  static Status invalid_argument(std::string message, std::string param = {}) {
    return error(StatusCode::InvalidArgument, std::move(message), std::move(param));
  }
  static Status not_found(std::string message, std::string param = {}) {
    return error(StatusCode::NotFound, std::move(message), std::move(param));
  }
  static Status unavailable(std::string message) {
    return error(StatusCode::Unavailable, std::move(message));
  }
  static Status internal(std::string message) { return error(StatusCode::Internal, std::move(message)); }

  bool is_ok() const { return code_ == StatusCode::Ok; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }  // one line
  const std::string& param() const { return param_; }      // may be empty

  // Prepends context, e.g. "tensor 'blk.0.attn_q.weight': " + inner message.
  // Kind and param stay.
  Status with_context(const std::string& context) const {
    return is_ok() ? *this : Status(code_, context + ": " + message_, param_);
  }
  // The same failure blamed on another request field.
  Status with_param(std::string param) const {
    return is_ok() ? *this : Status(code_, message_, std::move(param));
  }

 private:
  Status(StatusCode code, std::string message, std::string param)
      : code_(code), message_(std::move(message)), param_(std::move(param)) {}
  StatusCode code_ = StatusCode::Ok;
  std::string message_;
  std::string param_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) { assert(!status_.is_ok()); }  // NOLINT

  bool is_ok() const { return value_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const { return status_; }

  T& value() & { assert(value_); return *value_; }
  const T& value() const& { assert(value_); return *value_; }
  T&& value() && { assert(value_); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace cairn

// Returns early from the calling function when `expr` (a Status) failed.
#define CAIRN_RETURN_IF_ERROR(expr)            \
  do {                                         \
    ::cairn::Status cairn_status_ = (expr);    \
    if (!cairn_status_.is_ok()) return cairn_status_; \
  } while (0)

// Evaluates `expr` (a Result<T>); on failure returns its Status from the
// calling function, else moves the value into `lhs`, which may declare a
// variable (`CAIRN_ASSIGN_OR_RETURN(auto x, f());`) or name one. Expands to
// several statements: brace it after an `if`.
#define CAIRN_ASSIGN_OR_RETURN(lhs, expr) \
  CAIRN_ASSIGN_OR_RETURN_IMPL_(CAIRN_STATUS_CONCAT_(cairn_result_, __LINE__), lhs, expr)
#define CAIRN_STATUS_CONCAT_INNER_(a, b) a##b
#define CAIRN_STATUS_CONCAT_(a, b) CAIRN_STATUS_CONCAT_INNER_(a, b)
#define CAIRN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.is_ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
