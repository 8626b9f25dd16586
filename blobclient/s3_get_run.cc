// S3BlobStore::Read's engine (s3_store.h): the ranged GETs of one read, driven on the calling
// thread by GetRun, a small event loop over their completions (no extra threads).
#include <algorithm>
#include <deque>

#include "base/logging.h"
#include "base/mutex.h"
#include "base/retry.h"
#include "blobclient/s3_answers.h"
#include "blobclient/s3_store.h"

namespace tierfs::blobclient {
namespace {

using SteadyClock = std::chrono::steady_clock;

// One ranged GET of a Read: [offset, offset + out.size()) into `out`.
struct GetPart {
  uint64_t offset = 0;
  ScatterBuffer out;  // the caller's slice; the primary's sink points here
  enum class State { kWaiting, kRunning, kDone } state = State::kWaiting;
  SteadyClock::time_point ready_at{};    // kWaiting: not before (retry backoff)
  SteadyClock::time_point started{};     // when the current primary was submitted
  int attempts = 0;                      // primaries submitted
  HttpRequestId primary = 0, hedge = 0;  // in flight, or 0
  bool hedge_tried = false;              // for the current primary
  // A duplicate's private buffer (owned by its callback as well); `hedge_span` is its sink.
  // Not zero-filled: the duplicate's body overwrites what is copied out (up to a part of 8 MiB;
  // a memset of it showed as 9% of the prefetch threads' samples in a cold sequential read).
  std::shared_ptr<std::byte[]> hedge_buf;
  std::shared_ptr<ScatterBuffer> hedge_span;
  bool copy_pending = false;  // the duplicate won; copy once the primary is gone
  // The current primary's body so far (set on the I/O thread): a primary whose bytes keep
  // coming is not hedged, however late (see GetRun::HedgeLate).
  std::shared_ptr<HttpProgress> progress;
  // What the current attempt is signed with; a stale-credentials answer forces one refresh
  // and one more attempt per part.
  std::shared_ptr<const Credentials> creds;
  bool refreshed = false;
  size_t got = 0;
  Status last;
};
struct Completion {
  size_t part;
  bool hedge;
  Status status;
  HttpResponse resp;
};
struct Inbox {
  Mutex mu;
  CondVar cv{&mu};
  std::deque<Completion> q GUARDED_BY(mu);
};

}  // namespace

// The ranged GETs of one Read (retries, hedges, parallel parts), driven on the calling thread
// by a small event loop over their completions, and the result assembled: the bytes read, short
// only at the end of the object. Run() returns only when none of its requests is in flight any
// more. One use; all of its state lives on the caller's stack.
class S3BlobStore::GetRun {
 public:
  GetRun(S3BlobStore* store, std::string_view key, std::vector<GetPart>* parts,
         const S3ReadExpect& expect)
      : s_(*store),
        key_(key),
        parts_(*parts),
        expect_(expect),
        context_("GET " + std::string(key) + " @" + std::to_string(parts->front().offset)),
        max_parts_(std::max(1, store->options_.max_parts_in_flight)),
        hedge_(store->options_.hedge && !UnhedgedReads::Active()) {}

  Result<size_t> Run() {
    while (!Finished()) {
      SteadyClock::time_point wake = SteadyClock::time_point::max();
      if (!failed_) {
        StartDue(&wake);
        if (hedge_) HedgeLate(&wake);
      }
      // With nothing in flight no completion will come, so the wait below must not be entered
      // without a deadline: it would never wake. This is the case right after Abort() in
      // StartDue (the slot wait timed out with nothing in flight); Finished() then ends the
      // loop. Any other way here would be a bookkeeping bug: fail rather than hang.
      if (in_flight_ == 0 && wake == SteadyClock::time_point::max()) {
        Abort(Status::Internal(context_ + ": no request in flight and nothing to wait for"));
        continue;
      }
      for (Completion& c : WaitForCompletions(wake)) OnCompletion(c);
    }
    if (failed_) {
      if (exhausted_) {
        Logger(Module::kBlobClient)
            .warn("{}: giving up after {} attempt(s): {}", s_.describe_, s_.options_.max_attempts,
                  fatal_.ToString());
      }
      return s_.Fail(fatal_);
    }
    // Parts are contiguous; only the end of the object may cut them short.
    size_t total = 0;
    bool short_seen = false;
    for (const GetPart& p : parts_) {
      if (short_seen && p.got > 0) {
        return s_.Fail(
            Status::Corruption(context_ + ": the object's size changed during the read"));
      }
      total += p.got;
      short_seen |= p.got < p.out.size();
    }
    return total;
  }

 private:
  using State = GetPart::State;

  // If-Match carries the pinned ETag, except a weak one: If-Match compares strongly (RFC 9110
  // 13.1.1), so a server would refuse every read of a weak-ETag object with 412. Those reads rely
  // on CheckGetAnswer comparing the answer's ETag instead.
  HttpRequest PartRequest(const GetPart& p, const ScatterBuffer* sink) const {
    // p.creds is set before a part is submitted (see StartDue).
    Call c;
    c.method = "GET";
    c.path = s_.ObjectPath(key_);
    c.headers.emplace_back("Range", "bytes=" + std::to_string(p.offset) + "-" +
                                        std::to_string(p.offset + p.out.size() - 1));
    if (!expect_.etag.empty() && !WeakEtag(expect_.etag)) {
      c.headers.emplace_back("If-Match", "\"" + std::string(NormalizeEtag(expect_.etag)) + "\"");
    }
    c.sink = sink;
    c.range_offset = p.offset;
    return s_.BuildRequest(c, p.creds.get());
  }

  // Every part answered, or the read failed, and nothing is in flight.
  bool Finished() const {
    if (in_flight_ != 0) return false;
    return failed_ || std::all_of(parts_.begin(), parts_.end(),
                                  [](const GetPart& p) { return p.state == State::kDone; });
  }

  HttpRequestId Submit(size_t i, bool hedge, const ScatterBuffer* sink,
                       std::shared_ptr<void> keep) {
    ++s_.requests_;
    HttpRequest req = PartRequest(parts_[i], sink);
    if (!hedge) req.progress = parts_[i].progress;
    ++in_flight_;
    return s_.engine_->Submit(std::move(req),
                              [inbox = inbox_, i, hedge, keep](Status st, HttpResponse resp) {
                                MutexLock l(&inbox->mu);
                                inbox->q.push_back({i, hedge, std::move(st), std::move(resp)});
                                inbox->cv.Signal();
                              });
  }

  // The first failure ends the read: every request still in flight is cancelled (their
  // completions are still awaited).
  void Abort(Status st) {
    if (failed_) return;
    failed_ = true;
    fatal_ = std::move(st);
    for (GetPart& p : parts_) {
      if (p.primary != 0) s_.engine_->Cancel(p.primary);
      if (p.hedge != 0) s_.engine_->Cancel(p.hedge);
    }
  }

  // Starts the parts whose turn it is, up to max_parts_in_flight running. With nothing in flight
  // it waits for a connection slot (bounded); otherwise it takes free slots only, and lets
  // completions make room. *wake: the earliest backoff still to run out.
  void StartDue(SteadyClock::time_point* wake) {
    const auto now = SteadyClock::now();
    int running = static_cast<int>(std::count_if(
        parts_.begin(), parts_.end(), [](const GetPart& p) { return p.state == State::kRunning; }));
    for (size_t i = 0; i < parts_.size() && running < max_parts_; ++i) {
      GetPart& p = parts_[i];
      if (p.state != State::kWaiting) continue;
      if (p.ready_at > now) {
        *wake = std::min(*wake, p.ready_at);
        continue;
      }
      const bool slot = in_flight_ == 0 ? s_.limiter_.Acquire(now + s_.options_.request_timeout)
                                        : s_.limiter_.TryAcquire();
      if (!slot) {
        if (in_flight_ == 0) {
          Abort(Status::TimedOut(context_ + ": waiting for a connection slot (limit " +
                                 std::to_string(s_.limiter_.limit()) + ")"));
        }
        return;
      }
      // Each attempt signs with the credentials current now (a hedge reuses them).
      Result<std::shared_ptr<const Credentials>> creds = s_.SigningCredentials();
      if (!creds.ok()) {
        s_.limiter_.Release();
        Abort(creds.status().WithContext(context_));
        return;
      }
      p.creds = std::move(*creds);
      p.state = State::kRunning;
      ++p.attempts;
      p.hedge_tried = false;
      p.started = SteadyClock::now();
      p.progress = std::make_shared<HttpProgress>();
      p.primary = Submit(i, false, &p.out, nullptr);
      s_.hedge_budget_.OnGet();
      ++running;
    }
  }

  // Sends one duplicate of each late GET (one per attempt, only with a free slot). *wake: when
  // the next running GET becomes late.
  void HedgeLate(SteadyClock::time_point* wake) {
    for (size_t i = 0; i < parts_.size() && !failed_; ++i) {
      GetPart& p = parts_[i];
      if (p.state != State::kRunning || p.primary == 0 || p.hedge_tried ||
          p.out.size() > s_.options_.hedge_max_bytes) {
        continue;
      }
      std::optional<std::chrono::nanoseconds> p95 = s_.tracker_.ExpectedP95(p.out.size());
      if (!p95.has_value()) continue;
      auto due = p.started + std::max<std::chrono::nanoseconds>(*p95, s_.options_.hedge_min_delay);
      if (SteadyClock::now() < due) {
        *wake = std::min(*wake, due);
        continue;
      }
      // Late but still receiving: the GET shares a busy link or origin (parallel streams,
      // a saturated client), and a duplicate would share it too, adding load without
      // winning. Only a GET with no body byte for as long as a first byte normally takes
      // is stuck; it is hedged once that is so.
      const int64_t last_ns = p.progress ? p.progress->last_byte_ns.load() : 0;
      if (last_ns != 0) {
        const auto last = SteadyClock::time_point(std::chrono::nanoseconds(last_ns));
        const auto quiet =
            std::max<std::chrono::nanoseconds>(s_.tracker_.TtfbP95(), s_.options_.hedge_min_delay);
        if (SteadyClock::now() - last < quiet) {
          *wake = std::min(*wake, last + quiet);
          continue;
        }
      }
      p.hedge_tried = true;
      if (!s_.hedge_budget_.TrySpend()) continue;
      if (!s_.limiter_.TryAcquire()) continue;  // (the spent hedge is not refunded: rare)
      p.hedge_buf = std::make_shared_for_overwrite<std::byte[]>(p.out.size());
      p.hedge_span =
          std::make_shared<ScatterBuffer>(std::span<std::byte>(p.hedge_buf.get(), p.out.size()));
      ++s_.hedges_issued_;
      p.hedge = Submit(
          i, true, p.hedge_span.get(),
          std::make_shared<std::pair<std::shared_ptr<std::byte[]>, std::shared_ptr<ScatterBuffer>>>(
              p.hedge_buf, p.hedge_span));
    }
  }

  // The completions that arrived, waiting for at least one until `wake` (max: no deadline).
  std::deque<Completion> WaitForCompletions(SteadyClock::time_point wake) {
    std::deque<Completion> done;
    MutexLock l(&inbox_->mu);
    while (inbox_->q.empty()) {
      if (wake == SteadyClock::time_point::max()) {
        inbox_->cv.Wait();
        continue;
      }
      auto left = wake - SteadyClock::now();
      if (left <= std::chrono::nanoseconds::zero()) break;
      inbox_->cv.WaitFor(left);
    }
    done.swap(inbox_->q);
    return done;
  }

  // One request's answer: the part is done (the first good answer wins, a hedge race's loser is
  // cancelled), retried after a backoff, or the read fails.
  void OnCompletion(Completion& c) {
    --in_flight_;
    GetPart& p = parts_[c.part];
    HttpRequestId& mine = c.hedge ? p.hedge : p.primary;
    HttpRequestId& other = c.hedge ? p.primary : p.hedge;
    mine = 0;
    const bool cancelled = c.status.code() == Status::Code::kCancelled;
    if (!cancelled) {
      s_.Feedback(c.status, c.status.ok() ? c.resp.status : 0, c.resp.total, c.resp.sink_bytes);
    }
    s_.limiter_.Release();
    if (p.state == State::kDone) {
      // The loser of a hedge race. If the duplicate won, the original no longer writes into
      // the caller's slice: now the duplicate's bytes can go there.
      if (!c.hedge && p.copy_pending) {
        p.out.CopyIn(0,
                     std::span<const std::byte>(p.hedge_buf.get(), std::min(p.got, p.out.size())));
        p.copy_pending = false;
        p.hedge_buf.reset();
        p.hedge_span.reset();
      }
      return;
    }
    if (failed_) return;
    Status st;
    const long code = c.status.ok() ? c.resp.status : 0;
    if (!c.status.ok()) {
      st = c.status.WithContext(context_);
    } else if ((code >= 200 && code < 300) || code == 416) {
      size_t got = 0;
      st = CheckGetAnswer(c.resp, p.offset, p.out.size(), expect_, &seen_, context_, &got);
      if (st.ok()) {
        Win(&p, c, got, other);
        return;
      }
    } else {
      // Refused as stale credentials while this part's duplicate (a hedge) is still in
      // flight: wait for its answer instead of failing the part; if it is refused too, that
      // answer forces the refresh and the retry.
      if (!p.refreshed && other != 0 && s_.StaleCredentialsAnswer(c.resp, p.creds)) {
        p.last = S3ErrorToStatus(c.resp, context_, s_.ErrorsContext(p.creds.get()));
        return;
      }
      if (!p.refreshed && other == 0 && s_.RefreshAfter(c.resp, p.creds, context_)) {
        // One more attempt with the refreshed credentials, outside the retry budget.
        p.refreshed = true;
        p.creds.reset();
        --p.attempts;
        ++s_.retries_;
        p.state = State::kWaiting;
        p.ready_at = SteadyClock::now();
        return;
      }
      st = S3ErrorToStatus(c.resp, context_, s_.ErrorsContext(p.creds.get()));
    }
    OnFailure(&p, st, other);
  }

  // The first good answer to part `p` (`got` bytes), from `c`; `other`: the part's other request
  // still in flight, or 0.
  void Win(GetPart* p, const Completion& c, size_t got, HttpRequestId other) {
    if (c.resp.status != 416 && c.resp.sink_bytes > 0) {
      s_.tracker_.Record(c.resp.ttfb, c.resp.total, c.resp.sink_bytes);
    }
    p->state = State::kDone;
    p->got = got;
    s_.bytes_read_ += got;
    if (c.hedge) {
      ++s_.hedges_won_;
      s_.hedge_budget_.OnHedgeSettled(true);
      if (other != 0) {
        s_.engine_->Cancel(other);
        p->copy_pending = true;
      } else {
        p->out.CopyIn(0,
                      std::span<const std::byte>(p->hedge_buf.get(), std::min(got, p->out.size())));
      }
    } else if (other != 0) {
      s_.hedge_budget_.OnHedgeSettled(false);  // the original answered first
      s_.engine_->Cancel(other);
    }
  }

  // A failed answer to part `p`: the read fails, or the part waits for `other` (its request
  // still in flight, or 0), or it is retried after the policy's backoff.
  void OnFailure(GetPart* p, const Status& st, HttpRequestId other) {
    p->last = st;
    if (!st.retryable()) {
      Abort(st);
      return;
    }
    if (other != 0) return;  // the other request of this part may still answer
    const RetryStep step = NextRetryStep(s_.retry_, st, p->attempts);
    if (step.kind != RetryStep::Kind::kRetry) {
      exhausted_ = true;
      Abort(st);
      return;
    }
    ++s_.retries_;
    SPDLOG_LOGGER_DEBUG(&Logger(Module::kBlobClient), "{}: {}; retry {} in {} ms", s_.describe_,
                        st.ToString(), p->attempts, step.delay.count());
    p->state = State::kWaiting;
    p->ready_at = SteadyClock::now() + step.delay;
  }

  S3BlobStore& s_;
  const std::string_view key_;
  std::vector<GetPart>& parts_;
  const S3ReadExpect& expect_;
  const std::string context_;
  const int max_parts_;
  const bool hedge_;  // hedge late parts (not for UnhedgedReads)
  const std::shared_ptr<Inbox> inbox_ = std::make_shared<Inbox>();  // shared with the callbacks
  int in_flight_ = 0;  // requests submitted whose completion has not been handled
  bool failed_ = false;
  Status fatal_;            // the first failure, once failed_
  bool exhausted_ = false;  // fatal_ is a retryable failure that used up the attempts
  // What the first good answer said about the object: every later part must agree (a read
  // never assembles parts of two versions, pinned or not).
  S3ReadSeen seen_;
};

Result<size_t> S3BlobStore::ReadChecked(std::string_view key, uint64_t offset,
                                        const ScatterBuffer& out, const S3ReadExpect& expect) {
  TIERFS_RETURN_IF_ERROR(CheckKey(key));
  if (out.empty()) return size_t{0};
  const uint64_t part = std::max<uint64_t>(1, options_.part_size);
  std::vector<GetPart> parts;
  parts.reserve(static_cast<size_t>((out.size() + part - 1) / part));
  for (uint64_t at = 0; at < out.size(); at += part) {
    GetPart p;
    p.offset = offset + at;
    p.out = out.Slice(static_cast<size_t>(at),
                      static_cast<size_t>(std::min<uint64_t>(part, out.size() - at)));
    parts.push_back(std::move(p));
  }
  if (parts.size() > 1) ++parallel_reads_;
  return GetRun(this, key, &parts, expect).Run();
}

}  // namespace tierfs::blobclient
