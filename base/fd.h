// An owned file descriptor, closed when the owner goes away (Chromium's base::ScopedFD,
// Abseil's and Android's unique_fd):
//
//   UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
//   if (fd.get() < 0) return Status::FromErrno(errno, "open " + path);
//   ... every return path closes it ...
//
// Where the result of close(2) matters (a file just written), take the descriptor back with
// release() and close it by hand. Not thread-safe: one owner at a time.
#pragma once

#include <unistd.h>

#include <utility>

namespace tierfs {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  // Gives up ownership: the caller closes what this returns.
  int release() { return std::exchange(fd_, -1); }
  // Closes the descriptor now (if any); get() is then -1.
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace tierfs
