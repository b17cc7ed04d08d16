// core/status.h — errors as values across module boundaries.
// Owns Status and Result<T>. Never throws: library exceptions are caught at the
// edge of the module that calls the library and turned into a Status here.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace cairn {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message), true); }

  bool is_ok() const { return !failed_; }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const { return message_; }

  // Prepends context, e.g. "tensor 'blk.0.attn_q.weight': " + inner message.
  Status with_context(const std::string& context) const {
    return failed_ ? Status(context + ": " + message_, true) : *this;
  }

 private:
  Status(std::string message, bool failed) : message_(std::move(message)), failed_(failed) {}
  std::string message_;
  bool failed_ = false;
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
