#include "base/status.h"

#include <cstring>

namespace tierfs {

std::string_view CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk:
      return "OK";
    case Status::Code::kNotFound:
      return "NotFound";
    case Status::Code::kInvalidArgument:
      return "InvalidArgument";
    case Status::Code::kIOError:
      return "IOError";
    case Status::Code::kCorruption:
      return "Corruption";
    case Status::Code::kUnavailable:
      return "Unavailable";
    case Status::Code::kTimedOut:
      return "TimedOut";
    case Status::Code::kPermissionDenied:
      return "PermissionDenied";
    case Status::Code::kNoSpace:
      return "NoSpace";
    case Status::Code::kCancelled:
      return "Cancelled";
    case Status::Code::kNotSupported:
      return "NotSupported";
    case Status::Code::kInternal:
      return "Internal";
    case Status::Code::kFailedPrecondition:
      return "FailedPrecondition";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(code_));
  if (!msg_.empty()) {
    s += ": ";
    s += msg_;
  }
  return s;
}

Status Status::WithDetail(std::string_view detail) const {
  if (ok() || detail.empty()) return *this;
  Status s = *this;
  if (!s.msg_.empty()) s.msg_ += ": ";
  s.msg_ += detail;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  Status s = *this;
  s.msg_ = std::string(context);
  if (!msg_.empty()) {
    s.msg_ += ": ";
    s.msg_ += msg_;
  }
  return s;
}

Status Status::WithRetryable(bool retryable) const {
  Status s = *this;
  s.retryable_ = retryable && !ok();
  return s;
}

Status Status::FromErrno(int err, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  msg += std::strerror(err);
  switch (err) {
    case ENOENT:
      return NotFound(msg);
    case EACCES:
    case EPERM:
      return PermissionDenied(msg);
    case ENOSPC:
    case EDQUOT:
      return NoSpace(msg);
    case EINVAL:
      return InvalidArgument(msg);
    case ETIMEDOUT:
      return TimedOut(msg);
    case EINTR:
    case ECANCELED:
      return Cancelled(msg);
    case ENOTSUP:
      return NotSupported(msg);
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case ENOBUFS:
    case EAGAIN:
      // Out of descriptors or memory: the operation may work in a moment, and the file or
      // object it was about is not at fault (a cache must not drop a block for it).
      return Unavailable(msg);
    default:
      return IOError(msg);
  }
}

bool IsRetryable(const Status& s) { return s.retryable(); }

}  // namespace tierfs
