// The settable user.tierfs.* xattrs (prefetch, evict, pin, ttl, policy) through Filesystem, with a
// PrefetchJobs and a PolicyResolver attached: good values, every bad value on files and on
// directories (EINVAL + no change), the pin quota (ENOSPC), inheritance, listing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "base/cancel.h"
#include "fuse/filesystem.h"
#include "fuse/fuse_server.h"
#include "fuse/xattr_handlers.h"
#include "metastore/meta_store.h"
#include "tests/fakes/fake_blob_store.h"
#include "tests/testing/status_matchers.h"
#include "tiercache/catalog.h"
#include "tiercache/policy.h"
#include "tiercache/prefetch_jobs.h"
#include "tiercache/tiered_cache.h"

namespace tierfs {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kBlock = 4096;
constexpr uint32_t kMounter = 1000;  // the mounting user: may set the controls
constexpr uint32_t kOther = 1001;    // any other user of an allow_other mount: may only read

class XattrPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    origin_.PutObject("d/a.bin", std::string(3 * kBlock, 'a'));
    origin_.PutObject("d/sub/b.bin", std::string(kBlock + 1, 'b'));
    origin_.PutObject("top.bin", std::string(100, 't'));
    meta_ = NewMemMetaStore();
    PolicyOptions po;
    po.pin_quota_bytes = 4 * kBlock;
    policies_ = std::move(*PolicyResolver::Open(po, meta_.get()));
    TieredCacheOptions co;
    co.block_size = kBlock;
    co.prefetch_threads = 0;
    PolicyResolver* r = policies_.get();
    co.placement = [r](std::string_view k) { return r->PlacementFor(k); };
    std::vector<std::unique_ptr<Tier>> tiers;
    MemoryTierOptions l1;
    l1.capacity_bytes = 64 * kBlock;
    l1.shards = 1;
    tiers.push_back(NewMemoryTier(l1));
    cache_ = std::move(*TieredCache::Open(co, std::move(tiers), &origin_, &clock_));
    catalog_ = std::move(*Catalog::Open(CatalogOptions{}, &origin_, meta_.get(), &clock_));
    PrefetchJobsOptions jo;
    jo.threads = 2;
    jo.persist_interval = 5ms;
    jobs_ = std::move(*PrefetchJobs::Open(jo, catalog_.get(), cache_.get(), meta_.get()));
    FilesystemOptions fo;
    fo.control_uid = kMounter;
    fs_ = std::make_unique<Filesystem>(fo, catalog_.get(), cache_.get(), &clock_);
    fs_->AttachPrefetchJobs(jobs_.get());
    fs_->AttachPolicies(policies_.get());
    dir_ = fs_->Lookup(kRootInode, "d")->attr.ino;
    file_ = fs_->Lookup(dir_, "a.bin")->attr.ino;
  }
  void TearDown() override {
    fs_->AttachPrefetchJobs(nullptr);
    jobs_.reset();
  }

  int SetErrno(InodeId ino, std::string_view name, std::string_view value, uint32_t uid = 0) {
    return ToErrno(fs_->SetXattr(ino, name, value, uid), ErrnoContext::kXattr);
  }
  std::string Get(InodeId ino, std::string_view name) {
    auto v = fs_->GetXattr(ino, name);
    EXPECT_OK(v) << name;
    return v.ok() ? *v : std::string();
  }

  testing::FakeBlobStore origin_{"fake://bucket"};
  FakeClock clock_;
  std::unique_ptr<MetaStore> meta_;
  std::unique_ptr<PolicyResolver> policies_;
  std::unique_ptr<TieredCache> cache_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<PrefetchJobs> jobs_;
  std::unique_ptr<Filesystem> fs_;
  InodeId dir_ = 0, file_ = 0;
};

TEST_F(XattrPolicyTest, TrimValue) {
  EXPECT_EQ(TrimXattrValue("l2"), "l2");
  EXPECT_EQ(TrimXattrValue("l2\n"), "l2");
  EXPECT_EQ(TrimXattrValue(std::string_view("l2\0", 3)), "l2");
  EXPECT_EQ(TrimXattrValue(""), "");
}

TEST_F(XattrPolicyTest, BadValuesAreEinvalOnFilesAndDirectories) {
  for (InodeId ino : {file_, dir_, kRootInode}) {
    for (const char* v : {"", "l4", "L2", "l2 ", "cancel!", "1"}) {
      EXPECT_EQ(SetErrno(ino, "user.tierfs.prefetch", v), EINVAL) << ino << " prefetch=" << v;
    }
    for (const char* v : {"", "2", "yes", "-1"}) {
      EXPECT_EQ(SetErrno(ino, "user.tierfs.pin", v), EINVAL) << ino << " pin=" << v;
    }
    for (const char* v : {"", "abc", "-5s", "0", "5 parsecs"}) {
      EXPECT_EQ(SetErrno(ino, "user.tierfs.ttl", v), EINVAL) << ino << " ttl=" << v;
    }
    for (const char* v : {"", "LRU", "fifo"}) {
      EXPECT_EQ(SetErrno(ino, "user.tierfs.policy", v), EINVAL) << ino << " policy=" << v;
    }
    for (const char* v : {"", "0", "2", "yes"}) {
      EXPECT_EQ(SetErrno(ino, "user.tierfs.evict", v), EINVAL) << ino << " evict=" << v;
    }
    for (const char* v : {"", "default", "Reuse", "lru", "1"}) {
      EXPECT_EQ(SetErrno(ino, "user.tierfs.admit", v), EINVAL) << ino << " admit=" << v;
    }
    EXPECT_EQ(SetErrno(ino, "user.tierfs.prefetch", "l3"), EINVAL);      // no L3 in this cache
    EXPECT_EQ(SetErrno(ino, "user.tierfs.prefetch", "cancel"), EINVAL);  // no job
    EXPECT_EQ(SetErrno(ino, "user.tierfs.residency", "1"), EINVAL);      // read-only
    EXPECT_EQ(SetErrno(ino, "user.tierfs.nosuch", "1"), ENOTSUP);
    EXPECT_EQ(ToErrno(fs_->GetXattr(ino, "user.tierfs.nosuch").status(), ErrnoContext::kXattr),
              ENODATA);
    EXPECT_EQ(ToErrno(fs_->GetXattr(ino, "user.tierfs.evict").status(), ErrnoContext::kXattr),
              ENODATA);
  }
  // Nothing was stored by the refused values.
  EXPECT_EQ(Get(file_, "user.tierfs.pin"), "0");
  EXPECT_EQ(Get(file_, "user.tierfs.ttl"), "forever");
  EXPECT_EQ(Get(file_, "user.tierfs.policy"), "lru");
  EXPECT_EQ(Get(file_, "user.tierfs.admit"), "default");
  EXPECT_EQ(Get(dir_, "user.tierfs.prefetch"), "state=none tier=- files=0/0 bytes=0/0");
}

TEST_F(XattrPolicyTest, OverflowingValuesAreEinvalNeverWrapped) {
  for (const std::string& v :
       std::vector<std::string>{"99999999999999d", "9223372036854775807ns", "106752d",
                                "18446744073709551616", "99999999999999999999999999999s", "1.5e3s",
                                std::string(1 << 20, '9') + "s", std::string("30s\0junk", 8)}) {
    EXPECT_EQ(SetErrno(file_, "user.tierfs.ttl", v), EINVAL) << "ttl=" << v.substr(0, 40);
  }
  EXPECT_EQ(Get(file_, "user.tierfs.ttl"), "forever");
  // The largest finite TTL is taken as it is.
  ASSERT_EQ(SetErrno(file_, "user.tierfs.ttl", "106751d"), 0);
  EXPECT_EQ(Get(file_, "user.tierfs.ttl"), "106751d");
  for (const std::string& v :
       std::vector<std::string>{std::string("1\0", 2) + "1", std::string(1 << 16, '1')}) {
    EXPECT_EQ(SetErrno(file_, "user.tierfs.pin", v), EINVAL);
  }
}

TEST_F(XattrPolicyTest, PoliciesInheritAndPinQuotaIsEnospc) {
  ASSERT_EQ(SetErrno(dir_, "user.tierfs.ttl", "30s"), 0);
  ASSERT_EQ(SetErrno(dir_, "user.tierfs.policy", "ttl"), 0);
  EXPECT_EQ(Get(file_, "user.tierfs.ttl"), "30s");
  EXPECT_EQ(Get(file_, "user.tierfs.policy"), "ttl");
  EXPECT_EQ(Get(kRootInode, "user.tierfs.ttl"), "forever");
  ASSERT_EQ(SetErrno(dir_, "user.tierfs.admit", "never\n"), 0);
  EXPECT_EQ(Get(file_, "user.tierfs.admit"), "never");
  ASSERT_EQ(SetErrno(file_, "user.tierfs.admit", "reuse"), 0);
  EXPECT_EQ(Get(file_, "user.tierfs.admit"), "reuse");
  EXPECT_EQ(Get(dir_, "user.tierfs.admit"), "never");
  EXPECT_EQ(Get(kRootInode, "user.tierfs.admit"), "default");
  // d/ holds 4 blocks + 1 byte: over the quota of 4 blocks.
  EXPECT_EQ(SetErrno(dir_, "user.tierfs.pin", "1"), ENOSPC);
  EXPECT_EQ(Get(file_, "user.tierfs.pin"), "0");
  ASSERT_EQ(SetErrno(file_, "user.tierfs.pin", "1"), 0);  // 3 blocks fit
  EXPECT_EQ(Get(file_, "user.tierfs.pin"), "1");
  InodeId top = fs_->Lookup(kRootInode, "top.bin")->attr.ino;
  ASSERT_EQ(SetErrno(top, "user.tierfs.pin", "1"), 0);  // 100 bytes fit
  EXPECT_EQ(SetErrno(kRootInode, "user.tierfs.pin", "1"), ENOSPC);
  ASSERT_EQ(SetErrno(file_, "user.tierfs.pin", "0"), 0);
  EXPECT_EQ(policies_->pinned_bytes(), 100u);
}

TEST_F(XattrPolicyTest, PrefetchEvictAndListing) {
  ASSERT_EQ(SetErrno(dir_, "user.tierfs.prefetch", "l1"), 0);
  ASSERT_TRUE(jobs_->TEST_WaitIdle(10s));
  EXPECT_EQ(Get(dir_, "user.tierfs.prefetch"), "state=done tier=l1 files=2/2 bytes=16385/16385");
  EXPECT_EQ(Get(file_, "user.tierfs.residency"), "l1=3/3");
  ASSERT_EQ(SetErrno(dir_, "user.tierfs.evict", "1"), 0);
  EXPECT_EQ(Get(file_, "user.tierfs.residency"), "l1=0/3");
  ASSERT_EQ(SetErrno(file_, "user.tierfs.prefetch", "l1\n"), 0);
  ASSERT_TRUE(jobs_->TEST_WaitIdle(10s));
  EXPECT_EQ(Get(file_, "user.tierfs.residency"), "l1=3/3");
  ASSERT_EQ(SetErrno(file_, "user.tierfs.evict", "1"), 0);
  EXPECT_EQ(Get(file_, "user.tierfs.residency"), "l1=0/3");

  auto names = fs_->ListXattr(file_);
  ASSERT_OK(names);
  EXPECT_EQ(*names, (std::vector<std::string>{"user.tierfs.etag", "user.tierfs.source",
                                              "user.tierfs.residency", "user.tierfs.prefetch",
                                              "user.tierfs.pin", "user.tierfs.ttl",
                                              "user.tierfs.policy", "user.tierfs.admit"}));
  // Every listed name answers getxattr (getfattr -d must not fail).
  for (InodeId ino : {file_, dir_, kRootInode}) {
    auto listed = fs_->ListXattr(ino);  // keep the Result alive: range-for over *temp dangles
    ASSERT_OK(listed);
    for (const auto& n : *listed) EXPECT_OK(fs_->GetXattr(ino, n)) << n;
  }
}

// user.tierfs.prefetch_list on the root: bulk append in order, all-or-nothing on a bad path,
// cancel, and its state; the root only; owner/root only.
// An evict or pin whose request was interrupted (its CancelToken, installed for the request by
// fuse_server) stops: EINTR, and the blocks not reached yet stay.
TEST_F(XattrPolicyTest, AnInterruptedEvictStopsWithEintr) {
  ASSERT_EQ(SetErrno(dir_, "user.tierfs.prefetch", "l1"), 0);
  ASSERT_TRUE(jobs_->TEST_WaitIdle(10s));
  ASSERT_EQ(Get(file_, "user.tierfs.residency"), "l1=3/3");
  CancelToken token;
  token.Cancel();
  {
    CancelToken::Scope scope(&token);
    EXPECT_EQ(SetErrno(dir_, "user.tierfs.evict", "1"), EINTR);
    EXPECT_EQ(SetErrno(file_, "user.tierfs.evict", "1"), EINTR);
    EXPECT_EQ(SetErrno(file_, "user.tierfs.pin", "0"), EINTR);
  }
  EXPECT_EQ(Get(file_, "user.tierfs.residency"), "l1=3/3");
  ASSERT_EQ(SetErrno(dir_, "user.tierfs.evict", "1"), 0);
  EXPECT_EQ(Get(file_, "user.tierfs.residency"), "l1=0/3");
}

TEST_F(XattrPolicyTest, PrefetchListOnTheRoot) {
  EXPECT_EQ(Get(kRootInode, "user.tierfs.prefetch_list"), "state=none tier=- files=0/0 bytes=0/0");
  // A missing path or a directory refuses the whole set: nothing is queued.
  EXPECT_EQ(SetErrno(kRootInode, "user.tierfs.prefetch_list", "tier=l1\ntop.bin\nd/nope"), EINVAL);
  EXPECT_EQ(SetErrno(kRootInode, "user.tierfs.prefetch_list", "top.bin\nd"), EINVAL);
  EXPECT_EQ(SetErrno(kRootInode, "user.tierfs.prefetch_list", "tier=l9\ntop.bin"), EINVAL);
  EXPECT_EQ(SetErrno(kRootInode, "user.tierfs.prefetch_list", "../top.bin"), EINVAL);
  EXPECT_EQ(Get(kRootInode, "user.tierfs.prefetch_list"), "state=none tier=- files=0/0 bytes=0/0");
  // Other users: EPERM; files and directories do not have it.
  EXPECT_EQ(SetErrno(kRootInode, "user.tierfs.prefetch_list", "top.bin", kOther), EPERM);
  EXPECT_EQ(SetErrno(file_, "user.tierfs.prefetch_list", "top.bin"), EINVAL);
  EXPECT_EQ(
      ToErrno(fs_->GetXattr(dir_, "user.tierfs.prefetch_list").status(), ErrnoContext::kXattr),
      ENODATA);
  // Two sets append to one job (leading '/' = the root, empty lines and CRs ignored).
  origin_.HoldReads();  // the job cannot end before the second set appends to it
  ASSERT_EQ(SetErrno(kRootInode, "user.tierfs.prefetch_list", "tier=l1\n/d/a.bin\n\n", kMounter),
            0);
  origin_.WaitForBlockedReads(1);
  ASSERT_EQ(
      SetErrno(kRootInode, "user.tierfs.prefetch_list", "tier=l1\r\nd/sub/b.bin\r\ntop.bin\n"), 0);
  origin_.ReleaseReads();
  ASSERT_TRUE(jobs_->TEST_WaitIdle(10s));
  EXPECT_EQ(Get(kRootInode, "user.tierfs.prefetch_list"),
            "state=done tier=l1 files=3/3 bytes=16485/16485");
  EXPECT_EQ(Get(file_, "user.tierfs.residency"), "l1=3/3");
  // The root job of user.tierfs.prefetch is another job.
  EXPECT_EQ(Get(kRootInode, "user.tierfs.prefetch"), "state=none tier=- files=0/0 bytes=0/0");
  // cancel with nothing queued is fine.
  EXPECT_EQ(SetErrno(kRootInode, "user.tierfs.prefetch_list", "cancel\n"), 0);
  auto names = fs_->ListXattr(kRootInode);
  ASSERT_OK(names);
  EXPECT_NE(std::find(names->begin(), names->end(), "user.tierfs.prefetch_list"), names->end());
}

// Only root and the mounting user may set user.tierfs.*; everyone else gets EPERM before the
// value is even looked at, and nothing changes. Reads stay open to all.
TEST_F(XattrPolicyTest, OnlyRootAndTheMountingUserMaySetControls) {
  ASSERT_EQ(SetErrno(file_, "user.tierfs.prefetch", "l1", kMounter), 0);
  ASSERT_TRUE(jobs_->TEST_WaitIdle(10s));
  ASSERT_EQ(Get(file_, "user.tierfs.residency"), "l1=3/3");
  for (InodeId ino : {file_, dir_, kRootInode}) {
    EXPECT_EQ(SetErrno(ino, "user.tierfs.evict", "1", kOther), EPERM) << ino;
    EXPECT_EQ(SetErrno(ino, "user.tierfs.prefetch", "l1", kOther), EPERM) << ino;
    EXPECT_EQ(SetErrno(ino, "user.tierfs.pin", "1", kOther), EPERM) << ino;
    EXPECT_EQ(SetErrno(ino, "user.tierfs.ttl", "1ns", kOther), EPERM) << ino;
    EXPECT_EQ(SetErrno(ino, "user.tierfs.policy", "ttl", kOther), EPERM) << ino;
    EXPECT_EQ(SetErrno(ino, "user.tierfs.prefetch", "bogus", kOther), EPERM) << ino;
    EXPECT_EQ(SetErrno(ino, "user.tierfs.nosuch", "1", kOther), EPERM) << ino;
    EXPECT_EQ(SetErrno(ino, "user.tierfs.prefetch_list", "top.bin", kOther), EPERM) << ino;
  }
  // Nothing changed, and the other user can still read every attribute.
  EXPECT_EQ(Get(file_, "user.tierfs.residency"), "l1=3/3");
  EXPECT_EQ(Get(kRootInode, "user.tierfs.ttl"), "forever");
  EXPECT_EQ(Get(file_, "user.tierfs.pin"), "0");
  EXPECT_EQ(policies_->pinned_bytes(), 0u);
  // Not our namespace: still ENOTSUP for anyone.
  EXPECT_EQ(SetErrno(file_, "user.other", "1", kOther), ENOTSUP);
  // The mounting user and root may.
  EXPECT_EQ(SetErrno(file_, "user.tierfs.evict", "1", kMounter), 0);
  EXPECT_EQ(Get(file_, "user.tierfs.residency"), "l1=0/3");
  EXPECT_EQ(SetErrno(dir_, "user.tierfs.ttl", "30s", kMounter), 0);
  EXPECT_EQ(Get(file_, "user.tierfs.ttl"), "30s");
  EXPECT_EQ(SetErrno(dir_, "user.tierfs.ttl", "45s", 0), 0);
  EXPECT_EQ(Get(file_, "user.tierfs.ttl"), "45s");
  // EPERM is the xattr answer; elsewhere PermissionDenied stays EACCES.
  EXPECT_EQ(ToErrno(Status::PermissionDenied("x")), EACCES);
}

// Members of the control group (by any of their gids) may set the prefetch names, as owners of
// the jobs they start; every other control stays with root and the mounting user. Without a
// control group, group membership counts for nothing.
TEST_F(XattrPolicyTest, TheControlGroupMayStartPrefetches) {
  constexpr uint32_t kGroup = 2000;
  const XattrCaller member{kOther, {kOther, 5, kGroup}};
  const XattrCaller outsider{kOther, {kOther, 5}};
  auto set = [&](Filesystem* fs, InodeId ino, std::string_view name, std::string_view value,
                 const XattrCaller& c) {
    return ToErrno(fs->SetXattr(ino, name, value, c), ErrnoContext::kXattr);
  };
  EXPECT_EQ(set(fs_.get(), file_, "user.tierfs.prefetch", "l1", member), EPERM);

  FilesystemOptions fo;
  fo.control_uid = kMounter;
  fo.control_gid = kGroup;
  Filesystem fs(fo, catalog_.get(), cache_.get(), &clock_);
  fs.AttachPrefetchJobs(jobs_.get());
  fs.AttachPolicies(policies_.get());
  const InodeId dir = fs.Lookup(kRootInode, "d")->attr.ino;
  const InodeId file = fs.Lookup(dir, "a.bin")->attr.ino;
  EXPECT_EQ(set(&fs, file, "user.tierfs.prefetch", "l1", outsider), EPERM);
  EXPECT_EQ(set(&fs, kRootInode, "user.tierfs.prefetch_list", "top.bin", outsider), EPERM);
  for (InodeId ino : {file, dir, kRootInode}) {
    EXPECT_EQ(set(&fs, ino, "user.tierfs.evict", "1", member), EPERM) << ino;
    EXPECT_EQ(set(&fs, ino, "user.tierfs.pin", "1", member), EPERM) << ino;
    EXPECT_EQ(set(&fs, ino, "user.tierfs.ttl", "1ns", member), EPERM) << ino;
    EXPECT_EQ(set(&fs, ino, "user.tierfs.policy", "ttl", member), EPERM) << ino;
    EXPECT_EQ(set(&fs, ino, "user.tierfs.admit", "never", member), EPERM) << ino;
    EXPECT_EQ(set(&fs, ino, "user.tierfs.nosuch", "1", member), EPERM) << ino;
  }
  EXPECT_EQ(set(&fs, kRootInode, "user.tierfs.log_level", "debug", member), EPERM);
  EXPECT_EQ(set(&fs, file, "user.tierfs.prefetch", "bogus", member), EINVAL);
  ASSERT_EQ(set(&fs, file, "user.tierfs.prefetch", "l1", member), 0);
  ASSERT_EQ(set(&fs, kRootInode, "user.tierfs.prefetch_list", "tier=l1\ntop.bin", member), 0);
  ASSERT_TRUE(jobs_->TEST_WaitIdle(10s));
  EXPECT_EQ(Get(file, "user.tierfs.residency"), "l1=3/3");
  EXPECT_EQ(Get(kRootInode, "user.tierfs.prefetch_list").substr(0, 10), "state=done");
  EXPECT_EQ(policies_->pinned_bytes(), 0u);
  fs.AttachPrefetchJobs(nullptr);
}

}  // namespace
}  // namespace tierfs
