// PrefetchJobs (prefetch_jobs.h).
//
// Threads: max_running_jobs runners ("tierfs-pfjob") each take the oldest queued job and walk
// its tree with a Walker (or take the list job's queued files; no lock held across Catalog
// calls), a batch of files at a time: a runner splits the batch into tasks of up to
// blocks_per_task consecutive blocks (a shorter tail than half that joins the task before it)
// and publishes them as a Work of its job (a run the target holds already is finished on the
// runner: TieredCache::TierHolds, then HydrateRun for its pin; no worker is woken for it). A
// file of more than kPlannedTasks tasks is published as one span instead, from which the workers
// cut their tasks as they take them, so that planning a file costs the same whatever its size
// (a sparse file of 2^62 bytes is 2^40 tasks: never listed);
// `threads` workers
// ("tierfs-pfjob-N") take tasks from the running jobs' Works round-robin (one task from each in
// turn: jobs share the workers fairly) and call TieredCache::HydrateRun per task (one ranged GET
// for the blocks the target lacks), each under one fetch slot: the slots allowed now are
// threads, bounded by the origin's adaptive limit less the demand reads in flight (and the runs'
// bytes by memory_budget), and (but for the list job, whose files are what its loader
// reads next) cut to slots_while_demand while demand reads fetch from the network
// (CacheStats::demand_remote_*), so a reader's GETs never queue behind a full prefetch load. A
// small file is one task (one GET) and a batch holds up to batch_files of them, so many files are
// in flight at once; a large file's tasks run on many workers in parallel. The runner waits for its
// batch to drain (or the job to be cancelled, fail, or the object to be destroyed), persisting
// progress every persist_interval, then walks the next batch, and at the end records the final
// state.
//
// Walk order: depth-first, each directory's entries in byte order of name (a subdirectory is
// walked where its name falls), so "file X comes before file Y" is a comparison of their paths
// component by component. The cursor is the path of the last file completed in that order; a
// resumed Walker starts just after it by seeking every directory on the cursor's path with the
// Catalog's name-after cursor.
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

namespace tierfs {
namespace {

constexpr std::string_view kJobPrefix = "prefetch/job/";
constexpr std::string_view kListPrefix = "prefetch/list/";

std::string ListChunkKey(uint64_t first) { return fmt::format("{}{:020}", kListPrefix, first); }

struct FileItem {
  std::string path;
  DirEntry entry;  // a list item that vanished before its turn: size 0, nothing to fetch
};

// A file queued in the list job; `entry` is empty after a restart (looked up at its turn).
struct ListItem {
  std::string path;
  std::optional<DirEntry> entry;
  std::optional<uint32_t> owner;  // appended by AppendListAs(owner): counted until taken
};

struct Task {
  size_t file = 0;
  uint64_t first = 0, count = 0;
  bool span = false;  // the rest of a large file: tasks are cut from its front as handed out
};

// Files of more tasks than this are published as a span (see the file comment).
constexpr uint64_t kPlannedTasks = 1024;

// The blocks of the next task of a file at `first` with `left` blocks to go: `per`, or all that
// is left when the tail would be shorter than half a task (a file of 5 blocks is one GET, not a
// GET of 4 blocks and another round trip for the last one).
uint64_t TaskBlocks(uint64_t left, uint64_t per) {
  const uint64_t n = std::min(per, left);
  return left - n < (per + 1) / 2 ? left : n;
}

struct Job {
  PrefetchJobStatus st;  // guarded by PrefetchJobsImpl::mu_
  std::atomic<bool> cancel{false};
  // The uid that started it through StartAs (counted against its max_jobs_per_user); unset for
  // Start and for jobs resumed from the MetaStore. Guarded by PrefetchJobsImpl::mu_.
  std::optional<uint32_t> owner;
};

// The job being executed. Fields guarded by PrefetchJobsImpl::mu_ except the constants.
struct Work {
  std::shared_ptr<Job> job;
  bool list = false;            // constant: the list job (position cursor, totals known)
  size_t target = 0;            // constant
  std::vector<FileItem> files;  // constant
  std::vector<Task> tasks;      // a span is cut from its front as tasks are handed out
  size_t next = 0;              // next task to hand out
  size_t in_flight = 0;
  std::vector<uint64_t> remaining;  // tasks left per file
  size_t completed = 0;             // files[0, completed) are done: the cursor is past them
  bool failed = false;
};

// Depth-first walk below one path in walk order (see the file comment), one listing page per
// directory level in memory. Not thread-safe; used by the runner only.
class Walker {
 public:
  Walker(Catalog* catalog, std::string root, std::string cursor)
      : catalog_(catalog), root_(std::move(root)), cursor_(std::move(cursor)) {}

  // The next file after the cursor; false at the end. Errors of the Catalog are returned, except
  // NotFound for a directory below the root (it vanished: nothing left to walk there).
  Result<bool> Next(FileItem* out) {
    if (!started_) {
      started_ = true;
      TIERFS_ASSIGN_OR_RETURN(bool single, StartAt());
      if (single) {
        if (!root_file_) return false;
        *out = std::move(*root_file_);
        root_file_.reset();
        return true;
      }
    }
    while (!stack_.empty()) {
      Frame& f = stack_.back();
      if (f.idx == f.page.size()) {
        if (f.last_page) {
          stack_.pop_back();
          continue;
        }
        f.page.clear();
        f.idx = 0;
        Status st = catalog_->ReadDir(f.dir, f.after, kPage, &f.page);
        if (!st.ok()) {
          if (st.IsNotFound() && stack_.size() > 1) {
            stack_.pop_back();
            continue;
          }
          return st;
        }
        f.last_page = f.page.size() < kPage;
        continue;
      }
      DirEntry& e = f.page[f.idx++];
      f.after = e.name;
      std::string p = JoinPath(f.dir, e.name);
      if (e.type == EntryType::kDir) {
        stack_.push_back(Frame{std::move(p)});
        continue;
      }
      *out = FileItem{std::move(p), std::move(e)};
      return true;
    }
    return false;
  }

 private:
  static constexpr size_t kPage = 1024;
  struct Frame {
    explicit Frame(std::string d) : dir(std::move(d)) {}
    std::string dir;
    std::string after;  // name-after cursor of the next page
    std::vector<DirEntry> page;
    size_t idx = 0;
    bool last_page = false;
  };

  // Sets up the stack; true if the root is a single file (then root_file_ holds it, unless the
  // cursor says it is done).
  Result<bool> StartAt() {
    if (!root_.empty()) {
      const size_t slash = root_.rfind('/');
      const std::string dir = slash == std::string::npos ? std::string() : root_.substr(0, slash);
      const std::string base = slash == std::string::npos ? root_ : root_.substr(slash + 1);
      TIERFS_ASSIGN_OR_RETURN(DirEntry e, catalog_->Lookup(dir, base));
      if (e.type != EntryType::kDir) {
        if (cursor_ != root_) root_file_ = FileItem{root_, std::move(e)};
        return true;
      }
    }
    stack_.push_back(Frame{root_});
    // Resume after the cursor: in every directory on its path, continue after its component.
    std::string_view rel = cursor_;
    if (!root_.empty()) {
      if (!rel.starts_with(root_ + "/")) return false;  // no (usable) cursor: from the start
      rel.remove_prefix(root_.size() + 1);
    }
    while (!rel.empty()) {
      const size_t slash = rel.find('/');
      const std::string name(rel.substr(0, slash));
      stack_.back().after = name;
      if (slash == std::string_view::npos) break;
      // The cursor lies inside directory `name`: walk the rest of it first.
      stack_.push_back(Frame{JoinPath(stack_.back().dir, name)});
      rel.remove_prefix(slash + 1);
    }
    return false;
  }

  Catalog* const catalog_;
  const std::string root_;
  const std::string cursor_;
  bool started_ = false;
  std::optional<FileItem> root_file_;
  std::vector<Frame> stack_;
};

class PrefetchJobsImpl final : public PrefetchJobs {
 public:
  PrefetchJobsImpl(const PrefetchJobsOptions& o, Catalog* catalog, TieredCache* cache,
                   MetaStore* meta, Clock* clock)
      : options_(o),
        catalog_(catalog),
        cache_(cache),
        meta_(meta),
        clock_(clock),
        cv_(&mu_),
        slot_cv_(&mu_) {}

  ~PrefetchJobsImpl() override {
    metrics_reg_.Reset();  // no scrape reads the jobs any more
    {
      MutexLock l(&mu_);
      stop_ = true;
    }
    cv_.SignalAll();
    slot_cv_.SignalAll();
    runners_.clear();  // joins: a runner waits for the workers' tasks to end
    workers_.clear();
  }

  Status Load() {
    std::vector<std::pair<std::string, std::string>> stored;
    TIERFS_RETURN_IF_ERROR(
        meta_->ScanValues(kJobPrefix, [&](std::string_view k, std::string_view v) {
          stored.emplace_back(std::string(k.substr(kJobPrefix.size())), std::string(v));
          return true;
        }));
    std::vector<std::pair<uint64_t, std::string>> chunks;  // (first position, paths)
    std::vector<std::string> stale_chunks;
    TIERFS_RETURN_IF_ERROR(
        meta_->ScanValues(kListPrefix, [&](std::string_view k, std::string_view v) {
          uint64_t first = 0;
          if (ParseDecimal(k.substr(kListPrefix.size()), &first)) {
            chunks.emplace_back(first, std::string(v));
          } else {
            stale_chunks.emplace_back(k);
          }
          return true;
        }));
    size_t resumed = 0;
    MutexLock l(&mu_);
    for (auto& [path, value] : stored) {
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
    LoadListLocked(chunks, &stale_chunks);
    stale_chunks_ = std::move(stale_chunks);
    if (resumed > 0) {
      Logger(Module::kTierCache).info("prefetch: resuming {} job(s) from the metastore", resumed);
    }
    return Status::OK();
  }

  // The queued paths of an unfinished list job, from its stored chunks: those past its cursor
  // become list_pending_; chunks of no unfinished list job, or wholly passed, go to `stale`.
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
    const uint64_t next = active ? base + st->cursor_files : 0;
    uint64_t end = active ? base + st->cursor_files : 0;
    for (const auto& [first, value] : chunks) {
      std::vector<std::string> paths;
      for (size_t pos = 0; pos <= value.size();) {
        size_t nl = value.find('\n', pos);
        if (nl == std::string::npos) nl = value.size();
        paths.emplace_back(value.substr(pos, nl - pos));
        pos = nl + 1;
      }
      if (!active || first < base || first + paths.size() <= next) {
        stale->push_back(ListChunkKey(first));
        list_next_pos_ = std::max(list_next_pos_, first + paths.size());
        continue;
      }
      for (size_t i = 0; i < paths.size(); ++i) {
        if (first + i >= next)
          list_pending_.push_back(ListItem{std::move(paths[i]), {}, std::nullopt});
      }
      list_chunks_.emplace_back(first, paths.size());
      end = std::max(end, first + paths.size());
    }
    list_next_pos_ = std::max(list_next_pos_, end);
    if (active && st->state != PrefetchState::kFailed) {
      // The record may lag the chunks by one append: the chunks are the truth.
      it->second->st.files_total = st->cursor_files + list_pending_.size();
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
    ForgetStored(gone);
    DeleteChunks(stale);
  }

  void DeleteChunks(const std::vector<std::string>& keys) {
    for (const std::string& k : keys) {
      Status s = meta_->DeleteValue(k);
      if (!s.ok()) {
        Logger(Module::kTierCache)
            .warn("prefetch list: cannot drop the stored chunk '{}': {}", k, s.ToString());
      }
    }
  }

  // Forgets the queued files of the list job; returns the chunk keys to delete (without mu_).
  std::vector<std::string> DropListLocked() REQUIRES(mu_) {
    std::vector<std::string> keys;
    for (const auto& c : list_chunks_) keys.push_back(ListChunkKey(c.first));
    list_chunks_.clear();
    list_pending_.clear();
    list_queued_by_uid_.clear();
    return keys;
  }

  // Chunk keys the list job's cursor has passed (removed from list_chunks_).
  std::vector<std::string> PassedChunksLocked() REQUIRES(mu_) {
    std::vector<std::string> keys;
    auto it = jobs_.find(kPrefetchListJob);
    uint64_t base = 0;
    if (it == jobs_.end() || !ParseDecimal(it->second->st.cursor, &base)) return keys;
    const uint64_t next = base + it->second->st.cursor_files;
    while (!list_chunks_.empty() &&
           list_chunks_.front().first + list_chunks_.front().second <= next) {
      keys.push_back(ListChunkKey(list_chunks_.front().first));
      list_chunks_.pop_front();
    }
    return keys;
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
    Persist(snapshot);
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

  // The Catalog entries of `paths` (relative to the root), their sizes added to *bytes.
  // InvalidArgument for a path that does not exist or is a directory (named in the message).
  Result<std::vector<ListItem>> LookUpListFiles(const std::vector<std::string>& paths,
                                                uint64_t* bytes) {
    std::vector<ListItem> items;
    items.reserve(paths.size());
    for (const std::string& p : paths) {
      if (p.empty()) return Status::InvalidArgument("'/' is the mount root, a directory");
      const size_t slash = p.rfind('/');
      const std::string_view dir =
          slash == std::string::npos ? std::string_view() : std::string_view(p).substr(0, slash);
      const std::string_view base =
          slash == std::string::npos ? std::string_view(p) : std::string_view(p).substr(slash + 1);
      auto e = catalog_->Lookup(dir, base);
      if (!e.ok()) {
        if (e.status().IsNotFound()) {
          return Status::InvalidArgument(fmt::format("'{}': no such file", EscapeForLog(p)));
        }
        return e.status().WithContext(fmt::format("'{}'", EscapeForLog(p)));
      }
      if (e->type == EntryType::kDir) {
        return Status::InvalidArgument(fmt::format("'{}' is a directory", EscapeForLog(p)));
      }
      *bytes += e->size;
      items.push_back(ListItem{p, std::move(*e), std::nullopt});
    }
    return items;
  }

  Status AppendListFor(std::optional<uint32_t> owner, std::string_view tier,
                       const std::vector<std::string>& paths) EXCLUDES(mu_) {
    TIERFS_ASSIGN_OR_RETURN(size_t target, TierIndex(tier));
    (void)target;
    uint64_t bytes = 0;
    TIERFS_ASSIGN_OR_RETURN(std::vector<ListItem> items, LookUpListFiles(paths, &bytes));
    if (items.empty()) return Status::OK();
    MutexLock append(&append_mu_);  // chunks are written in position order
    uint64_t first = 0;
    std::shared_ptr<Job> job;
    bool created = false;
    std::vector<std::string> dropped;
    {
      MutexLock l(&mu_);
      if (owner) {
        const auto q = list_queued_by_uid_.find(*owner);
        const size_t queued = q == list_queued_by_uid_.end() ? 0 : q->second;
        if (queued + items.size() > options_.max_list_files_per_user) {
          return Status::NoSpace(fmt::format(
              "uid {} already has {} files queued in the list job; {} more would pass the most "
              "one user may queue ({})",
              *owner, queued, items.size(), options_.max_list_files_per_user));
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
        job->st.cursor = std::to_string(list_next_pos_);
        jobs_[std::string(kPrefetchListJob)] = job;
        queue_.push_back(std::string(kPrefetchListJob));
        created = true;
      }
      if (owner) {
        list_queued_by_uid_[*owner] += items.size();
        for (ListItem& i : items) i.owner = owner;
      }
      first = list_next_pos_;
      list_next_pos_ += items.size();
      list_chunks_.emplace_back(first, items.size());
      for (ListItem& i : items) list_pending_.push_back(std::move(i));
      job->st.files_total += items.size();
      job->st.bytes_total += bytes;
    }
    DeleteChunks(dropped);
    std::string value;
    for (const std::string& p : paths) {
      if (!value.empty()) value += '\n';
      value += p;
    }
    Status s = meta_->PutValue(ListChunkKey(first), value);
    if (!s.ok()) {
      Logger(Module::kTierCache)
          .warn("prefetch list: cannot persist {} queued files: {}", paths.size(), s.ToString());
    }
    PersistJob(job);
    Logger(Module::kTierCache)
        .info("prefetch list into {}: {} file(s), {} bytes appended{}", tier, items.size(), bytes,
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
        slot_cv_.SignalAll();
        return Status::OK();  // running: the runner records the cancellation
      }
      job.st.state = PrefetchState::kCancelled;
      job.st.finished_at_ns = clock_->NowUnixNanos();
      CountFinished(job.st.state);
      queue_.erase(std::remove(queue_.begin(), queue_.end(), std::string(path)), queue_.end());
      if (path == kPrefetchListJob) dropped = DropListLocked();
      snapshot = job.st;
    }
    Persist(snapshot);
    DeleteChunks(dropped);
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

  void ForgetStored(const std::vector<std::string>& paths) {
    for (const std::string& p : paths) {
      Status s = meta_->DeleteValue(PrefetchJobKey(p));
      if (!s.ok()) {
        Logger(Module::kTierCache)
            .warn("prefetch job '{}': cannot drop the finished record: {}", p, s.ToString());
      }
    }
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

  void Persist(const PrefetchJobStatus& st) {
    Status s = meta_->PutValue(PrefetchJobKey(st.path), EncodePrefetchJob(st));
    if (!s.ok()) {
      Logger(Module::kTierCache)
          .warn("prefetch job '{}': cannot persist: {}", st.path, s.ToString());
    }
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
      Persist(snapshot);
    }
    DeleteChunks(passed);
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
      if (only_if_list_empty && !list_pending_.empty()) return false;
      if (job->st.path == kPrefetchListJob) dropped = DropListLocked();
      job->st.state = state;
      job->st.error = error;
      job->st.finished_at_ns = clock_->NowUnixNanos();
      CountFinished(state);
      snapshot = job->st;
      gone = ExpireLocked();
    }
    PersistJob(job);
    ForgetStored(gone);
    DeleteChunks(dropped);
    Logger(Module::kTierCache)
        .info("prefetch of '{}' into {}: {} ({}){}", snapshot.path, snapshot.tier,
              PrefetchStateName(state), FormatPrefetchStatus(snapshot),
              error.empty() ? "" : ": " + error);
    return true;
  }

  // The list job's next queued file (looked up if it was loaded from the store); false when
  // none is queued now. A file gone since it was queued becomes an empty item (skipped, logged).
  Result<bool> NextListItem(FileItem* out) {
    ListItem item;
    {
      MutexLock l(&mu_);
      if (list_pending_.empty()) return false;
      item = std::move(list_pending_.front());
      list_pending_.pop_front();
      if (item.owner) {
        auto it = list_queued_by_uid_.find(*item.owner);
        if (it != list_queued_by_uid_.end() && --it->second == 0) list_queued_by_uid_.erase(it);
      }
    }
    if (!item.entry) {
      const size_t slash = item.path.rfind('/');
      const std::string dir =
          slash == std::string::npos ? std::string() : item.path.substr(0, slash);
      const std::string base = slash == std::string::npos ? item.path : item.path.substr(slash + 1);
      auto e = catalog_->Lookup(dir, base);
      if (e.ok() && e->type != EntryType::kDir) {
        item.entry = std::move(*e);
      } else if (e.ok() || e.status().IsNotFound()) {
        Logger(Module::kTierCache)
            .warn("prefetch list: '{}' is gone or is a directory now; skipped",
                  EscapeForLog(item.path));
        item.entry = DirEntry{};
      } else {
        return e.status().WithContext(fmt::format("'{}'", EscapeForLog(item.path)));
      }
    }
    *out = FileItem{std::move(item.path), std::move(*item.entry)};
    if (out->entry.type == EntryType::kDir) out->entry.size = 0;
    return true;
  }

  void RunJob(const std::shared_ptr<Job>& job) {
    std::string path, tier, cursor;
    const bool list = job->st.path == kPrefetchListJob;  // the path is constant
    {
      MutexLock l(&mu_);
      path = job->st.path;
      tier = job->st.tier;
      cursor = job->st.cursor;
      // A resumed job counts from its cursor: what lay beyond it is walked (and counted) again.
      // A list job knows its totals (its queued files are counted when appended).
      job->st.files_done = job->st.cursor_files;
      job->st.bytes_done = job->st.cursor_bytes;
      if (!list) {
        job->st.files_total = job->st.cursor_files;
        job->st.bytes_total = job->st.cursor_bytes;
      }
    }
    auto target = TierIndex(tier);
    if (!target.ok()) {
      Finish(job, PrefetchState::kFailed, std::string(target.status().message()));
      return;
    }
    Walker walker(catalog_, list ? std::string() : path, list ? std::string() : cursor);
    const uint64_t bs = cache_->block_size();
    const size_t batch_files = std::max<size_t>(1, options_.batch_files);
    while (true) {
      auto w = std::make_shared<Work>();
      w->job = job;
      w->list = list;
      w->target = *target;
      Status ws;
      uint64_t batch_bytes = 0;
      while (w->files.size() < batch_files) {
        if (job->cancel || Stopping()) break;
        FileItem item;
        Result<bool> more = list ? NextListItem(&item) : walker.Next(&item);
        if (!more.ok()) {
          ws = more.status();
          break;
        }
        if (!*more) break;
        batch_bytes += item.entry.size;
        w->files.push_back(std::move(item));
      }
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

      w->remaining.assign(w->files.size(), 0);
      uint64_t held_bytes = 0;
      for (size_t f = 0; f < w->files.size(); ++f) {
        const uint64_t nblocks = (w->files[f].entry.size + bs - 1) / bs;
        const uint64_t per = options_.blocks_per_task;
        const ObjectRef obj = ObjectOf(w->files[f]);
        if (nblocks / per > kPlannedTasks) {
          w->tasks.push_back(Task{f, 0, nblocks, /*span=*/true});
          ++w->remaining[f];
          continue;
        }
        for (uint64_t b = 0; b < nblocks;) {
          const uint64_t n = TaskBlocks(nblocks - b, per);
          // A run the target holds already is finished here: handed to a worker, it cost a
          // wake-up and a fetch slot for a check of a few microseconds (a loader's warm epoch
          // under PrefetchSampler sends only such files). Should a block go in between, this
          // HydrateRun fetches it, on the runner: rare, and still right.
          uint64_t done = 0;
          if (cache_->TierHolds(obj, b, n, *target) &&
              cache_->HydrateRun(obj, b, n, *target, &done).ok()) {
            held_bytes += done;
          } else {
            w->tasks.push_back(Task{f, b, n});
            ++w->remaining[f];
          }
          b += n;
        }
      }
      PrefetchJobStatus snapshot;
      {
        MutexLock l(&mu_);
        if (!list) {
          job->st.files_total += w->files.size();
          job->st.bytes_total += batch_bytes;
        }
        job->st.bytes_done += held_bytes;
        AdvanceLocked(*w);
        snapshot = job->st;
        if (!w->tasks.empty()) works_.push_back(w);
      }
      PersistJob(job);
      if (w->tasks.empty()) continue;  // all held: nothing for the workers, on to the next batch
      cv_.SignalAll();

      // Wait for the batch to drain, persisting progress on the way. Checked before waiting: a
      // batch of small tasks can drain while the runner persists, and the wake-up that said so
      // came before the wait (it slept a whole persist_interval per batch).
      while (true) {
        bool drained;
        {
          MutexLock l(&mu_);
          if (!DrainedLocked(*w)) cv_.WaitFor(options_.persist_interval);
          drained = DrainedLocked(*w);
          snapshot = job->st;
          if (drained) works_.erase(std::find(works_.begin(), works_.end(), w));
        }
        if (drained) break;
        PersistJob(job);
      }
      if (Stopping()) {
        PersistJob(job);  // "running" with its cursor: resumed at the next start
        return;
      }
      if (job->cancel) {
        Finish(job, PrefetchState::kCancelled, "");
        return;
      }
      if (w->failed) {
        Finish(job, PrefetchState::kFailed, snapshot.error);
        return;
      }
    }
  }

  // The object version a walked or listed file names (its catalog entry's size, ETag, mtime).
  static ObjectRef ObjectOf(const FileItem& file) {
    ObjectRef obj;
    obj.key = file.path;
    obj.info.size = file.entry.size;
    obj.info.etag = file.entry.etag;
    obj.info.mtime_ns = file.entry.mtime_ns;
    return obj;
  }

  // A batch is drained when no task of it is in flight and none will be handed out: all were,
  // or the job stops (failed, cancelled, the daemon stopping).
  bool DrainedLocked(const Work& w) REQUIRES(mu_) {
    return w.in_flight == 0 && (w.next == w.tasks.size() || w.failed || w.job->cancel || stop_);
  }

  // Counts files whose tasks all finished; moves the cursor over the completed prefix.
  void AdvanceLocked(Work& w) REQUIRES(mu_) {
    PrefetchJobStatus& st = w.job->st;
    while (w.completed < w.files.size() && w.remaining[w.completed] == 0) {
      const FileItem& f = w.files[w.completed++];
      if (!w.list) st.cursor = f.path;  // a list job's cursor is its first position
      ++st.cursor_files;
      st.cursor_bytes += f.entry.size;
    }
    uint64_t beyond = 0;  // finished out of order, past the cursor
    for (size_t f = w.completed; f < w.files.size(); ++f) beyond += w.remaining[f] == 0;
    st.files_done = st.cursor_files + beyond;
  }

  // The next task of `w` (REQUIRES: w.next < w.tasks.size()): tasks[next], or a task cut from
  // the front of a span, which stays for the next worker while blocks are left (a task more for
  // its file in `remaining`).
  Task TakeTaskLocked(Work& w) REQUIRES(mu_) {
    Task& t = w.tasks[w.next];
    if (!t.span) return w.tasks[w.next++];
    const uint64_t n = TaskBlocks(t.count, options_.blocks_per_task);
    Task out{t.file, t.first, n};
    t.first += n;
    t.count -= n;
    if (t.count == 0) {
      ++w.next;
    } else {
      ++w.remaining[t.file];
    }
    return out;
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

  // How many blocks the jobs may fetch at once now: `threads`, within the memory budget and the
  // origin's adaptive limit less what demand reads use, and only slots_while_demand while demand
  // reads are fetching or did within demand_quiet (prefetch yields to them) — except for the
  // list job (`list`): its files are, in order, what the loader that sent them reads next
  // (PrefetchSampler), so its demand misses are that loader catching up with the list, and
  // yielding to them made the loader wait for its own prefetch.
  size_t AllowedLocked(bool list) REQUIRES(mu_) {
    size_t cap = static_cast<size_t>(options_.threads);
    const CacheStats& cs = cache_->Stats();
    const int64_t demand = std::max<int64_t>(0, cs.demand_remote_in_flight.load());
    const int64_t now = clock_->MonotonicNanos();
    if (options_.origin_limit) {
      if (now - limit_read_ns_ >= 50'000'000 || limit_read_ns_ == 0) {
        origin_limit_ = options_.origin_limit();
        limit_read_ns_ = now;
      }
      if (origin_limit_ > 0) {
        const int64_t room = static_cast<int64_t>(origin_limit_) - demand;
        cap = std::min<size_t>(cap, static_cast<size_t>(std::max<int64_t>(1, room)));
      }
    }
    const int64_t last = cs.demand_remote_last_ns.load();
    if (!list && (demand > 0 || (last != 0 && now - last < options_.demand_quiet.count()))) {
      cap = std::min<size_t>(cap, std::max(1, options_.slots_while_demand));
    }
    return cap;
  }

  // Takes one of the allowed fetch slots for a run of `bytes` (false: stopping or the job
  // ended). The runs in flight stay within memory_budget (one run always may go).
  bool AcquireSlot(const Work& w, uint64_t bytes) {
    MutexLock l(&mu_);
    while (!stop_ && !w.job->cancel && !w.failed &&
           (fetching_ >= AllowedLocked(w.list) ||
            (fetching_ > 0 && fetching_bytes_ + bytes > options_.memory_budget))) {
      slot_cv_.WaitFor(std::chrono::milliseconds(5));  // the cap moves with demand reads
    }
    if (stop_ || w.job->cancel || w.failed) return false;
    ++fetching_;
    fetching_bytes_ += bytes;
    return true;
  }

  void ReleaseSlot(uint64_t bytes) {
    {
      MutexLock l(&mu_);
      --fetching_;
      fetching_bytes_ -= bytes;
    }
    slot_cv_.Signal();
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
        task = TakeTaskLocked(*w);
        ++w->in_flight;
      }
      const FileItem& file = w->files[task.file];
      const ObjectRef obj = ObjectOf(file);
      const uint64_t bs = cache_->block_size();
      Status err = Status::OK();
      bool complete = true;
      // The task's blocks as one run (one ranged GET for those the target lacks), under one
      // fetch slot weighing the run's bytes.
      const uint64_t run_bytes = std::min<uint64_t>(
          task.count * bs, obj.info.size - std::min(obj.info.size, task.first * bs));
      if (w->job->cancel || Stopping() || !AcquireSlot(*w, run_bytes)) {
        complete = false;
      } else {
        uint64_t done = 0;
        Status s = cache_->HydrateRun(obj, task.first, task.count, w->target, &done);
        ReleaseSlot(run_bytes);
        {
          MutexLock l(&mu_);
          w->job->st.bytes_done += done;
        }
        if (!s.ok()) {
          err = s.WithContext(fmt::format("'{}' blocks {}+{}", file.path, task.first, task.count));
          complete = false;
        }
      }
      bool wake = false;
      {
        MutexLock l(&mu_);
        --w->in_flight;
        if (complete) {
          --w->remaining[task.file];
          AdvanceLocked(*w);
        }
        if (!err.ok() && !w->failed) {
          w->failed = true;
          w->job->st.error = err.ToString();
          Logger(Module::kTierCache).warn("prefetch of '{}': {}", w->job->st.path, err.ToString());
        }
        // Only the job's runner waits for a task to end, and only for its batch to drain (it
        // persists progress on its own timer): waking every waiter after every task woke all
        // the idle workers once per file, which in a loader's warm epoch (PrefetchSampler's
        // files all held already, each task a few microseconds) cost more CPU than the tasks.
        wake = DrainedLocked(*w);
      }
      if (wake) cv_.SignalAll();
    }
  }

  // Constant after construction.
  const PrefetchJobsOptions options_;
  Catalog* const catalog_;
  TieredCache* const cache_;
  MetaStore* const meta_;
  Clock* const clock_;

  Mutex append_mu_;   // serializes AppendList (chunks are written in position order)
  Mutex persist_mu_;  // a job's snapshot and its write are one step (no stale overwrite)
  Mutex mu_;
  // cv_: work to hand out, a batch drained, a job queued or ended, stop. slot_cv_: a fetch slot
  // freed (AcquireSlot's waiters, one per freed slot; on cv_ the signal could wake an idle worker
  // instead and leave the slot unused until the waiter's next poll).
  CondVar cv_;
  CondVar slot_cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  int running_ GUARDED_BY(mu_) = 0;              // runners executing a job
  size_t fetching_ GUARDED_BY(mu_) = 0;          // workers inside HydrateRun
  uint64_t fetching_bytes_ GUARDED_BY(mu_) = 0;  // ... and the bytes of their runs
  size_t rr_ GUARDED_BY(mu_) = 0;                // where PickLocked looks first
  uint64_t origin_limit_ GUARDED_BY(mu_) = 0;
  int64_t limit_read_ns_ GUARDED_BY(mu_) = 0;
  std::map<std::string, std::shared_ptr<Job>, std::less<>> jobs_ GUARDED_BY(mu_);
  std::deque<std::string> queue_ GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Work>> works_ GUARDED_BY(mu_);  // of the running jobs
  // The list job's queued files (not yet in a batch), its stored chunks (first position, count)
  // not yet passed by its cursor, and the position of the next file appended.
  std::deque<ListItem> list_pending_ GUARDED_BY(mu_);
  // Files of list_pending_ each AppendListAs uid queued (max_list_files_per_user).
  std::map<uint32_t, size_t> list_queued_by_uid_ GUARDED_BY(mu_);
  std::deque<std::pair<uint64_t, uint64_t>> list_chunks_ GUARDED_BY(mu_);
  uint64_t list_next_pos_ GUARDED_BY(mu_) = 0;
  std::vector<std::string> stale_chunks_ GUARDED_BY(mu_);  // found by Load, deleted after
  std::atomic<uint64_t> finished_done_{0}, finished_failed_{0}, finished_cancelled_{0};
  metrics::Registry::Registration metrics_reg_;

  // Declared last: joined first.
  std::vector<std::jthread> workers_;
  std::vector<std::jthread> runners_;
};

}  // namespace

std::string_view PrefetchStateName(PrefetchState s) {
  switch (s) {
    case PrefetchState::kQueued:
      return "queued";
    case PrefetchState::kRunning:
      return "running";
    case PrefetchState::kDone:
      return "done";
    case PrefetchState::kFailed:
      return "failed";
    case PrefetchState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

std::string FormatPrefetchStatus(const PrefetchJobStatus& s) {
  std::string out =
      fmt::format("state={} tier={} files={}/{} bytes={}/{}", PrefetchStateName(s.state), s.tier,
                  s.files_done, s.files_total, s.bytes_done, s.bytes_total);
  if (s.state == PrefetchState::kFailed && !s.error.empty()) {
    std::string e = s.error.substr(0, 200);
    std::replace(e.begin(), e.end(), ' ', '_');
    std::replace(e.begin(), e.end(), '\n', '_');
    out += " error=" + e;
  }
  return out;
}

Result<PrefetchListRequest> ParsePrefetchList(std::string_view value) {
  PrefetchListRequest r;
  while (!value.empty() && (value.back() == '\0' || value.back() == '\n')) value.remove_suffix(1);
  if (value == "cancel") {
    r.cancel = true;
    return r;
  }
  if (value.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("a NUL byte in the list");
  }
  bool first = true;
  size_t line_no = 0;
  for (size_t pos = 0; pos <= value.size();) {
    size_t nl = value.find('\n', pos);
    if (nl == std::string_view::npos) nl = value.size();
    std::string_view line = value.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (first && line.starts_with("tier=")) {
      first = false;
      r.tier = std::string(line.substr(5));
      if (r.tier != "l1" && r.tier != "l2" && r.tier != "l3") {
        return Status::InvalidArgument(
            fmt::format("line 1: unknown tier '{}' (l1, l2 or l3)", EscapeForLog(r.tier)));
      }
      continue;
    }
    first = false;
    while (line.starts_with('/')) line.remove_prefix(1);
    // Components: no empty, "." or ".." (the Catalog names files by their plain key).
    for (size_t c = 0; c <= line.size();) {
      size_t sl = line.find('/', c);
      if (sl == std::string_view::npos) sl = line.size();
      const std::string_view comp = line.substr(c, sl - c);
      if ((comp.empty() && !line.empty()) || comp == "." || comp == "..") {
        return Status::InvalidArgument(
            fmt::format("line {}: bad path '{}'", line_no, EscapeForLog(line)));
      }
      c = sl + 1;
    }
    r.paths.emplace_back(line);
  }
  return r;
}

std::string PrefetchJobKey(std::string_view path) {
  return std::string(kJobPrefix) + std::string(path);
}

// Layout 2: "2 <state 0-4> <tier> <files_done> <files_total> <bytes_done> <bytes_total>
// <finished_at_ns> <cursor_files> <cursor_bytes> <cursor length> <cursor> <error>" (the cursor,
// a path that may hold spaces, is length-prefixed; the error is the rest of the value).
std::string EncodePrefetchJob(const PrefetchJobStatus& s) {
  return fmt::format("2 {} {} {} {} {} {} {} {} {} {} {} {}", static_cast<int>(s.state), s.tier,
                     s.files_done, s.files_total, s.bytes_done, s.bytes_total, s.finished_at_ns,
                     s.cursor_files, s.cursor_bytes, s.cursor.size(), s.cursor, s.error);
}

Result<PrefetchJobStatus> DecodePrefetchJob(std::string_view path, std::string_view value) {
  // Layout 1 (before name cursors) has 8 space-separated fields before the error; layout 2 has
  // 11 before the cursor.
  const bool v1 = value.starts_with("1 ");
  if (!v1 && !value.starts_with("2 ")) {
    return Status::Corruption("prefetch job: unknown layout version");
  }
  const size_t nfields = v1 ? 8 : 11;
  std::vector<std::string_view> f;
  size_t pos = 0;
  while (f.size() < nfields) {
    size_t sp = value.find(' ', pos);
    if (sp == std::string_view::npos) return Status::Corruption("prefetch job: too few fields");
    f.push_back(value.substr(pos, sp - pos));
    pos = sp + 1;
  }
  PrefetchJobStatus s;
  s.path = std::string(path);
  uint64_t state = 0;
  if (!ParseDecimal(f[1], &state) || state > 4)
    return Status::Corruption("prefetch job: bad state");
  s.state = static_cast<PrefetchState>(state);
  s.tier = std::string(f[2]);
  if (!ParseDecimal(f[3], &s.files_done) || !ParseDecimal(f[4], &s.files_total) ||
      !ParseDecimal(f[5], &s.bytes_done) || !ParseDecimal(f[6], &s.bytes_total)) {
    return Status::Corruption("prefetch job: bad counter");
  }
  if (v1) {
    // A position cursor cannot be turned into a name: an unfinished layout-1 job starts its walk
    // again (blocks already in the target are skipped without I/O).
    uint64_t position = 0;
    if (!ParseDecimal(f[7], &position)) return Status::Corruption("prefetch job: bad counter");
    s.error = std::string(value.substr(pos));
    return s;
  }
  uint64_t finished_at = 0, cursor_len = 0;
  if (!ParseDecimal(f[7], &finished_at) || !ParseDecimal(f[8], &s.cursor_files) ||
      !ParseDecimal(f[9], &s.cursor_bytes) || !ParseDecimal(f[10], &cursor_len) ||
      finished_at > static_cast<uint64_t>(INT64_MAX)) {
    return Status::Corruption("prefetch job: bad counter");
  }
  s.finished_at_ns = static_cast<int64_t>(finished_at);
  if (cursor_len > value.size() - pos || value.size() - pos - cursor_len < 1 ||
      value[pos + cursor_len] != ' ') {
    return Status::Corruption("prefetch job: bad cursor");
  }
  s.cursor = std::string(value.substr(pos, cursor_len));
  s.error = std::string(value.substr(pos + cursor_len + 1));
  return s;
}

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
