#!/usr/bin/env python3
"""A connection flood on the metrics port while files are read through the mount.

  fd_flood.py PORT DAEMON_PID HOLD_SECONDS MANIFEST.json FILE...

Opens up to 1000 TCP connections to 127.0.0.1:PORT (non-blocking connects, 5 s at most), sends a
partial request head on each that connects, and holds them all for HOLD_SECONDS. Meanwhile it
reads every FILE (paths relative to the manifest's mount, {"rel": sha256}) whole, checks its
sha256 and drops its pages (posix_fadvise DONTNEED, so the next pass reaches the daemon), one
pass at once and one after HOLD_SECONDS - 1, and samples the daemon's open descriptors. Then it
closes the connections and scrapes http://127.0.0.1:PORT/metrics until it answers 200 (15 s at
most). Prints one JSON line of figures; exits 1 if a read failed or was wrong or the endpoint
did not serve again, 2 on bad usage.
"""
import hashlib
import json
import os
import select
import socket
import sys
import time
import urllib.request


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def sha256_of(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        h = hashlib.sha256()
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            h.update(b)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return h.hexdigest()
    finally:
        os.close(fd)


def read_pass(mnt, want, files, out):
    for rel in files:
        try:
            got = sha256_of(os.path.join(mnt, rel))
        except OSError as e:
            out["read_errors"].append(f"{rel}: {e.strerror}")
            continue
        if got != want[rel]:
            out["wrong"].append(rel)
        else:
            out["reads_ok"] += 1


def flood(port, n=1000, budget=5.0):
    socks, connected = [], 0
    pending = {}
    deadline = time.monotonic() + budget
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
            connected += 1
            s.send(b"GET /metrics HTTP/1.1\r\n")
        except BlockingIOError:
            pending[s.fileno()] = s
        except OSError:
            s.close()
            continue
        socks.append(s)
    poller = select.poll()
    for fd in pending:
        poller.register(fd, select.POLLOUT)
    while pending and time.monotonic() < deadline:
        for fd, ev in poller.poll(200):
            s = pending.pop(fd)
            poller.unregister(fd)
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                connected += 1
                try:
                    s.send(b"GET /metrics HTTP/1.1\r\n")
                except OSError:
                    pass
    return socks, connected


def main():
    if len(sys.argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    port, pid, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    with open(sys.argv[4]) as f:
        manifest = json.load(f)
    mnt, want = manifest["mount"], manifest["sha256"]
    files = sys.argv[5:]
    out = {"fds_before": fd_count(pid), "reads_ok": 0, "read_errors": [], "wrong": []}
    t0 = time.monotonic()
    socks, out["connected"] = flood(port)
    out["held"] = len(socks)
    out["fds_flooded"] = fd_count(pid)
    read_pass(mnt, want, files, out)
    peak = out["fds_flooded"]
    while time.monotonic() < t0 + hold - 1:
        peak = max(peak, fd_count(pid))
        time.sleep(0.2)
    read_pass(mnt, want, files, out)
    out["fds_peak"] = max(peak, fd_count(pid))
    for s in socks:
        s.close()
    t1 = time.monotonic()
    out["served_again_s"] = None
    while time.monotonic() < t1 + 15:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                if r.status == 200:
                    out["served_again_s"] = round(time.monotonic() - t1, 2)
                    break
        except OSError:
            time.sleep(0.2)
    print(json.dumps(out))
    ok = not out["read_errors"] and not out["wrong"] and out["served_again_s"] is not None
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
