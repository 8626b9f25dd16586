// FileBlobStore on a temp directory: Head/Read/If-Match, List with delimiter semantics and
// pagination, Put/Delete, and refusal of keys that would leave the root.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "blobclient/blob_store.h"
#include "tests/blobclient/test_util.h"
#include "tests/testing/sanitizers.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace tierfs {
namespace {

using ::tierfs::testing::AsBytes;
using ::tierfs::testing::AsString;
namespace fs = std::filesystem;

class FileBlobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    root_ = tmp_.path();
    auto s = NewFileBlobStore(FileStoreOptions{root_});
    ASSERT_OK(s);
    store_ = std::move(*s);
  }

  void Write(const std::string& rel, const std::string& data) {
    fs::path p = fs::path(root_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << data;
  }

  Result<std::string> Read(const std::string& key, uint64_t off, size_t n,
                           std::string_view etag = {}) {
    std::vector<std::byte> buf(n);
    TIERFS_ASSIGN_OR_RETURN(size_t got, store_->Read(key, off, buf, etag));
    return AsString(std::span<const std::byte>(buf.data(), got));
  }

  // All pages of a listing, flattened as "o:key" / "p:prefix" in order.
  std::vector<std::string> ListAll(const std::string& prefix, const std::string& delim, int max) {
    std::vector<std::string> out;
    std::string token;
    for (int pages = 0; pages < 100; ++pages) {
      auto page = store_->List(prefix, delim, token, max);
      EXPECT_OK(page);
      if (!page.ok()) break;
      // Merge this page's objects and prefixes in key order, as S3 interleaves them.
      std::map<std::string, std::string> merged;
      for (const auto& e : page->objects) merged[e.key] = "o:" + e.key;
      for (const auto& p : page->prefixes) merged[p] = "p:" + p;
      EXPECT_LE(merged.size(), static_cast<size_t>(max));
      for (auto& [k, v] : merged) out.push_back(v);
      token = page->next_token;
      if (token.empty()) break;
    }
    return out;
  }

  ::tierfs::testing::TempDir tmp_;
  std::string root_;
  std::unique_ptr<BlobStore> store_;
};

TEST_F(FileBlobStoreTest, HeadAndRead) {
  Write("a/b.bin", "0123456789");
  auto info = store_->Head("a/b.bin");
  ASSERT_OK(info);
  EXPECT_EQ(info->size, 10u);
  EXPECT_EQ(info->etag.size(), 15u);  // short enough for std::string's inline buffer
  EXPECT_GT(info->mtime_ns, 0);
  EXPECT_EQ(*Read("a/b.bin", 3, 4), "3456");
  EXPECT_EQ(*Read("a/b.bin", 8, 100), "89");
  EXPECT_EQ(*Read("a/b.bin", 10, 5), "");
  EXPECT_EQ(*Read("a/b.bin", 0, 10, info->etag), "0123456789");
  EXPECT_EQ(store_->Head("a").status().code(), Status::Code::kNotFound);  // a directory
  EXPECT_EQ(store_->Head("missing").status().code(), Status::Code::kNotFound);
  EXPECT_EQ(Read("missing", 0, 1).status().code(), Status::Code::kNotFound);
  EXPECT_EQ(store_->Describe(), "file://" + root_);
}

TEST_F(FileBlobStoreTest, ChangedFileGetsANewEtagAndIfMatchFails) {
  Write("f", "version one");
  auto before = store_->Head("f");
  ASSERT_OK(before);
  // Same size, new content: the mtime (ns) or inode differs, so the ETag must too. The pause
  // lets the kernel's file time (updated once per tick) move.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_OK(store_->Put("f", AsBytes("version two")));
  auto after = store_->Head("f");
  ASSERT_OK(after);
  EXPECT_NE(before->etag, after->etag);
  auto r = Read("f", 0, 4, before->etag);
  EXPECT_EQ(r.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(*Read("f", 0, 7, after->etag), "version");
}

// A read into pieces (a run of blocks not adjacent in memory) preads each piece in order, stops
// at the end of the file, and refuses a changed file like ReadPinned.
TEST_F(FileBlobStoreTest, ScatterReadFillsThePiecesInOrder) {
  Write("s", "0123456789abcdef");
  auto info = store_->Head("s");
  ASSERT_OK(info);
  std::vector<std::byte> a(3), b(5), c(20, std::byte{'.'});
  ScatterBuffer buf({std::span<std::byte>(a), std::span<std::byte>(b), std::span<std::byte>(c)});
  auto n = store_->ReadPinnedScatter("s", 2, buf, *info);
  ASSERT_OK(n);
  EXPECT_EQ(*n, 14u);
  EXPECT_EQ(AsString(a), "234");
  EXPECT_EQ(AsString(b), "56789");
  EXPECT_EQ(AsString(c), "abcdef" + std::string(14, '.'));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // lets the file time move
  ASSERT_OK(store_->Put("s", AsBytes("fedcba9876543210")));
  EXPECT_EQ(store_->ReadPinnedScatter("s", 0, buf, *info).status().code(),
            Status::Code::kFailedPrecondition);
  EXPECT_EQ(AsString(a), "234");  // nothing of the new version
}

TEST_F(FileBlobStoreTest, KeysOutsideTheRootAreRefused) {
  Write("inside", "x");
  for (const char* bad : {"../etc/passwd", "a/../../x", "/abs", "a//b", "./x", "a/.", "", "a/"}) {
    EXPECT_EQ(store_->Head(bad).status().code(), Status::Code::kInvalidArgument) << bad;
    std::byte b[1];
    EXPECT_EQ(store_->Read(bad, 0, b, "").status().code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_EQ(store_->Put(bad, AsBytes("x")).code(), Status::Code::kInvalidArgument) << bad;
  }
  EXPECT_EQ(store_->List("../", "/", "", 10).status().code(), Status::Code::kInvalidArgument);
  // Dots inside names are fine.
  Write("a..b/..c", "ok");
  EXPECT_EQ(*Read("a..b/..c", 0, 2), "ok");
}

TEST_F(FileBlobStoreTest, ListWithDelimiterMakesDirectoriesPrefixes) {
  Write("ds/a.txt", "1");
  Write("ds/b.txt", "22");
  Write("ds/c/1", "x");
  Write("ds/c/2", "x");
  Write("ds/d/x/y", "x");  // a directory holding only sub-directories is still listed
  Write("ds/zz", "x");
  Write("ds-other", "x");  // '-' sorts before '/'
  Write("top", "x");
  EXPECT_EQ(ListAll("ds/", "/", 1000), (std::vector<std::string>{"o:ds/a.txt", "o:ds/b.txt",
                                                                 "p:ds/c/", "p:ds/d/", "o:ds/zz"}));
  EXPECT_EQ(ListAll("", "/", 1000), (std::vector<std::string>{"o:ds-other", "p:ds/", "o:top"}));
  // A partial last component matches by name prefix.
  EXPECT_EQ(ListAll("ds", "/", 1000), (std::vector<std::string>{"o:ds-other", "p:ds/"}));
  auto page = store_->List("ds/", "/", "", 1000);
  ASSERT_OK(page);
  ASSERT_EQ(page->objects.size(), 3u);
  EXPECT_EQ(page->objects[1].info.size, 2u);
  EXPECT_TRUE(page->next_token.empty());
  EXPECT_TRUE(ListAll("nothing/", "/", 10).empty());
}

TEST_F(FileBlobStoreTest, ListPaginatesInByteOrder) {
  Write("ds/a.txt", "1");
  Write("ds/b.txt", "2");
  Write("ds/c/1", "x");
  Write("ds/d/x/y", "x");
  Write("ds/zz", "x");
  EXPECT_EQ(ListAll("ds/", "/", 2), (std::vector<std::string>{"o:ds/a.txt", "o:ds/b.txt", "p:ds/c/",
                                                              "p:ds/d/", "o:ds/zz"}));
  // Without a delimiter everything below comes back, byte-ordered across directories.
  Write("ds/c-1", "x");  // '-' (0x2d) sorts before '/' (0x2f): "ds/c-1" < "ds/c/1"
  EXPECT_EQ(ListAll("ds/", "", 2), (std::vector<std::string>{"o:ds/a.txt", "o:ds/b.txt", "o:ds/c-1",
                                                             "o:ds/c/1", "o:ds/d/x/y", "o:ds/zz"}));
}

// A listing walks the directory once and pages through the names it read (one walk per
// page would make a 200,000-entry directory quadratic); each page stats its files when served.
TEST_F(FileBlobStoreTest, LaterPagesReuseTheFirstPagesScanAndStatWhenServed) {
  for (int i = 0; i < 2500; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "big/f%05d", i);
    Write(name, "x");
  }
  auto p1 = store_->List("big/", "/", "", 1000);
  ASSERT_OK(p1);
  ASSERT_EQ(p1->objects.size(), 1000u);
  EXPECT_EQ(p1->objects.front().key, "big/f00000");
  EXPECT_EQ(p1->next_token, "big/f00999");
  // Changes after the first page: a new name is not part of this listing (its names were read
  // once), a removed one is skipped, a rewritten one shows its new size.
  Write("big/f01500-new", "new");
  fs::remove(fs::path(root_) / "big/f01000");
  Write("big/f01001", "longer");
  auto p2 = store_->List("big/", "/", p1->next_token, 1000);
  ASSERT_OK(p2);
  ASSERT_EQ(p2->objects.size(), 1000u);
  EXPECT_EQ(p2->objects.front().key, "big/f01001");
  EXPECT_EQ(p2->objects.front().info.size, 6u);
  for (const auto& o : p2->objects) EXPECT_NE(o.key, "big/f01500-new");
  auto p3 = store_->List("big/", "/", p2->next_token, 1000);
  ASSERT_OK(p3);
  EXPECT_EQ(p3->objects.size(), 499u);
  EXPECT_EQ(p3->objects.back().key, "big/f02499");
  EXPECT_TRUE(p3->next_token.empty());
  // A new listing (empty token) reads the directory afresh and sees the new name.
  std::vector<std::string> all = ListAll("big/", "/", 1000);
  EXPECT_EQ(all.size(), 2500u);
  EXPECT_NE(std::find(all.begin(), all.end(), "o:big/f01500-new"), all.end());
  // A token from a listing whose names were dropped (or another store) still works: a walk.
  auto fresh = NewFileBlobStore(FileStoreOptions{root_});
  ASSERT_OK(fresh);
  auto q = (*fresh)->List("big/", "/", "big/f02497", 1000);
  ASSERT_OK(q);
  ASSERT_EQ(q->objects.size(), 2u);
  EXPECT_EQ(q->objects[0].key, "big/f02498");
}

TEST_F(FileBlobStoreTest, PutCreatesDirectoriesAndDeleteRemoves) {
  const std::string body = ::tierfs::testing::Pattern(100000);
  ASSERT_OK(store_->Put("new/deep/dir/obj", AsBytes(body)));
  EXPECT_EQ(*Read("new/deep/dir/obj", 0, body.size()), body);
  // No temp files are left behind or listed.
  EXPECT_EQ(ListAll("new/deep/dir/", "/", 10), (std::vector<std::string>{"o:new/deep/dir/obj"}));
  size_t n = 0;
  for (auto& e : fs::directory_iterator(fs::path(root_) / "new/deep/dir")) {
    (void)e;
    ++n;
  }
  EXPECT_EQ(n, 1u);
  ASSERT_OK(store_->Delete("new/deep/dir/obj"));
  EXPECT_EQ(store_->Head("new/deep/dir/obj").status().code(), Status::Code::kNotFound);
  EXPECT_OK(store_->Delete("new/deep/dir/obj"));
  BlobStoreStats st = store_->Stats();
  EXPECT_EQ(st.bytes_written, body.size());
  EXPECT_EQ(st.bytes_read, body.size());
}

// Symlinks are never followed, in any component; they and FIFOs/sockets are hidden from
// listings, Head/Read of them is NotFound, and nothing blocks.
TEST_F(FileBlobStoreTest, SymlinksAndSpecialFilesAreNeitherListedNorServed) {
  Write("dir/real.bin", "real");
  Write("top.bin", "top");
  const std::string outside = root_ + "-outside";
  std::ofstream(outside) << "secret";
  fs::create_symlink(outside, fs::path(root_) / "shadow");          // to a file outside
  fs::create_symlink("top.bin", fs::path(root_) / "inner-link");    // to a file inside
  fs::create_symlink("..", fs::path(root_) / "dir" / "loop");       // a directory loop
  fs::create_symlink(root_ + "/dir", fs::path(root_) / "dirlink");  // a directory, absolute
  ASSERT_EQ(::mkfifo((root_ + "/fifo").c_str(), 0644), 0);
  int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  const std::string sock_path = root_ + "/sock";
  ASSERT_LT(sock_path.size(), sizeof(addr.sun_path));
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock_path.c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)), 0);

  // Both resolvers: openat2 (this kernel) and the per-component O_NOFOLLOW walk.
  for (bool use_openat2 : {true, false}) {
    SCOPED_TRACE(use_openat2 ? "openat2" : "O_NOFOLLOW walk");
    auto st = NewFileBlobStore(FileStoreOptions{root_, use_openat2});
    ASSERT_OK(st);
    store_ = std::move(*st);
    EXPECT_EQ(ListAll("", "/", 1000), (std::vector<std::string>{"p:dir/", "o:top.bin"}));
    EXPECT_EQ(ListAll("dir/", "/", 1000), (std::vector<std::string>{"o:dir/real.bin"}));
    // Recursive listing terminates and holds only real files.
    EXPECT_EQ(ListAll("", "", 1000), (std::vector<std::string>{"o:dir/real.bin", "o:top.bin"}));
    for (const char* key : {"shadow", "inner-link", "fifo", "sock", "dir/loop/top.bin",
                            "dirlink/real.bin", "dir/loop"}) {
      EXPECT_EQ(store_->Head(key).status().code(), Status::Code::kNotFound) << key;
      EXPECT_EQ(Read(key, 0, 16).status().code(), Status::Code::kNotFound) << key;
    }
    EXPECT_TRUE(ListAll("dirlink/", "/", 10).empty());
    EXPECT_TRUE(ListAll("dir/loop/", "", 10).empty());
    EXPECT_EQ(*Read("dir/real.bin", 0, 16), "real");
  }
  ::close(sock);
  fs::remove(outside);
}

TEST_F(FileBlobStoreTest, EtagCoversCtimeAndReadsRecheckIt) {
  Write("f", "0123456789");
  auto before = store_->Head("f");
  ASSERT_OK(before);
  // A metadata-only change (chmod) moves ctime: a new ETag, the old one fails If-Match.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // lets the file time move
  ASSERT_EQ(::chmod((root_ + "/f").c_str(), 0600), 0);
  auto after = store_->Head("f");
  ASSERT_OK(after);
  EXPECT_NE(before->etag, after->etag);
  EXPECT_EQ(Read("f", 0, 4, before->etag).status().code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(*Read("f", 0, 4, after->etag), "0123");

  // A rewrite in place (same inode) during a read is caught by the fstat after the read: with
  // no If-Match given, the only way to get FailedPrecondition is that re-check. (Writes land
  // within one timestamp tick of each other can slip past it: see docs/semantics.md.)
  const std::string a(4 << 20, 'a'), b(4 << 20, 'b');
  Write("big", a);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      std::fstream f(root_ + "/big", std::ios::in | std::ios::out | std::ios::binary);
      const std::string& v = i % 2 ? a : b;
      f.write(v.data(), static_cast<std::streamsize>(v.size()));
    }
  });
  int refused = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (refused == 0 && std::chrono::steady_clock::now() < deadline) {
    auto r = Read("big", 0, 4 << 20);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Status::Code::kFailedPrecondition) << r.status().ToString();
      ++refused;
    }
  }
  stop = true;
  writer.join();
  EXPECT_GT(refused, 0);
}

// The lowest file descriptor number this process has free: with RLIMIT_NOFILE set to it, every
// further open fails with EMFILE.
rlim_t LowestFreeFd() {
  const int fd = ::dup(0);
  ::close(fd);
  return static_cast<rlim_t>(fd);
}

// A directory that cannot be read (here: no file descriptor left, EMFILE) fails the listing; it
// is never an empty listing. A missing directory still lists as empty, like an S3 prefix.
TEST_F(FileBlobStoreTest, DirectoryThatCannotBeOpenedFailsTheListing) {
  TIERFS_SKIP_WHEN_SANITIZER_NEEDS_DESCRIPTORS();
  Write("d/a", "1");
  Write("d/b", "2");
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  struct rlimit low = old;
  low.rlim_cur = LowestFreeFd();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  auto page = store_->List("d/", "/", "", 1000);
  auto head = store_->Head("d/a");
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  ASSERT_FALSE(page.ok()) << page->objects.size() << " objects";
  EXPECT_EQ(page.status().code(), Status::Code::kIOError) << page.status().ToString();
  EXPECT_NE(page.status().message().find("Too many open files"), std::string::npos)
      << page.status().ToString();
  EXPECT_FALSE(head.ok());
  EXPECT_FALSE(head.status().IsNotFound()) << head.status().ToString();

  EXPECT_EQ(ListAll("d/", "/", 1000), (std::vector<std::string>{"o:d/a", "o:d/b"}));
  EXPECT_TRUE(ListAll("missing/", "/", 1000).empty());
  EXPECT_TRUE(ListAll("d/a/", "/", 1000).empty());  // a file, not a directory
}

// `mv new root`: the next listing resolves the root path again and serves the new tree; its
// files have new ETags even with the same content, so nothing cached of the old tree matches.
TEST_F(FileBlobStoreTest, RootRenamedOverIsServedFromTheNextListing) {
  Write("f", "old!");
  auto old_info = store_->Head("f");
  ASSERT_OK(old_info);
  const std::string next = root_ + ".next", prev = root_ + ".prev";
  fs::create_directories(next + "/sub");
  std::ofstream(next + "/f", std::ios::binary) << "new!";
  std::ofstream(next + "/sub/g", std::ios::binary) << "g";
  ASSERT_EQ(::rename(root_.c_str(), prev.c_str()), 0);
  ASSERT_EQ(::rename(next.c_str(), root_.c_str()), 0);

  // Until a listing, the root the last listing saw is served.
  EXPECT_EQ(*Read("f", 0, 4), "old!");
  EXPECT_EQ(ListAll("", "/", 1000), (std::vector<std::string>{"o:f", "p:sub/"}));
  EXPECT_EQ(*Read("f", 0, 4), "new!");
  auto new_info = store_->Head("f");
  ASSERT_OK(new_info);
  EXPECT_NE(new_info->etag, old_info->etag);
  EXPECT_EQ(Read("f", 0, 4, old_info->etag).status().code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(*Read("sub/g", 0, 1), "g");

  // No root at that path (between the two renames of a swap): an error, never an empty tree.
  ASSERT_EQ(::rename(root_.c_str(), next.c_str()), 0);
  auto page = store_->List("", "/", "", 1000);
  ASSERT_EQ(::rename(next.c_str(), root_.c_str()), 0);
  EXPECT_FALSE(page.ok());
  EXPECT_EQ(page.status().code(), Status::Code::kIOError) << page.status().ToString();
  fs::remove_all(prev);
}

// Head and List report each file's and directory's owner, group and permission bits.
TEST_F(FileBlobStoreTest, OwnerGroupAndModeAreReported) {
  Write("f", "x");
  Write("d/g", "y");
  ASSERT_EQ(::chmod((root_ + "/f").c_str(), 0640), 0);
  ASSERT_EQ(::chmod((root_ + "/d").c_str(), 0710), 0);
  auto head = store_->Head("f");
  ASSERT_OK(head);
  EXPECT_TRUE(head->owner.known);
  EXPECT_EQ(head->owner.mode, 0640u);
  EXPECT_EQ(head->owner.uid, static_cast<uint32_t>(::geteuid()));
  EXPECT_EQ(head->owner.gid, static_cast<uint32_t>(::getegid()));
  auto page = store_->List("", "/", "", 1000);
  ASSERT_OK(page);
  ASSERT_EQ(page->prefixes, (std::vector<std::string>{"d/"}));
  ASSERT_EQ(page->prefix_owners.size(), 1u);
  EXPECT_TRUE(page->prefix_owners[0].known);
  EXPECT_EQ(page->prefix_owners[0].mode, 0710u);
  EXPECT_EQ(page->prefix_owners[0].uid, static_cast<uint32_t>(::geteuid()));
  ASSERT_EQ(page->objects.size(), 1u);
  EXPECT_EQ(page->objects[0].info.owner.mode, 0640u);
}

TEST(FileBlobStoreFactoryTest, RootMustBeAnAbsoluteDirectory) {
  EXPECT_EQ(NewFileBlobStore(FileStoreOptions{"relative/dir"}).status().code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(NewFileBlobStore(FileStoreOptions{"/nonexistent/tierfs/root"}).status().code(),
            Status::Code::kNotFound);
  EXPECT_EQ(NewFileBlobStore(FileStoreOptions{"/etc/hostname"}).status().code(),
            Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace tierfs
