// tierfs::Result<T> — a T or a non-OK Status (conventions C3).
//
// API-compatible with the subset of std::expected<T, Status> that tierfs uses, so it can later
// become `template <class T> using Result = std::expected<T, Status>` (C++23):
//   ok() / has_value() / operator bool, value(), operator*, operator->, status()/error().
//
// Thread-safety: a value type, like Status.
#pragma once

#include <cassert>
#include <optional>
#include <type_traits>
#include <utility>

#include "base/status.h"

namespace tierfs {

template <typename T>
class [[nodiscard]] Result {
 public:
  static_assert(!std::is_same_v<T, Status>, "Result<Status> makes no sense");

  // Implicit from a value or from a non-OK Status, so functions can `return value;` or
  // `return Status::NotFound(...)`.
  Result(const T& value) : value_(value) {}
  Result(T&& value) : value_(std::move(value)) {}
  Result(Status status) : status_(std::move(status)) {
    assert(!status_.ok() && "Result constructed from an OK Status without a value");
    if (status_.ok()) status_ = Status::Internal("Result from OK status without a value");
  }
  template <typename U, typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                                    !std::is_same_v<std::decay_t<U>, Status> &&
                                                    !std::is_same_v<std::decay_t<U>, Result>>>
  Result(U&& value) : value_(std::forward<U>(value)) {}

  Result(const Result&) = default;
  Result(Result&&) noexcept = default;
  Result& operator=(const Result&) = default;
  Result& operator=(Result&&) noexcept = default;

  bool ok() const { return value_.has_value(); }
  bool has_value() const { return ok(); }
  explicit operator bool() const { return ok(); }

  // The error; OK when a value is held.
  const Status& status() const& { return status_; }
  Status status() && { return std::move(status_); }
  const Status& error() const& { return status_; }

  // REQUIRES: ok().
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  template <typename U>
  T value_or(U&& fallback) const& {
    return ok() ? *value_ : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  std::optional<T> value_;
  Status status_;
};

// The Status of a Status or of a Result<T>: for code that takes either (retry loops, test
// assertions).
inline const Status& StatusOf(const Status& s) { return s; }
template <typename T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}

}  // namespace tierfs
