#!/usr/bin/python3
"""A stand-in for systemd's notification socket (sd_notify(3)), for tests/e2e/test_package.sh.

Binds an AF_UNIX datagram socket at --socket (what NOTIFY_SOCKET names) and appends one JSON line
per datagram to --log: {"t": monotonic seconds, "pid": the sender's, "fields": {"READY": "1",
"STATUS": ...}}. The
moment a READY=1 arrives it checks, before doing anything else, that --mountpoint is a mount (in
/proc/self/mountinfo) and that --file under it reads back with sha256 --sha256; the outcome goes
into that line as "ready_mounted" and "ready_sha256". Exits after a STOPPING=1 datagram, or
after --timeout seconds.

  notify_listener.py --socket S --log L --mountpoint M --file REL --sha256 HEX [--timeout 60]
"""
import argparse
import hashlib
import json
import os
import socket
import struct
import time


def is_mounted(path):
    path = os.path.abspath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            # Field 5 is the mount point, with blanks escaped as \040.
            if line.split()[4].replace("\\040", " ") == path:
                return True
    return False


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--mountpoint", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--sha256", required=True)
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(a.socket)
    # The sender's pid with each datagram, as systemd takes it (NotifyAccess).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    cred_size = struct.calcsize("3i")
    deadline = time.monotonic() + a.timeout
    with open(a.log, "a") as log:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            try:
                data, anc, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(cred_size))
            except socket.timeout:
                break
            entry = {"t": time.monotonic(), "fields": {}, "pid": 0}
            for level, kind, cdata in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    entry["pid"] = struct.unpack("3i", cdata[:cred_size])[0]
            for line in data.decode("utf-8", "replace").split("\n"):
                if "=" in line:
                    k, v = line.split("=", 1)
                    entry["fields"][k] = v
            if entry["fields"].get("READY") == "1":
                entry["ready_mounted"] = is_mounted(a.mountpoint)
                try:
                    entry["ready_sha256"] = sha256_of(os.path.join(a.mountpoint, a.file))
                except OSError as e:
                    entry["ready_sha256"] = f"error: {e}"
            log.write(json.dumps(entry) + "\n")
            log.flush()
            if entry["fields"].get("STOPPING") == "1":
                break
    sock.close()
    os.unlink(a.socket)


if __name__ == "__main__":
    main()
