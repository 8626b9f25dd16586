// tierfs — the command line: `tierfs mount`, `tierfs status`, `tierfs prefetch`, `tierfs
// log-level`, `tierfs config check|reference`, `tierfs manifest create|diff`, `tierfs l3 gc`,
// `tierfs --version`. This file only declares the commands and their flags (CLI11) and calls the
// command's Run function: mount_cli.h, status_cli.h, prefetch_cli.h, config_cli.h,
// manifest_cli.h, l3_gc_cli.h.
//
// Exit codes (daemon/exit_codes.h): 0 ok (also after fusermount3 -u, SIGINT, SIGTERM), 1 runtime
// failure (origin unreachable, mount failed), 2 usage or configuration error.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/logging.h"
#include "base/version.h"
#include "daemon/config.h"
#include "daemon/config_cli.h"
#include "daemon/exit_codes.h"
#include "daemon/internal/config_table.h"
#include "daemon/l3_gc_cli.h"
#include "daemon/manifest_cli.h"
#include "daemon/mount_cli.h"
#include "daemon/prefetch_cli.h"
#include "daemon/restart_cli.h"
#include "daemon/status_cli.h"

namespace tierfs {
namespace {

// ---- the flags of tierfs mount that set config keys ----

constexpr const char* kGroupSource = "Source and S3";
constexpr const char* kGroupCache = "Cache";
constexpr const char* kGroupL3 = "Regional L3 tier";
constexpr const char* kGroupFuse = "FUSE and permissions";
constexpr const char* kGroupLog = "Logging and process";

const char* FlagGroup(const config::ConfigKey& k) {
  if (k.table == "cache") return k.name.starts_with("l3") ? kGroupL3 : kGroupCache;
  if (k.table == "fuse") return kGroupFuse;
  if (k.table == "log" || k.table == "metrics") return kGroupLog;
  return kGroupSource;
}

// Registers, from the key table, every flag that sets a config key (of `table` only, if given);
// its text lands in `flags` (checked by ApplyFlags), and its help is the key's documentation.
void AddConfigKeyFlags(CLI::App* mount, MountFlags* flags, std::string_view table = {}) {
  for (const char* group : {kGroupSource, kGroupCache, kGroupL3, kGroupFuse, kGroupLog}) {
    for (const config::ConfigKey& k : config::ConfigTable()) {
      if (k.flag.empty() || FlagGroup(k) != group) continue;
      if (!table.empty() && k.table != table) continue;
      std::string names(k.flag);
      if (!k.flag_alias.empty()) names += "," + std::string(k.flag_alias);
      const std::string help = config::FlagHelp(k);
      CLI::Option* opt = nullptr;
      if (k.flag_on != nullptr) {
        opt = mount->add_flag(names, flags->*k.flag_on, help);
      } else {
        opt = mount->add_option_function<std::string>(
            names, [flags, text = k.flag_text](const std::string& v) { flags->*text = v; }, help);
      }
      opt->group(group);
    }
  }
}

// What `tierfs mount` was given.
struct MountCli {
  // Declares the command and its flags in `app`, parsed into the members.
  explicit MountCli(CLI::App* app);

  std::string source;
  std::string mountpoint;
  std::string config_path;
  bool read_only = false;  // accepted; tierfs is read-only whatever it says
  MountFlags flags;
};

MountCli::MountCli(CLI::App* app) {
  CLI::App* mount = app->add_subcommand(
      "mount",
      "Mount SOURCE (s3://BUCKET[/PREFIX] or file:///PATH) read-only at MOUNTPOINT. Returns once "
      "the mount is usable; the daemon keeps serving in the background (-f: in the foreground). "
      "Unmount with `fusermount3 -u MOUNTPOINT` or `umount MOUNTPOINT`.");
  mount->footer(
      "Examples:\n"
      "  tierfs mount s3://my-bucket/imagenet /mnt/imagenet --region us-west-2\n"
      "  tierfs mount s3://public-data /mnt/pub --no-sign-request --l1-size 4GiB\n"
      "  tierfs mount s3://b /mnt/b --endpoint-url http://127.0.0.1:9000 --uid 1000 --gid 1000 \\\n"
      "      --file-mode 0444 --dir-mode 0555 --allow-other\n"
      "  tierfs mount file:///srv/datasets /mnt/ds -f --log-level debug\n"
      "  tierfs mount s3://b /mnt/b --config /etc/tierfs/tierfs.toml --log-file "
      "/var/log/tierfs/b.log --log-format json\n"
      "Flags override the config file; the config file overrides the environment.");
  mount->add_option("SOURCE", source, "s3://BUCKET[/PREFIX] or file:///ABSOLUTE/PATH")->required();
  mount->add_option("MOUNTPOINT", mountpoint, "An existing empty directory (see -o nonempty)")
      ->required();
  mount->add_option("--config", config_path,
                    "TOML config file (see /etc/tierfs/tierfs.toml); flags "
                    "override its settings");
  AddConfigKeyFlags(mount, &flags);
  mount
      ->add_flag("--read-only", read_only,
                 "Accepted for mountpoint-s3 compatibility; tierfs mounts are always read-only")
      ->group(kGroupFuse);
  mount
      ->add_option("-o", flags.options,
                   "Mount options, comma-separated: allow_other (other users may enter; off by "
                   "default), noallow_other, allow_root, default_permissions (on with "
                   "allow_other), nodefault_permissions, uid=N, gid=N, file_mode=OCTAL (0644), "
                   "dir_mode=OCTAL (0755), max_threads=N, debug, nonempty (mount over a "
                   "directory that holds files), and libfuse's nodev, nosuid, "
                   "noexec, noatime, auto_unmount, ...")
      ->allow_extra_args(false)
      ->group(kGroupFuse);
  mount->add_flag("-f,--foreground", flags.foreground, "Stay in the foreground, logging to stderr")
      ->group(kGroupLog);
  mount
      ->add_flag("--supervise", flags.supervise,
                 "With --foreground: serve under a supervisor that resumes the mount if the "
                 "serving daemon dies, as a daemonized mount always does (the systemd unit "
                 "uses it)")
      ->group(kGroupLog);
}

// What `tierfs status` was given.
struct StatusCli {
  // Declares the command and its flags in `app`, parsed into the members.
  explicit StatusCli(CLI::App* app);

  CLI::App* cmd = nullptr;
  std::string mountpoint;
  bool raw = false;
  bool json = false;
  std::string watch_arg;
  CLI::Option* watch = nullptr;
};

StatusCli::StatusCli(CLI::App* app) {
  CLI::App* status = app->add_subcommand(
      "status",
      "Show every tierfs mount of this host (or the one at MOUNTPOINT): source, daemon pid, log, "
      "cache hits, misses and bytes per tier. A mount whose daemon died shows as stale, one whose "
      "daemon does not answer within 5 s as hung. Exit 1 when a mount is stale, hung or "
      "unreadable.");
  status->footer(
      "Examples:\n"
      "  tierfs status\n"
      "  tierfs status /mnt/data --json | jq '.mounts[0].hit_ratio'\n"
      "  tierfs status --watch 5");
  status->add_option("MOUNTPOINT", mountpoint, "A tierfs mount point (default: every one)");
  status->add_flag("--json", json, "One JSON document (with --watch: one per line) for scripts");
  watch = status
              ->add_option("--watch", watch_arg,
                           "Redraw every SECONDS (default 2) with reads/s, bytes/s per "
                           "tier and the hit ratio, until ^C")
              ->expected(0, 1)
              ->type_name("[SECONDS]");
  status->add_flag("--raw", raw, "Print the user.tierfs.stats attribute of MOUNTPOINT as it is");
  cmd = status;
}

int RunStatusCli(StatusCli* cli) {
  std::optional<double> watch;
  if (cli->watch->count() > 0) {
    watch = 2.0;
    // `--watch /mnt/x` means the default interval and that mount point.
    const std::string& arg = cli->watch_arg;
    char* end = nullptr;
    const double v = arg.empty() ? 2.0 : std::strtod(arg.c_str(), &end);
    if (!arg.empty() && (end == arg.c_str() || *end != '\0')) {
      if (!cli->mountpoint.empty()) {
        std::fprintf(stderr, "tierfs status: --watch: '%s' is not a number of seconds\n",
                     arg.c_str());
        return kExitUsage;
      }
      cli->mountpoint = arg;
    } else {
      watch = v;
    }
  }
  return RunStatus(cli->mountpoint, cli->raw, cli->json, watch);
}

// What `tierfs prefetch` was given.
struct PrefetchCli {
  // Declares the command and its flags in `app`, parsed into the members.
  explicit PrefetchCli(CLI::App* app);

  CLI::App* cmd = nullptr;
  std::vector<std::string> paths;
  PrefetchCliOptions options;
};

PrefetchCli::PrefetchCli(CLI::App* app) {
  CLI::App* prefetch = app->add_subcommand(
      "prefetch",
      "Hydrate files or directories (recursively) of a mounted tierfs into a tier in "
      "the background (user.tierfs.prefetch); the job survives daemon restarts. Paths that are "
      "not on a tierfs mount are refused (exit 2) and nothing is started.");
  prefetch->footer(
      "Examples:\n"
      "  tierfs prefetch /mnt/data/train            # queue, return at once\n"
      "  tierfs prefetch --wait --tier l1 /mnt/data/val\n"
      "  tierfs prefetch --cancel /mnt/data/train\n"
      "  tierfs prefetch --wait --from-file order.txt   # a loader's order, in bulk");
  PrefetchCliOptions& pf = options;
  prefetch->add_option("PATH", paths, "Files or directories on a tierfs mount");
  prefetch
      ->add_option("--from-file", pf.from_file,
                   "Prefetch the files listed in LIST (one path per line, absolute or "
                   "relative to the working directory, all on one tierfs mount; '-' = "
                   "stdin), in that order, as the mount's list job "
                   "(user.tierfs.prefetch_list); a path that is not a file on the mount "
                   "fails it (exit 1)")
      ->type_name("LIST");
  prefetch->add_option("--tier", pf.tier, "l1 (memory), l2 (flash, default) or l3 (region only)");
  prefetch->add_flag("--wait", pf.wait,
                     "Wait until every job finished (progress bar with rate and ETA on a "
                     "terminal); exit 1 if one failed or was cancelled");
  prefetch->add_flag("--cancel", pf.cancel, "Cancel the jobs of the paths instead");
  cmd = prefetch;
}

// What `tierfs log-level` was given.
struct LogLevelCli {
  // Declares the command and its flags in `app`, parsed into the members.
  explicit LogLevelCli(CLI::App* app);

  CLI::App* cmd = nullptr;
  std::string level;
  std::string mountpoint;
};

LogLevelCli::LogLevelCli(CLI::App* app) {
  CLI::App* loglevel = app->add_subcommand(
      "log-level",
      "Change the log level of running daemons at once (sets user.tierfs.log_level on the "
      "mount's root; root or the mounting user only). Without MOUNTPOINT: every live tierfs "
      "mount (stale and hung ones, whose daemon died or does not answer in 5 s, are skipped with a "
      "note).");
  loglevel->footer("Example:\n  tierfs log-level debug /mnt/data   # later: tierfs log-level info");
  loglevel->add_option("LEVEL", level, "trace, debug, info, warn, error, critical or off")
      ->required();
  loglevel->add_option("MOUNTPOINT", mountpoint, "A tierfs mount point (default: every one)");
  cmd = loglevel;
}

// What `tierfs config check|reference` was given.
struct ConfigCli {
  // Declares the command and its flags in `app`, parsed into the members.
  explicit ConfigCli(CLI::App* app);

  CLI::App* check = nullptr;
  CLI::App* reference = nullptr;
  std::string file;
};

ConfigCli::ConfigCli(CLI::App* app) {
  CLI::App* config_cmd = app->add_subcommand("config", "Inspect configuration files");
  config_cmd->require_subcommand(1);
  check = config_cmd->add_subcommand(
      "check",
      "Check FILE as a mount would and print the effective configuration: every key, its value "
      "and where it came from (the file, the environment or the default). Exit 2 with the "
      "error naming the key and line on a bad file.");
  check->add_option("FILE", file, "A TOML config file")->required();
  reference = config_cmd->add_subcommand(
      "reference",
      "Print every config key as a Markdown table: type, default, range, the flag of tierfs "
      "mount that sets it, and what it does (the source of docs/config-reference.md).");
}

// What `tierfs manifest create|diff` was given.
struct ManifestCli {
  // Declares the command and its flags in `app`, parsed into the members.
  explicit ManifestCli(CLI::App* app);

  CLI::App* create = nullptr;
  std::string source, out, config_path;
  MountFlags flags;
  CLI::App* diff = nullptr;
  std::string a, b;
  bool quiet = false;
};

ManifestCli::ManifestCli(CLI::App* app) {
  CLI::App* manifest_cmd = app->add_subcommand(
      "manifest",
      "Dataset manifests: the list of every object of a source (key, size, ETag, mtime) at one "
      "moment, for `tierfs mount --manifest` (a fixed dataset version, no listing at mount "
      "time) and for comparing dataset versions");
  manifest_cmd->require_subcommand(1);
  CLI::App* mf_create = manifest_cmd->add_subcommand(
      "create",
      "List every object of SOURCE (s3://BUCKET[/PREFIX] or file:///PATH) and write the "
      "manifest to FILE (zstd-compressed, checksummed). Prints the object count and the "
      "checksum that user.tierfs.manifest shows on a mount of it. Exit 1 when the listing or "
      "the write fails, 2 for bad arguments.");
  mf_create->footer(
      "Examples:\n"
      "  tierfs manifest create s3://my-bucket/imagenet -o imagenet-2026-11.tfm\n"
      "  tierfs mount s3://my-bucket/imagenet /mnt/imagenet --manifest imagenet-2026-11.tfm\n"
      "  tierfs manifest create file:///srv/data -o data.tfm");
  mf_create->add_option("SOURCE", source, "s3://BUCKET[/PREFIX] or file:///ABSOLUTE/PATH")
      ->required();
  mf_create->add_option("-o,--output", out, "The manifest file to write (replaced atomically)")
      ->type_name("FILE")
      ->required();
  mf_create->add_option("--config", config_path, "TOML config file with the s3.* keys");
  AddConfigKeyFlags(mf_create, &flags, "s3");  // --endpoint, --region, --profile, ...
  CLI::App* mf_diff = manifest_cmd->add_subcommand(
      "diff",
      "Compare two manifest files: one line per object added (+), removed (-) or changed in "
      "size or ETag (~), in key order, then a summary. Exit status as diff(1): 0 the same "
      "objects, 1 different, 2 trouble (a file unreadable or not a valid manifest).");
  mf_diff->footer("Example:\n  tierfs manifest diff imagenet-2026-10.tfm imagenet-2026-11.tfm");
  mf_diff->add_option("A", a, "The older manifest file")->required();
  mf_diff->add_option("B", b, "The newer manifest file")->required();
  mf_diff->add_flag("-q,--quiet", quiet, "Print nothing; only the exit status tells");
  create = mf_create;
  diff = mf_diff;
}

// What `tierfs l3 gc` was given.
struct GcCli {
  // Declares the command and its flags in `app`, parsed into the members.
  explicit GcCli(CLI::App* app);

  CLI::App* cmd = nullptr;
  std::string config_path, l3, endpoint, region, ttl, max_bytes;
  bool dry_run = false;
  CLI::Option *l3_opt = nullptr, *endpoint_opt = nullptr, *region_opt = nullptr, *ttl_opt = nullptr,
              *max_opt = nullptr;
};

GcCli::GcCli(CLI::App* app) {
  CLI::App* l3_cmd = app->add_subcommand("l3", "Manage the regional L3 tier");
  l3_cmd->require_subcommand(1);
  CLI::App* gc = l3_cmd->add_subcommand(
      "gc",
      "Delete L3 blocks older than the TTL, then the oldest blocks until the tier holds at "
      "most --l3-max-bytes. Only objects in tierfs's block format are deleted (checked by "
      "name and header); anything else under blocks/ is reported and left alone");
  gc->add_option("--config", config_path, "TOML config file with the cache.l3* keys");
  l3_opt =
      gc->add_option("--l3", l3, "The L3 store, s3://BUCKET[/PREFIX] (memcached:// needs no gc)");
  endpoint_opt = gc->add_option("--l3-endpoint", endpoint, "Endpoint URL of the L3 store");
  region_opt = gc->add_option("--region", region, "Region of the L3 store");
  ttl_opt = gc->add_option("--l3-ttl", ttl, "Delete blocks older than this (cache.l3_ttl)");
  max_opt = gc->add_option("--l3-max-bytes", max_bytes,
                           "Then trim the oldest blocks down to this size (cache.l3_max_bytes)");
  gc->add_flag("--dry-run", dry_run, "Report what would be deleted; delete nothing");
  cmd = gc;
}

int RunGcCli(const GcCli& cli) {
  MountFlags gf;
  if (cli.l3_opt->count() > 0) gf.l3 = cli.l3;
  if (cli.endpoint_opt->count() > 0) gf.l3_endpoint = cli.endpoint;
  if (cli.region_opt->count() > 0) gf.region = cli.region;
  std::optional<std::string> ttl_flag, max_flag;
  if (cli.ttl_opt->count() > 0) ttl_flag = cli.ttl;
  if (cli.max_opt->count() > 0) max_flag = cli.max_bytes;
  return RunL3Gc(cli.config_path, gf, ttl_flag, max_flag, cli.dry_run);
}

// What `tierfs restart` was given.
struct RestartCli {
  explicit RestartCli(CLI::App* app) {
    cmd = app->add_subcommand(
        "restart",
        "Hand the mount at MOUNTPOINT to a new daemon without unmounting it (an upgrade, a "
        "changed configuration): readers see a pause, open files and inode numbers stay valid. "
        "If the new daemon refuses (a setting that cannot change on a live mount) or fails, the "
        "running one serves on and the exit status is 1.");
    cmd->footer(
        "Examples:\n"
        "  apt install ./tierfs_NEW.deb && tierfs restart /mnt/data\n"
        "  tierfs restart /mnt/data --binary /opt/tierfs/bin/tierfs");
    cmd->add_option("MOUNTPOINT", mountpoint, "A tierfs mount point")->required();
    cmd->add_option("--binary", binary,
                    "The tierfs binary to start (default: the running daemon's, as installed "
                    "now)");
  }
  CLI::App* cmd = nullptr;
  std::string mountpoint;
  std::string binary;
};

int Main(int argc, char** argv) {
  CLI::App app{
      "tierfs: mounts an object-store bucket (S3 API or a local directory) as a read-only "
      "file system, served through a memory (L1) and local-flash (L2) block cache and an "
      "optional regional L3 bucket."};
  app.set_version_flag("--version", "tierfs " + std::string(Version()));
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  tierfs mount s3://my-bucket/datasets /mnt/data --region eu-west-1 --l2-size 200GiB\n"
      "  tierfs mount s3://b /mnt/b --endpoint-url http://127.0.0.1:9000 --allow-other\n"
      "  tierfs status                      # every tierfs mount of this host\n"
      "  tierfs status /mnt/data --watch 2  # rates, until ^C\n"
      "  tierfs prefetch --wait /mnt/data/train\n"
      "  tierfs log-level debug /mnt/data\n"
      "  tierfs restart /mnt/data           # after an upgrade: no unmount\n"
      "  tierfs config check /etc/tierfs/tierfs.toml\n"
      "  tierfs manifest create s3://my-bucket/datasets -o datasets.tfm\n"
      "Run `tierfs SUBCOMMAND --help` for the options of each.");

  // The commands, in the order of the help.
  MountCli mount_cli(&app);  // the command when no other one was given
  StatusCli status(&app);
  PrefetchCli prefetch(&app);
  LogLevelCli loglevel(&app);
  RestartCli restart(&app);
  ConfigCli config(&app);
  ManifestCli manifest(&app);
  GcCli gc(&app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  if (*status.cmd) return RunStatusCli(&status);
  if (*prefetch.cmd) return RunPrefetchCli(prefetch.paths, prefetch.options);
  if (*loglevel.cmd) return RunLogLevel(loglevel.level, loglevel.mountpoint);
  if (*restart.cmd) return RunRestart(restart.mountpoint, restart.binary);
  if (*config.check) return RunConfigCheck(config.file);
  if (*config.reference) return RunConfigReference();
  if (*manifest.create) {
    return RunManifestCreateCli(manifest.source, manifest.out, manifest.config_path,
                                manifest.flags);
  }
  if (*manifest.diff) {
    // diff(1)'s convention: usage trouble is 2 as well (CLI11 already exits 2 for bad flags).
    return RunManifestDiff(manifest.a, manifest.b, manifest.quiet);
  }
  if (*gc.cmd) return RunGcCli(gc);

  DaemonOptions options;
  options.source = mount_cli.source;
  options.mountpoint = mount_cli.mountpoint;
  return RunMount(std::move(options), mount_cli.config_path, mount_cli.flags);
}

}  // namespace
}  // namespace tierfs

// Nothing ends with an unexplained abort: an exception that escapes (an allocation the host
// cannot satisfy) is reported on stderr and in the log, and the exit code is 1.
int main(int argc, char** argv) {
  std::string what;
  try {
    return tierfs::Main(argc, argv);
  } catch (const std::bad_alloc&) {
    what =
        "out of memory (std::bad_alloc): check the size settings (cache.l1_size, "
        "cache.l2_size, cache.readahead_budget) against this host";
  } catch (const std::exception& e) {
    what = std::string("unexpected error: ") + e.what();
  }
  std::fprintf(stderr, "tierfs: %s\n", what.c_str());
  try {
    tierfs::Logger(tierfs::Module::kDaemon).critical("{}", what);
    spdlog::shutdown();
  } catch (...) {
  }
  return 1;
}
