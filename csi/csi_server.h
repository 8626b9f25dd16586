#pragma once

#include <memory>
#include <string>

#include "base/result.h"
#include "csi/node_driver.h"

namespace tierfs::csi {

// The CSI plug-in's name (CSIDriver object, GetPluginInfo).
inline constexpr const char* kDriverName = "csi.tierfs.io";

struct CsiServerOptions {
  std::string endpoint;  // unix:///PATH (the socket is replaced if it exists)
  std::string node_id;   // NodeGetInfo
};

// The gRPC server of the Identity and Node services over a unix socket, calling `driver`
// (not owned; outlives the server). Thread-safe.
class CsiServer {
 public:
  virtual ~CsiServer() = default;
  // Blocks until Shutdown() (from another thread or a signal-watching thread).
  virtual void Wait() = 0;
  virtual void Shutdown() = 0;
};

// InvalidArgument naming the flag when the endpoint is not unix:///PATH or the node id is empty.
Status CheckCsiServerOptions(const CsiServerOptions& options);

// REQUIRES: CheckCsiServerOptions(options).ok().
Result<std::unique_ptr<CsiServer>> StartCsiServer(const CsiServerOptions& options,
                                                  NodeDriver* driver);

}  // namespace tierfs::csi
