#include "csi/node_state.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/fd.h"
#include "base/strings.h"

namespace tierfs::csi {

using nlohmann::json;

std::string EncodeState(const NodeState& state) {
  json daemons = json::object();
  for (const auto& [key, d] : state.daemons) {
    json targets = json::object();
    for (const auto& [path, t] : d.targets) {
      targets[path] = {{"volume_id", t.volume_id}, {"readonly", t.readonly}};
    }
    daemons[key] = {{"source", d.source},
                    {"endpoint", d.endpoint},
                    {"region", d.region},
                    {"credentials_id", d.credentials_id},
                    {"flags", d.flags},
                    {"mountpoint", d.mountpoint},
                    {"cache_dir", d.cache_dir},
                    {"log_file", d.log_file},
                    {"pid", d.pid},
                    {"start_time", d.start_time},
                    {"targets", targets}};
  }
  json doc = {{"version", kStateVersion}, {"daemons", daemons}};
  return doc.dump(2) + "\n";
}

Result<NodeState> DecodeState(std::string_view text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status::Corruption("the state file is not a JSON object");
  }
  if (!doc.contains("version") || !doc["version"].is_number_integer() ||
      doc["version"].get<int>() != kStateVersion) {
    return Status::Corruption(fmt::format(
        "the state file's version is not {} (a newer driver wrote it?)", kStateVersion));
  }
  NodeState state;
  if (!doc.contains("daemons") || !doc["daemons"].is_object()) return state;
  for (const auto& [key, d] : doc["daemons"].items()) {
    DaemonRecord r;
    r.key = key;
    try {
      r.source = d.at("source").get<std::string>();
      r.endpoint = d.value("endpoint", "");
      r.region = d.value("region", "");
      r.credentials_id = d.value("credentials_id", "node");
      r.flags = d.value("flags", std::vector<std::string>{});
      r.mountpoint = d.at("mountpoint").get<std::string>();
      r.cache_dir = d.value("cache_dir", "");
      r.log_file = d.value("log_file", "");
      r.pid = d.at("pid").get<int64_t>();
      r.start_time = d.value("start_time", uint64_t{0});
      if (d.contains("targets")) {
        const json& targets = d.at("targets");
        for (auto it = targets.begin(); it != targets.end(); ++it) {
          r.targets[it.key()] = {it->at("volume_id").get<std::string>(),
                                 it->value("readonly", false)};
        }
      }
    } catch (const json::exception& e) {
      return Status::Corruption(fmt::format("the state file's daemon {}: {}", key, e.what()));
    }
    state.daemons.emplace(key, std::move(r));
  }
  return state;
}

Result<NodeState> LoadState(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return NodeState{};
    return Status::FromErrno(errno, "reading " + path);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  Result<NodeState> state = DecodeState(ss.str());
  if (!state.ok()) return state.status().WithContext(path);
  return state;
}

Status SaveState(const std::string& path, const NodeState& state) {
  const std::string tmp = path + ".tmp";
  const std::string text = EncodeState(state);
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (fd.get() < 0) return Status::FromErrno(errno, "creating " + tmp);
    size_t done = 0;
    while (done < text.size()) {
      ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::FromErrno(errno, "writing " + tmp);
      done += static_cast<size_t>(n);
    }
    if (::fsync(fd.get()) != 0) return Status::FromErrno(errno, "fsync " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::FromErrno(errno, "renaming " + tmp);
  }
  const std::string dir(ParentDir(path));
  UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() >= 0) ::fsync(dfd.get());
  return Status::OK();
}

}  // namespace tierfs::csi
