#!/usr/bin/python3
"""A CSI client for the end-to-end tests: calls tierfs-csi over its gRPC unix socket as the
kubelet would. The message classes are generated from csi/csi.proto with `protoc --python_out`
into GEN_DIR at test time (no grpc_tools needed: methods are called by name with
channel.unary_unary).

    csi_client.py --socket PATH --gen GEN_DIR info
    csi_client.py --socket PATH --gen GEN_DIR publish --volume-id V --target T
        [--attr KEY=VALUE ...] [--secret KEY=VALUE ...] [--mount-flag F ...]
        [--mode MULTI_NODE_READER_ONLY] [--block] [--readonly]
    csi_client.py --socket PATH --gen GEN_DIR unpublish --volume-id V --target T
    csi_client.py --socket PATH --gen GEN_DIR call SERVICE METHOD   (an empty request)

Prints "OK" (and the response for info/call) or "ERROR CODE_NAME: details"; exit 0 on OK, 1 on
a gRPC error, 2 on a usage error.
"""
import argparse
import importlib
import sys

import grpc


def load(gen_dir):
    sys.path.insert(0, gen_dir)
    return importlib.import_module("csi_pb2")


def kv(items):
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit("csi_client: %r is not KEY=VALUE" % item)
        out[key] = value
    return out


def call(channel, service, method, request, response_cls):
    rpc = channel.unary_unary(
        "/csi.v1.%s/%s" % (service, method),
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=response_cls.FromString,
    )
    return rpc(request, timeout=180)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--gen", required=True, help="directory with the generated csi_pb2.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info")
    pub = sub.add_parser("publish")
    pub.add_argument("--volume-id", required=True)
    pub.add_argument("--target", required=True)
    pub.add_argument("--attr", action="append")
    pub.add_argument("--secret", action="append")
    pub.add_argument("--mount-flag", action="append")
    pub.add_argument("--mode", default="MULTI_NODE_READER_ONLY")
    pub.add_argument("--block", action="store_true")
    pub.add_argument("--readonly", action="store_true", help="the request's readonly flag")
    unp = sub.add_parser("unpublish")
    unp.add_argument("--volume-id", required=True)
    unp.add_argument("--target", required=True)
    raw = sub.add_parser("call")
    raw.add_argument("service")
    raw.add_argument("method")
    a = ap.parse_args()

    pb = load(a.gen)
    channel = grpc.insecure_channel("unix://" + a.socket)
    try:
        if a.cmd == "info":
            info = call(channel, "Identity", "GetPluginInfo", pb.GetPluginInfoRequest(),
                        pb.GetPluginInfoResponse)
            probe = call(channel, "Identity", "Probe", pb.ProbeRequest(), pb.ProbeResponse)
            node = call(channel, "Node", "NodeGetInfo", pb.NodeGetInfoRequest(),
                        pb.NodeGetInfoResponse)
            caps = call(channel, "Node", "NodeGetCapabilities", pb.NodeGetCapabilitiesRequest(),
                        pb.NodeGetCapabilitiesResponse)
            print("OK name=%s version=%s ready=%s node_id=%s node_capabilities=%d" % (
                info.name, info.vendor_version, probe.ready.value, node.node_id,
                len(caps.capabilities)))
        elif a.cmd == "publish":
            cap = pb.VolumeCapability()
            if a.block:
                cap.block.SetInParent()
            else:
                cap.mount.SetInParent()
                cap.mount.mount_flags.extend(a.mount_flag or [])
            cap.access_mode.mode = pb.VolumeCapability.AccessMode.Mode.Value(a.mode)
            req = pb.NodePublishVolumeRequest(
                volume_id=a.volume_id, target_path=a.target, volume_capability=cap,
                readonly=a.readonly, secrets=kv(a.secret), volume_context=kv(a.attr))
            call(channel, "Node", "NodePublishVolume", req, pb.NodePublishVolumeResponse)
            print("OK")
        elif a.cmd == "unpublish":
            req = pb.NodeUnpublishVolumeRequest(volume_id=a.volume_id, target_path=a.target)
            call(channel, "Node", "NodeUnpublishVolume", req, pb.NodeUnpublishVolumeResponse)
            print("OK")
        else:
            # Any method with an empty request; the answer is not decoded.
            rpc = channel.unary_unary("/csi.v1.%s/%s" % (a.service, a.method),
                                      request_serializer=lambda m: m,
                                      response_deserializer=lambda b: b)
            rpc(b"", timeout=30)
            print("OK")
    except grpc.RpcError as e:
        print("ERROR %s: %s" % (e.code().name, e.details()))
        return 1
    finally:
        channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
