// PrefetchJobs (prefetch_jobs.h).
//
// Threads: max_running_jobs runners ("tierfs-pfjob") each take the oldest queued job and walk
// its tree with a Walker (internal/prefetch_walk.h; or take the list job's queued files,
// internal/prefetch_list.h; no lock held across Catalog calls), a batch of files at a time, split
// it into tasks (internal/prefetch_work.h) and publish them as a Work of its job. `threads`
// workers ("tierfs-pfjob-N") take tasks from the running jobs' Works round-robin (one task from
// each in turn: jobs share the workers fairly) and call TieredCache::HydrateRun per task (one
// ranged GET for the blocks the target lacks), each under one fetch slot (FetchSlots,
// internal/prefetch_slots.h). A small file is one task (one GET) and a batch holds up to
// batch_files of them, so many files are in flight at once; a large file's tasks run on many
// workers in parallel. The runner waits for its batch to drain (or the job to be cancelled, fail,
// or the object to be destroyed), persisting progress every persist_interval (PrefetchStore,
// internal/prefetch_store.h), then walks the next batch, and at the end records the final state.
//
// Lock order: append_mu_ → persist_mu_ → mu_; mu_ is never held across Catalog, TieredCache or
// MetaStore calls.
#include "tiercache/prefetch_jobs.h"

#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <stop_token>
#include <thread>

#include "base/logging.h"
#include "base/metrics.h"
#include "base/mutex.h"
#include "base/strings.h"
#include "tiercache/internal/prefetch_list.h"
#include "tiercache/internal/prefetch_slots.h"
#include "tiercache/internal/prefetch_store.h"
#include "tiercache/internal/prefetch_walk.h"
#include "tiercache/internal/prefetch_work.h"

namespace tierfs {
namespace {

using tiercache_internal::FileItem;
using tiercache_internal::Job;
using tiercache_internal::ListItem;
using tiercache_internal::PrefetchStore;
using tiercache_internal::Task;
using tiercache_internal::Walker;
using tiercache_internal::Work;

class PrefetchJobsImpl final : public PrefetchJobs {
 public:
  PrefetchJobsImpl(const PrefetchJobsOptions& o, Catalog* catalog, TieredCache* cache,
                   MetaStore* meta, Clock* clock)
      : options_(o),
        catalog_(catalog),
        cache_(cache),
        store_(meta),
        clock_(clock),
        slots_(options_, &cache->Stats(), clock),
        cv_(&mu_) {}

  ~PrefetchJobsImpl() override {
    metrics_reg_.Reset();  // no scrape reads the jobs any more
    {
      MutexLock l(&mu_);
      stop_ = true;
    }
    cv_.SignalAll();
    slots_.Stop();
    runners_.clear();  // joins: a runner waits for the workers' tasks to end
    workers_.clear();
  }

  Status Load() {
    TIERFS_ASSIGN_OR_RETURN(PrefetchStore::Stored stored, store_.Scan());
    size_t resumed = 0;
    MutexLock l(&mu_);
    for (auto& [path, value] : stored.jobs) {
      auto st = DecodePrefetchJob(path, value);
      if (!st.ok()) {
        Logger(Module::kTierCache)
            .warn("prefetch job '{}': unreadable record ({}); dropped", path,
                  st.status().ToString());
        continue;
      }
      auto job = std::make_shared<Job>();
      job->st = std::move(*st);
      if (Finished(job->st.state) && job->st.finished_at_ns == 0) {
        job->st.finished_at_ns = clock_->NowUnixNanos();  // a layout-1 record: keep it a while
      }
      if (job->st.state == PrefetchState::kRunning || job->st.state == PrefetchState::kQueued) {
        job->st.state = PrefetchState::kQueued;
        queue_.push_back(path);
        ++resumed;
      }
      jobs_[path] = std::move(job);
    }
    LoadListLocked(stored.chunks, &stored.stale_chunks);
    stale_chunks_ = std::move(stored.stale_chunks);
    if (resumed > 0) {
      Logger(Module::kTierCache).info("prefetch: resuming {} job(s) from the metastore", resumed);
    }
    return Status::OK();
  }

  // The queued paths of an unfinished list job, from its stored chunks: those past its cursor
  // are queued in list_; chunks of no unfinished list job, or wholly passed, go to `stale`.
  void LoadListLocked(const std::vector<std::pair<uint64_t, std::string>>& chunks,
                      std::vector<std::string>* stale) REQUIRES(mu_) {
    auto it = jobs_.find(kPrefetchListJob);
    const PrefetchJobStatus* st = it == jobs_.end() ? nullptr : &it->second->st;
    const bool active = st != nullptr && !Finished(st->state);
    uint64_t base = 0;
    if (active && !ParseDecimal(st->cursor, &base)) {
      Logger(Module::kTierCache).warn("prefetch list job: bad stored cursor; its list is dropped");
      it->second->st.state = PrefetchState::kFailed;
      it->second->st.error = "unreadable list cursor";
      queue_.erase(std::remove(queue_.begin(), queue_.end(), std::string(kPrefetchListJob)),
                   queue_.end());
    }
    list_.Load(chunks, active, base, active ? st->cursor_files : 0, stale);
    if (active && st->state != PrefetchState::kFailed) {
      // The record may lag the chunks by one append: the chunks are the truth.
      it->second->st.files_total = st->cursor_files + list_.pending();
    }
  }

  // Drops the expired finished jobs and stale list chunks (load time, before any thread runs).
  void ExpireAtLoad() {
    std::vector<std::string> gone, stale;
    {
      MutexLock l(&mu_);
      gone = ExpireLocked();
      stale = std::move(stale_chunks_);
    }
    store_.Forget(gone);
    store_.DeleteChunks(stale);
  }

  // Forgets the queued files of the list job; returns the chunk keys to delete (without mu_).
  std::vector<std::string> DropListLocked() REQUIRES(mu_) { return list_.Drop(); }

  // Chunk keys the list job's cursor has passed (forgotten by list_).
  std::vector<std::string> PassedChunksLocked() REQUIRES(mu_) {
    auto it = jobs_.find(kPrefetchListJob);
    uint64_t base = 0;
    if (it == jobs_.end() || !ParseDecimal(it->second->st.cursor, &base)) return {};
    return list_.Passed(base + it->second->st.cursor_files);
  }

  void RegisterMetrics() {
    if (options_.metrics == nullptr) return;
    metrics_reg_ = options_.metrics->Add([this](metrics::Exposition* e) { Collect(e); });
  }

  void Collect(metrics::Exposition* e) EXCLUDES(mu_) {
    uint64_t queued = 0, running = 0;
    {
      MutexLock l(&mu_);
      for (const auto& [path, job] : jobs_) {
        if (job->st.state == PrefetchState::kQueued) ++queued;
        if (job->st.state == PrefetchState::kRunning) ++running;
      }
    }
    const char* help = "Deep prefetch jobs (user.tierfs.prefetch) queued or running now.";
    e->AddGauge("tierfs_prefetch_jobs", help, {{"state", "queued"}}, static_cast<double>(queued));
    e->AddGauge("tierfs_prefetch_jobs", help, {{"state", "running"}}, static_cast<double>(running));
    const char* fhelp = "Deep prefetch jobs that ended, by outcome, since the daemon started.";
    e->AddCounter("tierfs_prefetch_jobs_finished_total", fhelp, {{"state", "done"}},
                  finished_done_);
    e->AddCounter("tierfs_prefetch_jobs_finished_total", fhelp, {{"state", "failed"}},
                  finished_failed_);
    e->AddCounter("tierfs_prefetch_jobs_finished_total", fhelp, {{"state", "cancelled"}},
                  finished_cancelled_);
  }

  void CountFinished(PrefetchState s) {
    if (s == PrefetchState::kDone) ++finished_done_;
    if (s == PrefetchState::kFailed) ++finished_failed_;
    if (s == PrefetchState::kCancelled) ++finished_cancelled_;
  }

  void StartThreads() {
    for (int i = 0; i < options_.threads; ++i) {
      workers_.emplace_back([this, i](std::stop_token) { WorkerLoop(i); });
    }
    for (int i = 0; i < options_.max_running_jobs; ++i) {
      runners_.emplace_back([this](std::stop_token) { RunnerLoop(); });
    }
  }

  Status Start(std::string_view path, std::string_view tier) override {
    return StartJob(path, tier, std::nullopt);
  }

  Status StartAs(uint32_t uid, std::string_view path, std::string_view tier) override {
    return StartJob(path, tier, uid);
  }

  Status StartJob(std::string_view path, std::string_view tier, std::optional<uint32_t> owner)
      EXCLUDES(mu_) {
    TIERFS_ASSIGN_OR_RETURN(size_t target, TierIndex(tier));
    (void)target;
    PrefetchJobStatus snapshot;
    {
      MutexLock l(&mu_);
      auto it = jobs_.find(path);
      if (it != jobs_.end() && (it->second->st.state == PrefetchState::kQueued ||
                                it->second->st.state == PrefetchState::kRunning)) {
        return Status::OK();
      }
      if (owner && ActiveJobsOfLocked(*owner) >= options_.max_jobs_per_user) {
        Logger(Module::kTierCache)
            .warn("prefetch of '{}' by uid {} refused: it has {} jobs queued or running", path,
                  *owner, options_.max_jobs_per_user);
        return Status::NoSpace(fmt::format(
            "uid {} already has {} prefetch jobs queued or running (the most one user may have)",
            *owner, options_.max_jobs_per_user));
      }
      auto job = std::make_shared<Job>();
      job->st.path = std::string(path);
      job->st.tier = std::string(tier);
      job->st.state = PrefetchState::kQueued;
      job->owner = owner;
      snapshot = job->st;
      jobs_[std::string(path)] = std::move(job);
      queue_.push_back(std::string(path));
    }
    store_.Put(snapshot);
    Logger(Module::kTierCache).info("prefetch of '{}' into {} queued", path, tier);
    cv_.SignalAll();
    return Status::OK();
  }

  // Queued or running jobs `uid` started (StartAs).
  size_t ActiveJobsOfLocked(uint32_t uid) REQUIRES(mu_) {
    size_t n = 0;
    for (const auto& [p, job] : jobs_) {
      if (job->owner == uid && !Finished(job->st.state)) ++n;
    }
    return n;
  }

  Status AppendList(std::string_view tier, const std::vector<std::string>& paths) override {
    return AppendListFor(std::nullopt, tier, paths);
  }

  Status AppendListAs(uint32_t uid, std::string_view tier,
                      const std::vector<std::string>& paths) override {
    return AppendListFor(uid, tier, paths);
  }

  Status AppendListFor(std::optional<uint32_t> owner, std::string_view tier,
                       const std::vector<std::string>& paths) EXCLUDES(mu_) {
    TIERFS_ASSIGN_OR_RETURN(size_t target, TierIndex(tier));
    (void)target;
    uint64_t bytes = 0;
    TIERFS_ASSIGN_OR_RETURN(std::vector<ListItem> items,
                            tiercache_internal::LookUpListFiles(catalog_, paths, &bytes));
    if (items.empty()) return Status::OK();
    const size_t n = items.size();
    MutexLock append(&append_mu_);  // chunks are written in position order
    uint64_t first = 0;
    std::shared_ptr<Job> job;
    bool created = false;
    std::vector<std::string> dropped;
    {
      MutexLock l(&mu_);
      if (owner) {
        const size_t queued = list_.QueuedBy(*owner);
        if (queued + n > options_.max_list_files_per_user) {
          return Status::NoSpace(fmt::format(
              "uid {} already has {} files queued in the list job; {} more would pass the most "
              "one user may queue ({})",
              *owner, queued, n, options_.max_list_files_per_user));
        }
      }
      auto it = jobs_.find(kPrefetchListJob);
      if (it != jobs_.end() && !Finished(it->second->st.state)) {
        job = it->second;
        if (job->st.tier != tier) {
          return Status::InvalidArgument(fmt::format(
              "the list job runs into {}; wait for it or cancel it first", job->st.tier));
        }
      } else {
        dropped = DropListLocked();
        job = std::make_shared<Job>();
        job->st.path = std::string(kPrefetchListJob);
        job->st.tier = std::string(tier);
        job->st.state = PrefetchState::kQueued;
        job->st.cursor = std::to_string(list_.next_pos());
        jobs_[std::string(kPrefetchListJob)] = job;
        queue_.push_back(std::string(kPrefetchListJob));
        created = true;
      }
      first = list_.Append(std::move(items), owner);
      job->st.files_total += n;
      job->st.bytes_total += bytes;
    }
    store_.DeleteChunks(dropped);
    store_.PutChunk(first, paths);
    PersistJob(job);
    Logger(Module::kTierCache)
        .info("prefetch list into {}: {} file(s), {} bytes appended{}", tier, n, bytes,
              created ? " (new list job)" : "");
    cv_.SignalAll();
    return Status::OK();
  }

  Result<PrefetchJobStatus> Get(std::string_view path) override {
    MutexLock l(&mu_);
    auto it = jobs_.find(path);
    if (it == jobs_.end()) return Status::NotFound(fmt::format("no prefetch job for '{}'", path));
    return it->second->st;
  }

  Status Cancel(std::string_view path) override {
    PrefetchJobStatus snapshot;
    std::vector<std::string> dropped;
    {
      MutexLock l(&mu_);
      auto it = jobs_.find(path);
      if (it == jobs_.end()) return Status::NotFound(fmt::format("no prefetch job for '{}'", path));
      Job& job = *it->second;
      job.cancel = true;
      if (job.st.state != PrefetchState::kQueued) {
        cv_.SignalAll();
        slots_.WakeAll();
        return Status::OK();  // running: the runner records the cancellation
      }
      job.st.state = PrefetchState::kCancelled;
      job.st.finished_at_ns = clock_->NowUnixNanos();
      CountFinished(job.st.state);
      queue_.erase(std::remove(queue_.begin(), queue_.end(), std::string(path)), queue_.end());
      if (path == kPrefetchListJob) dropped = DropListLocked();
      snapshot = job.st;
    }
    store_.Put(snapshot);
    store_.DeleteChunks(dropped);
    Logger(Module::kTierCache).info("prefetch of '{}' cancelled", path);
    return Status::OK();
  }

  bool ListJobActive() override {
    MutexLock l(&mu_);
    auto it = jobs_.find(kPrefetchListJob);
    return it != jobs_.end() && !Finished(it->second->st.state);
  }

  bool TEST_WaitIdle(std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    MutexLock l(&mu_);
    while (!queue_.empty() || running_ > 0) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      cv_.WaitFor(std::chrono::milliseconds(10));
    }
    return true;
  }

 private:
  static bool Finished(PrefetchState s) {
    return s == PrefetchState::kDone || s == PrefetchState::kFailed ||
           s == PrefetchState::kCancelled;
  }

  // Removes finished jobs older than finished_ttl, and the oldest beyond keep_finished, from
  // jobs_; returns their paths (the caller deletes their records without the lock).
  std::vector<std::string> ExpireLocked() REQUIRES(mu_) {
    const int64_t now = clock_->NowUnixNanos();
    std::vector<std::pair<int64_t, std::string>> finished;
    std::vector<std::string> gone;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      const PrefetchJobStatus& st = it->second->st;
      if (!Finished(st.state)) {
        ++it;
        continue;
      }
      if (now - st.finished_at_ns >= options_.finished_ttl.count()) {
        gone.push_back(it->first);
        it = jobs_.erase(it);
        continue;
      }
      finished.emplace_back(st.finished_at_ns, it->first);
      ++it;
    }
    if (finished.size() > options_.keep_finished) {
      std::sort(finished.begin(), finished.end());
      for (size_t i = 0; i < finished.size() - options_.keep_finished; ++i) {
        jobs_.erase(finished[i].second);
        gone.push_back(std::move(finished[i].second));
      }
    }
    return gone;
  }

  Result<size_t> TierIndex(std::string_view tier) const {
    const auto& tiers = cache_->tiers();
    if (tier != "l1" && tier != "l2" && tier != "l3") {
      return Status::InvalidArgument(fmt::format("unknown tier '{}' (l1, l2 or l3)", tier));
    }
    for (size_t i = 0; i < tiers.size(); ++i) {
      if (tiers[i]->name() == tier) return i;
    }
    return Status::InvalidArgument(fmt::format("this daemon has no {} tier", tier));
  }

  // Persists the job's current state, unless another job of its path replaced it meanwhile; for
  // the list job also drops the stored chunks its cursor has passed.
  void PersistJob(const std::shared_ptr<Job>& job) {
    std::vector<std::string> passed;
    {
      MutexLock p(&persist_mu_);
      PrefetchJobStatus snapshot;
      {
        MutexLock l(&mu_);
        auto it = jobs_.find(job->st.path);
        if (it == jobs_.end() || it->second != job) return;
        snapshot = job->st;
        if (snapshot.path == kPrefetchListJob) passed = PassedChunksLocked();
      }
      store_.Put(snapshot);
    }
    store_.DeleteChunks(passed);
  }

  bool Stopping() {
    MutexLock l(&mu_);
    return stop_;
  }

  void RunnerLoop() {
    pthread_setname_np(pthread_self(), "tierfs-pfjob");
    while (true) {
      std::shared_ptr<Job> job;
      {
        MutexLock l(&mu_);
        while (!stop_ && queue_.empty()) cv_.Wait();
        if (stop_) return;
        std::string path = std::move(queue_.front());
        queue_.pop_front();
        auto it = jobs_.find(path);
        if (it == jobs_.end() || it->second->st.state != PrefetchState::kQueued) continue;
        job = it->second;
        job->st.state = PrefetchState::kRunning;
        ++running_;
      }
      RunJob(job);
      MutexLock l(&mu_);
      --running_;
      cv_.SignalAll();
    }
  }

  // Records the final state. With `only_if_list_empty`, finishes only if the list job has no
  // queued file left (returns false otherwise: an append came in, keep going).
  bool Finish(const std::shared_ptr<Job>& job, PrefetchState state, const std::string& error,
              bool only_if_list_empty = false) {
    PrefetchJobStatus snapshot;
    std::vector<std::string> gone, dropped;
    {
      MutexLock l(&mu_);
      if (only_if_list_empty && list_.pending() > 0) return false;
      if (job->st.path == kPrefetchListJob) dropped = DropListLocked();
      job->st.state = state;
      job->st.error = error;
      job->st.finished_at_ns = clock_->NowUnixNanos();
      CountFinished(state);
      snapshot = job->st;
      gone = ExpireLocked();
    }
    PersistJob(job);
    store_.Forget(gone);
    store_.DeleteChunks(dropped);
    Logger(Module::kTierCache)
        .info("prefetch of '{}' into {}: {} ({}){}", snapshot.path, snapshot.tier,
              PrefetchStateName(state), FormatPrefetchStatus(snapshot),
              error.empty() ? "" : ": " + error);
    return true;
  }

  // The list job's next queued file (looked up if it was loaded from the store); false when
  // none is queued now. A file gone since it was queued becomes an empty item (skipped, logged).
  Result<bool> NextListItem(FileItem* out) EXCLUDES(mu_) {
    std::optional<ListItem> item;
    {
      MutexLock l(&mu_);
      item = list_.Take();
    }
    if (!item) return false;
    TIERFS_ASSIGN_OR_RETURN(*out, tiercache_internal::ResolveListItem(catalog_, std::move(*item)));
    return true;
  }

  void RunJob(const std::shared_ptr<Job>& job) {
    const bool list = job->st.path == kPrefetchListJob;  // the path is constant
    std::string path, tier, cursor;
    BeginRun(job, list, &path, &tier, &cursor);
    auto target = TierIndex(tier);
    if (!target.ok()) {
      Finish(job, PrefetchState::kFailed, std::string(target.status().message()));
      return;
    }
    Walker walker(catalog_, list ? std::string() : path, list ? std::string() : cursor);
    while (true) {
      auto w = std::make_shared<Work>();
      w->job = job;
      w->list = list;
      w->target = *target;
      uint64_t batch_bytes = 0;
      const Status ws = FillBatch(w.get(), &walker, &batch_bytes);
      if (Stopping()) return;  // stays "running" on disk: resumed at the next start
      if (job->cancel) {
        Finish(job, PrefetchState::kCancelled, "");
        return;
      }
      if (!ws.ok()) {
        Finish(job, PrefetchState::kFailed, ws.ToString());
        return;
      }
      if (w->files.empty()) {
        // The walk is complete; a list job ends only if no append came in meanwhile.
        if (Finish(job, PrefetchState::kDone, "", list)) return;
        continue;
      }
      const uint64_t held_bytes =
          tiercache_internal::PlanTasks(cache_, options_.blocks_per_task, w.get());
      // All held: nothing for the workers, on to the next batch.
      if (!PublishBatch(w, batch_bytes, held_bytes)) continue;
      const std::string error = AwaitBatch(w);
      if (Stopping()) {
        PersistJob(job);  // "running" with its cursor: resumed at the next start
        return;
      }
      if (job->cancel) {
        Finish(job, PrefetchState::kCancelled, "");
        return;
      }
      if (w->failed) {
        Finish(job, PrefetchState::kFailed, error);
        return;
      }
    }
  }

  // The job's path, tier and cursor; its counters start from the cursor.
  void BeginRun(const std::shared_ptr<Job>& job, bool list, std::string* path, std::string* tier,
                std::string* cursor) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    *path = job->st.path;
    *tier = job->st.tier;
    *cursor = job->st.cursor;
    // A resumed job counts from its cursor: what lay beyond it is walked (and counted) again.
    // A list job knows its totals (its queued files are counted when appended).
    job->st.files_done = job->st.cursor_files;
    job->st.bytes_done = job->st.cursor_bytes;
    if (!list) {
      job->st.files_total = job->st.cursor_files;
      job->st.bytes_total = job->st.cursor_bytes;
    }
  }

  // The next batch of files (up to batch_files) from the walk or the list; stops early when the
  // job is cancelled or the daemon stops. *bytes: their sizes.
  Status FillBatch(Work* w, Walker* walker, uint64_t* bytes) {
    const size_t batch_files = std::max<size_t>(1, options_.batch_files);
    while (w->files.size() < batch_files) {
      if (w->job->cancel || Stopping()) break;
      FileItem item;
      Result<bool> more = w->list ? NextListItem(&item) : walker->Next(&item);
      if (!more.ok()) return more.status();
      if (!*more) break;
      *bytes += item.entry.size;
      w->files.push_back(std::move(item));
    }
    return Status::OK();
  }

  // Counts the planned batch into its job and hands its tasks to the workers; false when it has
  // none (every run was held already).
  bool PublishBatch(const std::shared_ptr<Work>& w, uint64_t batch_bytes, uint64_t held_bytes)
      EXCLUDES(mu_) {
    {
      MutexLock l(&mu_);
      if (!w->list) {
        w->job->st.files_total += w->files.size();
        w->job->st.bytes_total += batch_bytes;
      }
      w->job->st.bytes_done += held_bytes;
      w->Advance();
      if (!w->tasks.empty()) works_.push_back(w);
    }
    PersistJob(w->job);
    if (w->tasks.empty()) return false;
    cv_.SignalAll();
    return true;
  }

  // Waits for the batch to drain, persisting progress on the way; returns the job's error then.
  // Checked before waiting: a batch of small tasks can drain while the runner persists, and the
  // wake-up that said so came before the wait (it slept a whole persist_interval per batch).
  std::string AwaitBatch(const std::shared_ptr<Work>& w) EXCLUDES(mu_) {
    while (true) {
      bool drained;
      std::string error;
      {
        MutexLock l(&mu_);
        if (!w->Drained(stop_)) cv_.WaitFor(options_.persist_interval);
        drained = w->Drained(stop_);
        error = w->job->st.error;
        if (drained) works_.erase(std::find(works_.begin(), works_.end(), w));
      }
      if (drained) return error;
      PersistJob(w->job);
    }
  }

  // The next running job with a task to hand out, round-robin between them (nullptr: none).
  std::shared_ptr<Work> PickLocked() REQUIRES(mu_) {
    for (size_t i = 0; i < works_.size(); ++i) {
      const size_t k = (rr_ + i) % works_.size();
      const auto& w = works_[k];
      if (!w->failed && !w->job->cancel && w->next < w->tasks.size()) {
        rr_ = k + 1;
        return w;
      }
    }
    return nullptr;
  }

  void WorkerLoop(int n) {
    const std::string name = "tierfs-pfjob-" + std::to_string(n);
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    while (true) {
      std::shared_ptr<Work> w;
      Task task;
      {
        MutexLock l(&mu_);
        while (!stop_ && !(w = PickLocked())) cv_.Wait();
        if (stop_) return;
        task = w->TakeTask(options_.blocks_per_task);
        ++w->in_flight;
      }
      bool complete = false;
      const Status err = RunTask(*w, task, &complete);
      EndTask(*w, task, complete, err);
    }
  }

  // The task's blocks as one run (one ranged GET for those the target lacks), under one fetch
  // slot weighing the run's bytes. *complete: the run was hydrated (false: not run, or failed).
  Status RunTask(Work& w, const Task& task, bool* complete) {
    const FileItem& file = w.files[task.file];
    const ObjectRef obj = tiercache_internal::ObjectOf(file);
    const uint64_t bs = cache_->block_size();
    const uint64_t run_bytes = std::min<uint64_t>(
        task.count * bs, obj.info.size - std::min(obj.info.size, task.first * bs));
    if (w.job->cancel || Stopping() ||
        !slots_.Acquire(w.list, run_bytes, [&w] { return w.job->cancel || w.failed; })) {
      return Status::OK();
    }
    uint64_t done = 0;
    Status s = cache_->HydrateRun(obj, task.first, task.count, w.target, &done);
    slots_.Release(run_bytes);
    {
      MutexLock l(&mu_);
      w.job->st.bytes_done += done;
    }
    if (!s.ok()) {
      return s.WithContext(fmt::format("'{}' blocks {}+{}", file.path, task.first, task.count));
    }
    *complete = true;
    return Status::OK();
  }

  // Records the end of a task: its file's progress, or the job's failure.
  void EndTask(Work& w, const Task& task, bool complete, const Status& err) EXCLUDES(mu_) {
    bool wake = false;
    {
      MutexLock l(&mu_);
      --w.in_flight;
      if (complete) {
        --w.remaining[task.file];
        w.Advance();
      }
      if (!err.ok() && !w.failed) {
        w.failed = true;
        w.job->st.error = err.ToString();
        Logger(Module::kTierCache).warn("prefetch of '{}': {}", w.job->st.path, err.ToString());
      }
      // Only the job's runner waits for a task to end, and only for its batch to drain (it
      // persists progress on its own timer): waking every waiter after every task woke all the
      // idle workers once per file, which in a loader's warm epoch (PrefetchSampler's files all
      // held already, each task a few microseconds) cost more CPU than the tasks.
      wake = w.Drained(stop_);
    }
    if (wake) cv_.SignalAll();
  }

  // Constant after construction.
  const PrefetchJobsOptions options_;
  Catalog* const catalog_;
  TieredCache* const cache_;
  PrefetchStore store_;
  Clock* const clock_;
  tiercache_internal::FetchSlots slots_;

  Mutex append_mu_;   // serializes AppendList (chunks are written in position order)
  Mutex persist_mu_;  // a job's snapshot and its write are one step (no stale overwrite)
  Mutex mu_;
  // cv_: work to hand out, a batch drained, a job queued or ended, stop. The fetch slots have a
  // condition of their own (on cv_ a freed slot's signal could wake an idle worker instead and
  // leave the slot unused until the waiter's next poll).
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  int running_ GUARDED_BY(mu_) = 0;  // runners executing a job
  size_t rr_ GUARDED_BY(mu_) = 0;    // where PickLocked looks first
  std::map<std::string, std::shared_ptr<Job>, std::less<>> jobs_ GUARDED_BY(mu_);
  std::deque<std::string> queue_ GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Work>> works_ GUARDED_BY(mu_);  // of the running jobs
  // The list job's queued files (not yet in a batch) and stored chunks.
  tiercache_internal::ListQueue list_ GUARDED_BY(mu_);
  std::vector<std::string> stale_chunks_ GUARDED_BY(mu_);  // found by Load, deleted after
  std::atomic<uint64_t> finished_done_{0}, finished_failed_{0}, finished_cancelled_{0};
  metrics::Registry::Registration metrics_reg_;

  // Declared last: joined first.
  std::vector<std::jthread> workers_;
  std::vector<std::jthread> runners_;
};

}  // namespace

Result<std::unique_ptr<PrefetchJobs>> PrefetchJobs::Open(const PrefetchJobsOptions& options,
                                                         Catalog* catalog, TieredCache* cache,
                                                         MetaStore* meta, Clock* clock) {
  if (catalog == nullptr || cache == nullptr || meta == nullptr) {
    return Status::InvalidArgument("prefetch jobs: catalog, cache and metastore are required");
  }
  if (options.threads < 1 || options.threads > 64) {
    return Status::InvalidArgument("prefetch jobs: threads must be in [1, 64]");
  }
  if (options.max_running_jobs < 1 || options.max_running_jobs > 64) {
    return Status::InvalidArgument("prefetch jobs: max_running_jobs must be in [1, 64]");
  }
  if (options.memory_budget == 0 || options.slots_while_demand < 1) {
    return Status::InvalidArgument(
        "prefetch jobs: memory_budget and slots_while_demand must be > 0");
  }
  if (options.blocks_per_task == 0) {
    return Status::InvalidArgument("prefetch jobs: blocks_per_task must be > 0");
  }
  if (options.finished_ttl.count() < 0) {
    return Status::InvalidArgument("prefetch jobs: finished_ttl must not be negative");
  }
  if (clock == nullptr) clock = SystemClock();
  auto jobs = std::make_unique<PrefetchJobsImpl>(options, catalog, cache, meta, clock);
  TIERFS_RETURN_IF_ERROR(jobs->Load());
  jobs->ExpireAtLoad();
  jobs->StartThreads();
  jobs->RegisterMetrics();
  return std::unique_ptr<PrefetchJobs>(std::move(jobs));
}

}  // namespace tierfs
