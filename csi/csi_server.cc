// Identity and Node services: requests in, NodeDriver calls, CSI codes out. gRPC and protobuf
// stay in this file (and main.cc); the logic below them is NodeDriver's.
#include "csi/csi_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "base/version.h"
#include "csi.grpc.pb.h"  // generated from csi/csi.proto

namespace tierfs::csi {
namespace {

using ::csi::v1::VolumeCapability;

// tierfs Status -> CSI's gRPC codes. FailedPrecondition is what NodeDriver::Publish answers for
// a target that holds another volume: the spec's ALREADY_EXISTS.
grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (s.code()) {
    case Status::Code::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case Status::Code::kPermissionDenied:
      code = grpc::StatusCode::PERMISSION_DENIED;
      break;
    case Status::Code::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case Status::Code::kUnavailable:
    case Status::Code::kTimedOut:
    case Status::Code::kIOError:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case Status::Code::kFailedPrecondition:
      code = grpc::StatusCode::ALREADY_EXISTS;
      break;
    default:
      break;
  }
  return grpc::Status(code, s.message());
}

// A tierfs volume is a read-only file system: a mount, and an access mode that writes nothing.
Status CheckCapability(const ::csi::v1::NodePublishVolumeRequest& req) {
  if (!req.has_volume_capability()) return Status::InvalidArgument("volume_capability is missing");
  const VolumeCapability& cap = req.volume_capability();
  if (!cap.has_mount()) {
    return Status::InvalidArgument("tierfs volumes are file systems: block access is not served");
  }
  if (!cap.mount().fs_type().empty() && cap.mount().fs_type() != "tierfs") {
    return Status::InvalidArgument("fs_type must be empty or tierfs, not '" +
                                   cap.mount().fs_type() + "'");
  }
  const auto mode = cap.access_mode().mode();
  if (mode != VolumeCapability::AccessMode::SINGLE_NODE_READER_ONLY &&
      mode != VolumeCapability::AccessMode::MULTI_NODE_READER_ONLY) {
    return Status::InvalidArgument(
        "tierfs volumes are read-only: the access mode must be ReadOnlyMany "
        "(MULTI_NODE_READER_ONLY) or SINGLE_NODE_READER_ONLY, not " +
        VolumeCapability::AccessMode::Mode_Name(mode));
  }
  return Status::OK();
}

class IdentityService final : public ::csi::v1::Identity::Service {
  grpc::Status GetPluginInfo(grpc::ServerContext*, const ::csi::v1::GetPluginInfoRequest*,
                             ::csi::v1::GetPluginInfoResponse* resp) override {
    resp->set_name(kDriverName);
    resp->set_vendor_version(std::string(Version()));
    return grpc::Status::OK;
  }
  grpc::Status GetPluginCapabilities(grpc::ServerContext*,
                                     const ::csi::v1::GetPluginCapabilitiesRequest*,
                                     ::csi::v1::GetPluginCapabilitiesResponse*) override {
    return grpc::Status::OK;  // a node plug-in only: no controller service, no topology
  }
  grpc::Status Probe(grpc::ServerContext*, const ::csi::v1::ProbeRequest*,
                     ::csi::v1::ProbeResponse* resp) override {
    resp->mutable_ready()->set_value(true);
    return grpc::Status::OK;
  }
};

class NodeService final : public ::csi::v1::Node::Service {
 public:
  NodeService(NodeDriver* driver, std::string node_id)
      : driver_(driver), node_id_(std::move(node_id)) {}

  grpc::Status NodePublishVolume(grpc::ServerContext*,
                                 const ::csi::v1::NodePublishVolumeRequest* req,
                                 ::csi::v1::NodePublishVolumeResponse*) override {
    if (Status s = CheckCapability(*req); !s.ok()) return ToGrpc(s);
    PublishRequest p;
    p.volume_id = req->volume_id();
    p.target_path = req->target_path();
    p.readonly = req->readonly();
    p.volume_context.insert(req->volume_context().begin(), req->volume_context().end());
    p.secrets.insert(req->secrets().begin(), req->secrets().end());
    for (const auto& f : req->volume_capability().mount().mount_flags()) p.mount_flags.push_back(f);
    Status s = driver_->Publish(p);
    if (!s.ok()) {
      spdlog::warn("NodePublishVolume {} at {}: {}", req->volume_id(), req->target_path(),
                   s.ToString());
    }
    return ToGrpc(s);
  }

  grpc::Status NodeUnpublishVolume(grpc::ServerContext*,
                                   const ::csi::v1::NodeUnpublishVolumeRequest* req,
                                   ::csi::v1::NodeUnpublishVolumeResponse*) override {
    Status s = driver_->Unpublish(req->volume_id(), req->target_path());
    if (!s.ok()) {
      spdlog::warn("NodeUnpublishVolume {} at {}: {}", req->volume_id(), req->target_path(),
                   s.ToString());
    }
    return ToGrpc(s);
  }

  grpc::Status NodeGetCapabilities(grpc::ServerContext*,
                                   const ::csi::v1::NodeGetCapabilitiesRequest*,
                                   ::csi::v1::NodeGetCapabilitiesResponse*) override {
    return grpc::Status::OK;  // no staging, stats or expansion
  }

  grpc::Status NodeGetInfo(grpc::ServerContext*, const ::csi::v1::NodeGetInfoRequest*,
                           ::csi::v1::NodeGetInfoResponse* resp) override {
    resp->set_node_id(node_id_);
    return grpc::Status::OK;
  }

 private:
  NodeDriver* const driver_;
  const std::string node_id_;
};

// The services and the server that calls them; the services outlive the server (members are
// destroyed in reverse order). Thread-safe (gRPC's threads call the services).
class GrpcCsiServer final : public CsiServer {
 public:
  GrpcCsiServer(NodeDriver* driver, const std::string& node_id) : node_(driver, node_id) {}
  ~GrpcCsiServer() override {
    if (server_) server_->Shutdown();
  }

  Status Start(const std::string& endpoint) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(endpoint, grpc::InsecureServerCredentials());
    builder.RegisterService(&identity_);
    builder.RegisterService(&node_);
    server_ = builder.BuildAndStart();
    if (!server_) return Status::Unavailable("cannot listen on " + endpoint);
    return Status::OK();
  }
  void Wait() override { server_->Wait(); }
  void Shutdown() override { server_->Shutdown(); }

 private:
  IdentityService identity_;
  NodeService node_;
  std::unique_ptr<grpc::Server> server_;
};

constexpr std::string_view kUnix = "unix://";

}  // namespace

Status CheckCsiServerOptions(const CsiServerOptions& options) {
  if (options.endpoint.rfind(kUnix, 0) != 0 || options.endpoint.size() <= kUnix.size() ||
      options.endpoint[kUnix.size()] != '/') {
    return Status::InvalidArgument("--endpoint must be unix:///ABSOLUTE/PATH, not '" +
                                   options.endpoint + "'");
  }
  if (options.node_id.empty()) return Status::InvalidArgument("--node-id is empty");
  return Status::OK();
}

Result<std::unique_ptr<CsiServer>> StartCsiServer(const CsiServerOptions& options,
                                                  NodeDriver* driver) {
  TIERFS_RETURN_IF_ERROR(CheckCsiServerOptions(options));
  const std::string path = options.endpoint.substr(kUnix.size());
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status::FromErrno(errno, "removing the old socket " + path);
  }
  auto server = std::make_unique<GrpcCsiServer>(driver, options.node_id);
  TIERFS_RETURN_IF_ERROR(server->Start(options.endpoint));
  return std::unique_ptr<CsiServer>(std::move(server));
}

}  // namespace tierfs::csi
