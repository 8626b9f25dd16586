// Catalog over wide directories and large trees (dataset scale), with the fake store.
//
// The first test runs in CI: a 5,000-entry directory listed in 1,000-key pages, stored in LMDB in
// several transactions, read back in readdir-sized chunks, looked up and snapshotted. The
// DISABLED_ ones are the S3-at-scale simulation of bench/scale.sh (the fake store with a per-page
// latency): run them by hand with
//   build/tests/tiercache_test --gtest_also_run_disabled_tests --gtest_filter='CatalogScale*'
// (CATALOG_SCALE_DELAY_MS sets the latency per LIST page, default 20). They print the time beside
// the origin-bound floor (pages x latency) and the catalog's resident memory per entry.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "metastore/meta_store.h"
#include "tests/fakes/fake_blob_store.h"
#include "tests/testing/status_matchers.h"
#include "tests/tiercache/test_util.h"
#include "tiercache/catalog.h"

namespace tierfs {
namespace {

using ::tierfs::testing::FakeBlobStore;

std::string Name(const char* fmt, int i) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, i);
  return buf;
}

// RssAnon of this process in bytes (0 if unknown).
int64_t RssAnonBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.starts_with("RssAnon:")) return std::atoll(line.c_str() + 8) * 1024;
  }
  return 0;
}

class CatalogScaleTest : public ::testing::Test {
 protected:
  void OpenAll(size_t entries_per_txn = 50'000) {
    MetaStoreOptions mo;
    mo.path = dir_.path() + "/meta";
    mo.map_size = 4ULL << 30;
    mo.dir_entries_per_txn = entries_per_txn;
    auto m = NewLmdbMetaStore(mo);
    ASSERT_OK(m);
    meta_ = std::move(*m);
    CatalogOptions co;
    co.metadata_ttl = std::chrono::minutes(10);
    auto c = Catalog::Open(co, &origin_, meta_.get(), nullptr);
    ASSERT_OK(c);
    catalog_ = std::move(*c);
  }
  // Every entry of `dir` through ReadDir in chunks of `chunk`, checking byte order.
  size_t ReadAll(const std::string& dir, size_t chunk) {
    std::vector<DirEntry> out;
    std::string after;
    size_t n = 0;
    while (true) {
      Status st = catalog_->ReadDir(dir, after, chunk, &out);
      EXPECT_OK(st);
      if (!st.ok() || out.empty()) return n;
      for (const DirEntry& e : out) {
        EXPECT_GT(e.name, after);
        after = e.name;
      }
      n += out.size();
    }
  }

  testing::TempDir dir_;
  FakeBlobStore origin_;
  std::unique_ptr<MetaStore> meta_;
  std::unique_ptr<Catalog> catalog_;
};

TEST_F(CatalogScaleTest, WideDirectoryIsListedInPagesStoredInChunksAndReadBack) {
  for (int i = 0; i < 5000; ++i) origin_.PutObject(Name("big/f%05d.jpg", i), "x");
  OpenAll(/*entries_per_txn=*/1000);  // five ReplaceDir transactions
  EXPECT_EQ(ReadAll("big", 512), 5000u);
  EXPECT_EQ(catalog_->Stats().list_requests.load(), 1u + 5u);  // the root, then 5 pages
  EXPECT_EQ(catalog_->Stats().listing_misses.load(), 2u);
  auto last = catalog_->Lookup("big", "f04999.jpg");
  ASSERT_OK(last);
  EXPECT_EQ(last->size, 1u);
  EXPECT_TRUE(catalog_->Lookup("big", "f05000.jpg").status().IsNotFound());
  auto snap = catalog_->Snapshot("big");
  ASSERT_OK(snap);
  ASSERT_EQ((*snap)->entries.size(), 5000u);
  EXPECT_EQ((*snap)->entries[4321].name, "f04321.jpg");
  // Everything after the first listing came from the metadata store.
  EXPECT_EQ(origin_.list_calls(), 6u);
}

// The simulation: `dirs` directories of `files` objects each behind a LIST latency.
void Simulate(CatalogScaleTest* t, FakeBlobStore* origin, int dirs, int files,
              const std::function<size_t(const std::string&)>& read_all, Catalog** catalog) {
  (void)t;
  const char* env = std::getenv("CATALOG_SCALE_DELAY_MS");
  const int delay_ms = env ? std::atoi(env) : 20;
  origin->SetDelay(std::chrono::milliseconds(delay_ms));
  const int64_t rss0 = RssAnonBytes();
  const auto t0 = std::chrono::steady_clock::now();
  size_t total = 0;
  if (dirs == 1) {
    total = read_all("big");
  } else {
    EXPECT_EQ(read_all(""), static_cast<size_t>(dirs));
    for (int d = 0; d < dirs; ++d) total += read_all(Name("c%04d", d));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t rss1 = RssAnonBytes();
  EXPECT_EQ(total, static_cast<size_t>(dirs) * static_cast<size_t>(files));
  const uint64_t pages = (*catalog)->Stats().list_requests.load();
  std::printf(
      "catalog scale: %d x %d entries, %llu LIST pages at %d ms: %.2f s (origin-bound floor "
      "%.2f s, catalog overhead %.1f us/entry); RssAnon %+.1f MiB = %.0f B/entry\n",
      dirs, files, static_cast<unsigned long long>(pages), delay_ms, secs,
      static_cast<double>(pages) * delay_ms / 1000.0,
      (secs - static_cast<double>(pages) * delay_ms / 1000.0) * 1e6 / static_cast<double>(total),
      static_cast<double>(rss1 - rss0) / (1 << 20),
      static_cast<double>(rss1 - rss0) / static_cast<double>(total));
}

TEST_F(CatalogScaleTest, DISABLED_TwoHundredThousandInOneDirectory) {
  for (int i = 0; i < 200'000; ++i) origin_.PutObject(Name("big/f%07d.jpg", i), "");
  OpenAll();
  Catalog* c = catalog_.get();
  Simulate(
      this, &origin_, 1, 200'000, [&](const std::string& d) { return ReadAll(d, 512); }, &c);
}

TEST_F(CatalogScaleTest, DISABLED_TwoMillionInATree) {
  for (int d = 0; d < 2000; ++d) {
    for (int i = 0; i < 1000; ++i) origin_.PutObject(Name("c%04d/", d) + Name("f%04d.jpg", i), "");
  }
  OpenAll();
  Catalog* c = catalog_.get();
  Simulate(
      this, &origin_, 2000, 1000, [&](const std::string& d) { return ReadAll(d, 512); }, &c);
}

}  // namespace
}  // namespace tierfs
