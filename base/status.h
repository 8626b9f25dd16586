// tierfs::Status — the one error vocabulary of tierfs (conventions C3).
//
// A Status is either OK or carries a code and a human-readable message. Third-party error codes
// (CURLcode, HTTP status, MDB_*, errno) are translated into a Status once, at the wrapper that
// calls the library; everything above that sees only Status. Conversion to errno happens in
// exactly one place, fuse/ (ToErrno).
//
// Retryability is decided where a Status is made, too: retryable() says whether the same request
// may succeed if sent again. It follows the code (Unavailable, TimedOut and IOError are
// retryable) unless the maker knows better and says so with WithRetryable (an HTTP 400 is an
// IOError no retry cures; a body cut short by a proxy is a Corruption a retry may cure). Retry
// loops ask the Status (base/retry.h), never the code that made it.
//
// Thread-safety: a Status is a value type; distinct objects may be used from distinct threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace tierfs {

class [[nodiscard]] Status {
 public:
  enum class Code : int {
    kOk = 0,
    kNotFound,            // object/key/block absent; a cache miss is NotFound and is not an error
    kInvalidArgument,     // bad input from a user (config key, xattr value, path)
    kIOError,             // local or remote I/O failed
    kCorruption,          // checksum mismatch, unparsable on-disk or on-wire data
    kUnavailable,         // a remote endpoint cannot be reached or answered 5xx, or a local
                          // resource is exhausted for now (EMFILE, ENFILE, ENOMEM, ENOBUFS,
                          // EAGAIN): retryable, says nothing about the data
    kTimedOut,            // a deadline passed (retryable)
    kPermissionDenied,    // 401/403, EACCES
    kNoSpace,             // a tier or quota is full
    kCancelled,           // the caller or shutdown cancelled the operation
    kNotSupported,        // the operation is not supported here (writes on a read-only fs)
    kInternal,            // a bug: an invariant did not hold
    kFailedPrecondition,  // the object changed under an open handle (If-Match failed): ESTALE
  };

  Status() = default;  // OK
  static Status OK() { return Status(); }
  static Status NotFound(std::string_view msg) { return Status(Code::kNotFound, msg); }
  static Status InvalidArgument(std::string_view msg) {
    return Status(Code::kInvalidArgument, msg);
  }
  static Status IOError(std::string_view msg) { return Status(Code::kIOError, msg); }
  static Status Corruption(std::string_view msg) { return Status(Code::kCorruption, msg); }
  static Status Unavailable(std::string_view msg) { return Status(Code::kUnavailable, msg); }
  static Status TimedOut(std::string_view msg) { return Status(Code::kTimedOut, msg); }
  static Status PermissionDenied(std::string_view msg) {
    return Status(Code::kPermissionDenied, msg);
  }
  static Status NoSpace(std::string_view msg) { return Status(Code::kNoSpace, msg); }
  static Status Cancelled(std::string_view msg) { return Status(Code::kCancelled, msg); }
  static Status NotSupported(std::string_view msg) { return Status(Code::kNotSupported, msg); }
  static Status Internal(std::string_view msg) { return Status(Code::kInternal, msg); }
  static Status FailedPrecondition(std::string_view msg) {
    return Status(Code::kFailedPrecondition, msg);
  }
  // errno → Status, for wrappers around syscalls. `what` names the operation and path.
  static Status FromErrno(int err, std::string_view what);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  // Whether sending the same request again may succeed (see the file comment). False for OK.
  bool retryable() const { return retryable_; }

  // This status, retryable or not as its maker knows (OK stays OK and not retryable).
  Status WithRetryable(bool retryable) const;

  // "NotFound: no such key 'a/b'"; "OK" for OK.
  std::string ToString() const;

  // Prepends context: Status::IOError("x").WithContext("reading a/b") → "reading a/b: x".
  Status WithContext(std::string_view context) const;
  // Appends a detail: Status::IOError("HTTP 403").WithDetail("why") → "HTTP 403: why".
  Status WithDetail(std::string_view detail) const;

  friend bool operator==(const Status& a, const Status& b) { return a.code_ == b.code_; }

 private:
  Status(Code code, std::string_view msg)
      : code_(code), retryable_(RetryableByCode(code)), msg_(msg) {}
  static bool RetryableByCode(Code code) {
    return code == Code::kUnavailable || code == Code::kTimedOut || code == Code::kIOError;
  }
  Code code_ = Code::kOk;
  bool retryable_ = false;
  std::string msg_;
};

std::string_view CodeName(Status::Code code);

// s.retryable(): true for failures that a retry may cure, as their maker decided.
bool IsRetryable(const Status& s);

}  // namespace tierfs

#define TIERFS_STATUS_CONCAT_INNER_(a, b) a##b
#define TIERFS_STATUS_CONCAT_(a, b) TIERFS_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define TIERFS_RETURN_IF_ERROR(expr)         \
  do {                                       \
    ::tierfs::Status _tierfs_st = (expr);    \
    if (!_tierfs_st.ok()) return _tierfs_st; \
  } while (0)

// `lhs = value of expr` (a Result<T>), or returns its Status from the enclosing function.
#define TIERFS_ASSIGN_OR_RETURN(lhs, expr) \
  TIERFS_ASSIGN_OR_RETURN_IMPL_(TIERFS_STATUS_CONCAT_(_tierfs_res_, __LINE__), lhs, expr)
#define TIERFS_ASSIGN_OR_RETURN_IMPL_(res, lhs, expr) \
  auto res = (expr);                                  \
  if (!res.ok()) return std::move(res).status();      \
  lhs = std::move(res).value()
