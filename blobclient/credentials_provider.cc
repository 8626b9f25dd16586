// The static and the refreshing CredentialsProvider (rules in blob_store.h).
//
// The refreshing provider owns one thread ("tierfs-creds") that sleeps until the refresh time of
// the credentials in use (E - min(5 min, (E-F)/2)), or until woken by Current() (expired) or
// ForceRefresh(); it fetches from the source with the mutex released, then swaps the shared
// pointer in. Readers copy the pointer under the mutex (a few ns) and never wait for a fetch in
// progress unless their credentials are expired. Waits use the wall clock of the injected Clock,
// slept in slices of at most kTick so a FakeClock moved by a test is noticed.
#include <pthread.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "base/logging.h"
#include "base/mutex.h"
#include "blobclient/credentials.h"

namespace tierfs {
namespace blobclient {
namespace {

constexpr int64_t kSecond = 1'000'000'000LL;
constexpr int64_t kMaxLead = 300 * kSecond;  // refresh at most 5 min before expiry
constexpr int64_t kMaxBackoff = 60 * kSecond;
constexpr std::chrono::milliseconds kTick{200};

std::string FormatUnix(int64_t ns) {
  const time_t t = static_cast<time_t>(ns / kSecond);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

class StaticProvider final : public CredentialsProvider {
 public:
  StaticProvider(Credentials c, std::string source)
      : creds_(std::make_shared<const Credentials>(std::move(c))), source_(std::move(source)) {}
  Result<std::shared_ptr<const Credentials>> Current() override { return creds_; }
  bool ForceRefresh(const std::shared_ptr<const Credentials>&) override { return false; }
  bool temporary() const override { return false; }
  std::string source() const override { return source_; }
  CredentialsStats Stats() const override { return {}; }

 private:
  const std::shared_ptr<const Credentials> creds_;
  const std::string source_;
};

class RefreshingProvider final : public CredentialsProvider {
 public:
  RefreshingProvider(std::unique_ptr<CredentialSource> source, FetchedCredentials first,
                     int64_t fetched, Clock* clock)
      : source_(std::move(source)), clock_(clock) {
    MutexLock l(&mu_);
    Install(std::move(first), fetched);
    if (refreshing_) thread_ = std::thread([this] { Run(); });
  }

  ~RefreshingProvider() override {
    {
      MutexLock l(&mu_);
      stop_ = true;
      cv_.SignalAll();
    }
    if (thread_.joinable()) thread_.join();
  }

  Result<std::shared_ptr<const Credentials>> Current() override {
    MutexLock l(&mu_);
    if (!Expired(clock_->NowUnixNanos())) return current_;
    // Expired: wake the refresher and wait for one attempt that ends after now, bounded.
    const uint64_t attempts = attempts_;
    wake_ = true;
    cv_.SignalAll();
    const auto deadline = std::chrono::steady_clock::now() + kCredentialsWaitBound;
    while (!stop_ && Expired(clock_->NowUnixNanos()) && attempts_ == attempts) {
      auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds::zero()) break;
      cv_.WaitFor(std::min<std::chrono::nanoseconds>(left, kTick));
    }
    if (!Expired(clock_->NowUnixNanos())) return current_;
    return Status::Unavailable("credentials from " + source_->Describe() + " expired at " +
                               FormatUnix(*expires_) + " and could not be refreshed" +
                               (last_error_.ok() ? std::string() : ": " + last_error_.message()));
  }

  bool ForceRefresh(const std::shared_ptr<const Credentials>& seen) override {
    MutexLock l(&mu_);
    if (!expires_) return false;        // static: nothing to refresh
    if (seen != current_) return true;  // already replaced
    ++forced_;
    // Join a fetch in progress (it may bring new credentials), else start one; wait for it.
    const uint64_t start = attempts_;
    if (!fetching_) wake_ = true;
    cv_.SignalAll();
    const auto deadline = std::chrono::steady_clock::now() + kCredentialsWaitBound;
    while (!stop_ && seen == current_ && attempts_ == start) {
      auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds::zero()) break;
      cv_.WaitFor(std::min<std::chrono::nanoseconds>(left, kTick));
    }
    return seen != current_;
  }

  bool temporary() const override {
    MutexLock l(&mu_);
    return expires_.has_value();
  }

  std::string source() const override { return source_->Describe(); }

  CredentialsStats Stats() const override {
    MutexLock l(&mu_);
    CredentialsStats s;
    s.refreshes = refreshes_;
    s.refresh_failures = failures_total_;
    s.forced_refreshes = forced_;
    s.expiration_unix_ns = expires_.value_or(0);
    return s;
  }

 private:
  bool Expired(int64_t now) const REQUIRES(mu_) { return expires_ && now >= *expires_; }

  void Install(FetchedCredentials f, int64_t fetched) REQUIRES(mu_) {
    current_ = std::make_shared<const Credentials>(std::move(f.credentials));
    expires_ = f.expiration_unix_ns;
    if (expires_) {
      refreshing_ = true;
      next_ = RefreshAtUnixNanos(fetched, *expires_);
    } else {
      // credential_process without Expiration: static from now on (as the SDKs do).
      next_ = INT64_MAX;
    }
  }

  void Run() {
    pthread_setname_np(pthread_self(), "tierfs-creds");
    mu_.Lock();
    while (!stop_) {
      const int64_t now = clock_->NowUnixNanos();
      if (!wake_ && now < next_) {
        const int64_t wait_ns = std::min<int64_t>(next_ - now, kTick.count() * 1'000'000LL);
        cv_.WaitFor(std::chrono::nanoseconds(wait_ns));
        continue;
      }
      wake_ = false;
      fetching_ = true;
      mu_.Unlock();
      Result<FetchedCredentials> r = source_->Fetch();
      const int64_t fetched = clock_->NowUnixNanos();
      mu_.Lock();
      fetching_ = false;
      ++attempts_;
      if (r.ok() && r->expiration_unix_ns && *r->expiration_unix_ns <= fetched) {
        r = Status::Unavailable("the answer expired already at " +
                                FormatUnix(*r->expiration_unix_ns) + " (clock skew?)");
      }
      if (r.ok()) {
        Install(std::move(*r), fetched);
        ++refreshes_;
        failures_in_row_ = 0;
        last_error_ = Status::OK();
        Logger(Module::kBlobClient)
            .info("credentials from {} refreshed{}", source_->Describe(),
                  expires_ ? ", valid until " + FormatUnix(*expires_) : std::string());
      } else {
        ++failures_total_;
        ++failures_in_row_;
        last_error_ = r.status();
        int64_t backoff = kSecond << std::min(failures_in_row_ - 1, 6);
        backoff = std::min(backoff, kMaxBackoff);
        if (expires_) backoff = std::min(backoff, std::max(kSecond, (*expires_ - fetched) / 2));
        backoff = std::max(backoff, kSecond);
        next_ = fetched + backoff;
        Logger(Module::kBlobClient)
            .warn(
                "refreshing credentials from {} failed ({} in a row; retry in {} s; current "
                "ones valid until {}): {}",
                source_->Describe(), failures_in_row_, backoff / kSecond,
                expires_ ? FormatUnix(*expires_) : std::string("-"), r.status().ToString());
      }
      cv_.SignalAll();
    }
    mu_.Unlock();
  }

  const std::unique_ptr<CredentialSource> source_;  // Fetch() only on the refresher thread
  Clock* const clock_;

  mutable Mutex mu_;
  CondVar cv_{&mu_};
  std::shared_ptr<const Credentials> current_ GUARDED_BY(mu_);
  std::optional<int64_t> expires_ GUARDED_BY(mu_);
  int64_t next_ GUARDED_BY(mu_) = INT64_MAX;  // when to refresh (wall ns)
  bool refreshing_ GUARDED_BY(mu_) = false;   // the first credentials expire: a thread runs
  bool wake_ GUARDED_BY(mu_) = false;         // refresh now (expired, or forced)
  bool fetching_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  uint64_t attempts_ GUARDED_BY(mu_) = 0;  // finished fetches
  uint64_t refreshes_ GUARDED_BY(mu_) = 0;
  uint64_t failures_total_ GUARDED_BY(mu_) = 0;
  uint64_t forced_ GUARDED_BY(mu_) = 0;
  int failures_in_row_ GUARDED_BY(mu_) = 0;
  Status last_error_ GUARDED_BY(mu_);
  std::thread thread_;  // last: started once the rest is set up
};

}  // namespace

int64_t RefreshAtUnixNanos(int64_t fetched, int64_t expires) {
  const int64_t life = std::max<int64_t>(0, expires - fetched);
  return expires - std::min(kMaxLead, life / 2);
}

std::shared_ptr<CredentialsProvider> NewRefreshingProvider(std::unique_ptr<CredentialSource> source,
                                                           FetchedCredentials first,
                                                           int64_t fetched_unix_ns, Clock* clock) {
  return std::make_shared<RefreshingProvider>(std::move(source), std::move(first), fetched_unix_ns,
                                              clock);
}

}  // namespace blobclient

std::shared_ptr<CredentialsProvider> NewStaticCredentialsProvider(Credentials credentials,
                                                                  std::string source) {
  return std::make_shared<blobclient::StaticProvider>(std::move(credentials), std::move(source));
}

}  // namespace tierfs
