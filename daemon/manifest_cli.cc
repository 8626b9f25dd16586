#include "daemon/manifest_cli.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "base/clock.h"
#include "base/logging.h"
#include "base/strings.h"
#include "base/units.h"
#include "daemon/credential_chain.h"
#include "daemon/exit_codes.h"

namespace tierfs {
namespace {

constexpr int kExitDifferent = 1;
constexpr int kExitTrouble = 2;

std::string Describe(const ManifestEntry& e) {
  return fmt::format("{} {}", e.info.size, e.info.etag.empty() ? "-" : EscapeForLog(e.info.etag));
}

}  // namespace

int RunManifestCreate(BlobStore* store, const std::string& source, const std::string& out_path) {
  const auto start = std::chrono::steady_clock::now();
  const bool tty = isatty(STDERR_FILENO) != 0;
  auto m = BuildManifest(store, source, SystemClock(), [tty](uint64_t n) {
    if (tty) std::fprintf(stderr, "\rlisted %llu objects", static_cast<unsigned long long>(n));
  });
  if (tty) std::fprintf(stderr, "\n");
  if (!m.ok()) {
    std::fprintf(stderr, "tierfs manifest create: listing %s: %s\n", source.c_str(),
                 m.status().ToString().c_str());
    return kExitRuntime;
  }
  auto bytes = EncodeManifest(&*m);
  Status st = bytes.ok() ? WriteManifestFile(out_path, *bytes) : bytes.status();
  if (!st.ok()) {
    std::fprintf(stderr, "tierfs manifest create: %s\n", st.ToString().c_str());
    return kExitRuntime;
  }
  uint64_t total = 0;
  for (const ManifestEntry& e : m->entries) total += e.info.size;
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %zu objects (%s) of %s, %zu bytes, checksum %s, %.2f s\n", out_path.c_str(),
              m->entries.size(), FormatSize(total).c_str(), source.c_str(), bytes->size(),
              m->checksum.c_str(), secs);
  return kExitOk;
}

int RunManifestDiff(const std::string& a, const std::string& b, bool quiet) {
  auto ma = ReadManifestFile(a);
  auto mb = ma.ok() ? ReadManifestFile(b) : Result<Manifest>(ma.status());
  if (!mb.ok()) {
    std::fprintf(stderr, "tierfs manifest diff: %s\n", mb.status().message().c_str());
    return kExitTrouble;
  }
  const ManifestDiff d = DiffManifests(*ma, *mb);
  if (quiet) return d.empty() ? kExitOk : kExitDifferent;
  // One merged list in key order, as diff(1) would show it.
  size_t i = 0, j = 0, k = 0;
  while (i < d.added.size() || j < d.removed.size() || k < d.changed.size()) {
    const std::string* ka = i < d.added.size() ? &d.added[i].key : nullptr;
    const std::string* kr = j < d.removed.size() ? &d.removed[j].key : nullptr;
    const std::string* kc = k < d.changed.size() ? &d.changed[k].after.key : nullptr;
    const std::string* least = ka;
    if (least == nullptr || (kr != nullptr && *kr < *least)) least = kr;
    if (least == nullptr || (kc != nullptr && *kc < *least)) least = kc;
    if (least == ka) {
      std::printf("+ %s %s\n", EscapeForLog(*ka).c_str(), Describe(d.added[i++]).c_str());
    } else if (least == kr) {
      std::printf("- %s %s\n", EscapeForLog(*kr).c_str(), Describe(d.removed[j++]).c_str());
    } else {
      const ManifestChange& c = d.changed[k++];
      std::printf("~ %s %s -> %s\n", EscapeForLog(*kc).c_str(), Describe(c.before).c_str(),
                  Describe(c.after).c_str());
    }
  }
  std::printf("%zu added, %zu removed, %zu changed (%s %zu objects, %s %zu objects)\n",
              d.added.size(), d.removed.size(), d.changed.size(), ma->checksum.c_str(),
              ma->entries.size(), mb->checksum.c_str(), mb->entries.size());
  return d.empty() ? kExitOk : kExitDifferent;
}

Result<Manifest> FetchManifest(BlobStore* store, std::string_view key, std::string_view name) {
  std::string bytes;
  constexpr size_t kChunk = 8 << 20;
  for (;;) {
    const size_t at = bytes.size();
    bytes.resize(at + kChunk);
    auto n = store->Read(key, at, std::as_writable_bytes(std::span(bytes).subspan(at)), "");
    if (!n.ok()) {
      return n.status().WithContext(fmt::format("reading manifest {}", name));
    }
    bytes.resize(at + *n);
    if (*n < kChunk) break;
    if (bytes.size() > kMaxManifestPayload)
      return Status::Corruption(fmt::format("manifest {}: larger than 64 GiB", name));
  }
  return DecodeManifest(bytes, name);
}

Status CheckManifestSource(const Manifest& m, std::string_view source,
                           std::string_view manifest_name) {
  auto want = ParseSourceUri(source);
  auto have = ParseSourceUri(m.source);
  if (want.ok() && have.ok() && want->scheme == have->scheme && want->bucket == have->bucket &&
      want->prefix == have->prefix && want->path == have->path) {
    return Status::OK();
  }
  return Status::InvalidArgument(fmt::format("manifest {} lists {}, not the mounted source {}",
                                             manifest_name, EscapeForLog(m.source),
                                             EscapeForLog(source)));
}

// The origin as a mount would open it (config file, flags, environment, credential chain),
// then RunManifestCreate over it.
int RunManifestCreateCli(const std::string& source, const std::string& out,
                         const std::string& config_path, const MountFlags& flags) {
  auto usage = [](const Status& s) {
    std::fprintf(stderr, "tierfs manifest create: %s\n", s.message().c_str());
    return kExitUsage;
  };
  DaemonOptions o;
  if (!config_path.empty()) {
    if (Status s = ApplyConfigFile(config_path, &o); !s.ok()) return usage(s);
  }
  if (Status s = ApplyFlags(flags, &o); !s.ok()) return usage(s);
  o.source = source;
  o.mountpoint = "/";  // FinishOptions checks a mount's settings; nothing is mounted
  o.manifest.clear();
  o.l3.clear();
  if (Status s = FinishOptions(&o, RealGetEnv); !s.ok()) return usage(s);
  LogOptions lo = o.log;
  lo.destination = "stderr";
  if (lo.level == "info") lo.level = "warn";  // the summary line says what happened
  std::string err;
  ConfigureLogging(lo, &err);
  std::unique_ptr<HttpTransport> transport;
  std::unique_ptr<BlobStore> store;
  if (o.source_uri.scheme == SourceUri::Scheme::kS3) {
    if (o.no_sign_request) {
      o.origin.credentials = Credentials{};
      o.origin.credentials.anonymous = true;
    }
    auto t = NewHttpTransport(o.http);
    if (!t.ok()) {
      std::fprintf(stderr, "tierfs manifest create: %s\n", t.status().ToString().c_str());
      return kExitRuntime;
    }
    transport = std::move(*t);
    if (Status s = AttachCredentialChain(
            &o.origin, o.profile, !o.profile.empty() && !o.profile_from_env, o.origin_region_set,
            transport.get(), "the S3 origin", kOriginCredentialsHint);
        !s.ok()) {
      return usage(s);
    }
    auto s = NewS3BlobStore(o.origin, transport.get(), SystemClock());
    if (!s.ok()) return usage(s.status());
    store = std::move(*s);
  } else {
    auto s = NewFileBlobStore(o.file_origin);
    if (!s.ok()) {
      std::fprintf(stderr, "tierfs manifest create: %s\n", s.status().ToString().c_str());
      return kExitRuntime;
    }
    store = std::move(*s);
  }
  return RunManifestCreate(store.get(), o.source, out);
}

}  // namespace tierfs
