#include "base/cancel.h"

#include <algorithm>
#include <optional>
#include <string>

namespace tierfs {
namespace {

thread_local const CancelToken* t_current = nullptr;

CancelToken::TimePoint DeadlineIn(std::chrono::nanoseconds timeout) {
  const auto now = CancelToken::SteadyClock::now();
  if (timeout >= CancelToken::TimePoint::max() - now) return CancelToken::TimePoint::max();
  return now + std::chrono::duration_cast<CancelToken::SteadyClock::duration>(timeout);
}

}  // namespace

CancelToken::CancelToken(std::chrono::nanoseconds timeout) : deadline_(DeadlineIn(timeout)) {}

void CancelToken::Cancel() {
  MutexLock l(&mu_);
  if (cancelled_.exchange(true, std::memory_order_acq_rel)) return;
  for (auto& [id, wake] : wakeups_) wake();
  wakeups_.clear();
}

Status CancelToken::Check(std::string_view what) const {
  if (cancelled()) return Status::Cancelled(std::string(what) + ": interrupted");
  if (deadline_ != TimePoint::max() && SteadyClock::now() >= deadline_) {
    return Status::TimedOut(std::string(what) + ": request deadline passed");
  }
  return Status::OK();
}

CancelToken::Registration CancelToken::OnCancel(std::function<void()> wake) const {
  MutexLock l(&mu_);
  if (cancelled()) return Registration();
  const uint64_t id = next_id_++;
  wakeups_.emplace(id, std::move(wake));
  return Registration(this, id);
}

CancelToken::Registration::~Registration() {
  if (token_ == nullptr) return;
  MutexLock l(&token_->mu_);
  token_->wakeups_.erase(id_);
}

const CancelToken* CancelToken::Current() { return t_current; }

CancelToken::Scope::Scope(const CancelToken* token) : previous_(t_current) { t_current = token; }

CancelToken::Scope::~Scope() { t_current = previous_; }

Status WaitCancellable(Mutex* mu, CondVar* cv, const std::function<bool()>& done,
                       const CancelToken* token, CancelToken::TimePoint deadline,
                       std::string_view what) {
  std::optional<CancelToken::Registration> reg;
  if (token != nullptr) {
    reg.emplace(token->OnCancel([mu, cv] {
      MutexLock l(mu);
      cv->SignalAll();
    }));
    deadline = std::min(deadline, token->deadline());
  }
  MutexLock l(mu);
  while (!done()) {
    if (token != nullptr && token->cancelled()) {
      return Status::Cancelled(std::string(what) + ": interrupted");
    }
    const auto now = CancelToken::SteadyClock::now();
    if (deadline != CancelToken::TimePoint::max() && now >= deadline) {
      return Status::TimedOut(std::string(what) + ": gave up waiting (deadline passed)");
    }
    if (deadline == CancelToken::TimePoint::max()) {
      cv->Wait();
    } else {
      cv->WaitFor(deadline - now);
    }
  }
  return Status::OK();
}

}  // namespace tierfs
