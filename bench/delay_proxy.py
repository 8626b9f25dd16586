#!/usr/bin/python3
"""A TCP proxy on 127.0.0.1 that makes a loopback origin behave like a remote one.

Every chunk of bytes is held back DELAY ms in each direction (client->origin and origin->client),
and the first chunk a client sends on a new connection waits one extra round trip (2 x DELAY), as
the TCP handshake would cost against a remote server. Chunks are pipelined: the delay is a latency,
not a bandwidth limit.

This stands in for `tc netem`, which this kernel does not have (no sch_netem).

Bounded: at most --max-conns connections at once (others wait to be accepted) and at most
--max-queued chunks in flight per direction (the reader stops reading when the writer is behind,
so TCP back-pressure reaches the sender). Stops on SIGTERM/SIGINT.

With --log FILE it writes one line per HTTP request a client sends: "<unix time> <client pid>
<METHOD> <target>" (the request line's target: path and query), parsed from the client's byte
stream (a Content-Length body is skipped over; chunked request bodies are not parsed: tierfs sends
none). The client pid is the process that owns the connecting socket (found in /proc when the
connection is accepted, among processes whose name starts with --log-comm, default "tierfs";
"?" if none), so that bench/fleet.sh can attribute every origin request to a host while all hosts
use the same endpoint (the endpoint is part of tierfs's block keys, so per-host ports would split L3).

  delay_proxy.py --upstream-port 9000 [--listen-port 0] [--delay-ms 5] [--port-file F]
                 [--log FILE [--log-comm NAME]] [--count-file F]

--count-file: count the bytes the clients ask for with ranged GETs (Range: bytes=A-B), per top
directory of the key (/BUCKET/TOP/...), and write them as JSON to F on SIGUSR1 and at exit
({"TOP": {"requests": n, "bytes": n, "whole": n}}; "whole": GETs without a Range, whose size the
proxy does not know): the origin bytes per job of run.sh's multijob and policy workloads.
"""
import argparse
import asyncio
import json
import os
import re
import signal
import sys
import time

CHUNK = 1024 * 1024


GET_RE = re.compile(rb"GET /[^/ ]+/([^/ ?]+)/[^ ]* HTTP/1\.[01]\r\n(.*?)\r\n\r\n", re.S)
RANGE_RE = re.compile(rb"(?im)^range:[ \t]*bytes=(\d+)-(\d+)")


def socket_owner(peer_port, comm):
    """The pid of a process named `comm` holding the TCP socket whose local port is peer_port."""
    inodes = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(path).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and int(f[1].rsplit(":", 1)[1], 16) == peer_port:
                inodes.add("socket:[%s]" % f[9])
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if not open("/proc/%s/comm" % pid).read().startswith(comm):
                continue
            fd_dir = "/proc/%s/fd" % pid
            for fd in os.listdir(fd_dir):
                try:
                    if os.readlink(os.path.join(fd_dir, fd)) in inodes:
                        return pid
                except OSError:
                    pass
        except OSError:
            continue
    return "?"


class RequestLog:
    """Finds the request lines in one connection's client->origin bytes (HTTP/1.1 keep-alive)."""

    def __init__(self, out, tag):
        self.out, self.tag = out, tag
        self.buf = b""
        self.skip = 0  # body bytes of the current request still to pass over

    def feed(self, data):
        self.buf += data
        while True:
            if self.skip:
                n = min(self.skip, len(self.buf))
                self.buf, self.skip = self.buf[n:], self.skip - n
                if self.skip:
                    return
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > 1 << 16:  # not HTTP: stop looking
                    self.buf = b""
                return
            head, self.buf = self.buf[:end], self.buf[end + 4:]
            lines = head.split(b"\r\n")
            parts = lines[0].split(b" ")
            if len(parts) >= 2:
                self.out.write("%.3f %s %s %s\n" % (time.time(), self.tag, parts[0].decode("latin-1"),
                                                     parts[1].decode("latin-1")))
            for line in lines[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    try:
                        self.skip = int(v.strip())
                    except ValueError:
                        pass


async def pump(loop, reader, writer, delay, first_extra, max_queued, on_data=None):
    queue = asyncio.Queue(maxsize=max_queued)

    async def read_side():
        first = True
        try:
            while True:
                data = await reader.read(CHUNK)
                if on_data is not None and data:
                    on_data(data)
                due = loop.time() + delay + (first_extra if first else 0.0)
                first = False
                await queue.put((due, data))
                if not data:
                    return
        except (ConnectionError, OSError):
            await queue.put((loop.time(), b""))

    async def write_side():
        try:
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            return

    rd = asyncio.ensure_future(read_side())
    try:
        await write_side()
    finally:
        rd.cancel()


class Proxy:
    def __init__(self, args, log=None):
        self.args = args
        self.log = log
        self.delay = args.delay_ms / 1000.0
        self.sem = asyncio.Semaphore(args.max_conns)
        self.tasks = set()
        self.conns = 0
        self.counts = {}

    def count(self, data):
        for m in GET_RE.finditer(data):
            r = RANGE_RE.search(m.group(2))
            c = self.counts.setdefault(m.group(1).decode(errors="replace"), {"requests": 0, "bytes": 0})
            if not r:  # a whole-object GET: counted, its size unknown here
                c["whole"] = c.get("whole", 0) + 1
                continue
            c["requests"] += 1
            c["bytes"] += int(r.group(2)) - int(r.group(1)) + 1

    def write_counts(self):
        if not self.args.count_file:
            return
        tmp = self.args.count_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.counts, f)
        os.replace(tmp, self.args.count_file)

    async def handle(self, creader, cwriter):
        task = asyncio.current_task()
        self.tasks.add(task)
        loop = asyncio.get_running_loop()
        owriter = None
        try:
            async with self.sem:
                try:
                    oreader, owriter = await asyncio.open_connection("127.0.0.1", self.args.upstream_port)
                except OSError:
                    return
                self.conns += 1
                on_data = []
                if self.args.count_file:
                    on_data.append(self.count)
                if self.log is not None:
                    peer = cwriter.get_extra_info("peername")
                    tag = socket_owner(peer[1], self.args.log_comm) if peer else "?"
                    on_data.append(RequestLog(self.log, tag).feed)
                up = pump(loop, creader, owriter, self.delay, 2 * self.delay, self.args.max_queued,
                          (lambda data: [f(data) for f in on_data]) if on_data else None)
                down = pump(loop, oreader, cwriter, self.delay, 0.0, self.args.max_queued)
                await asyncio.gather(up, down, return_exceptions=True)
        except asyncio.CancelledError:
            pass
        finally:
            for w in (cwriter, owriter):
                if w is not None:
                    try:
                        w.close()
                    except Exception:
                        pass
            self.tasks.discard(task)


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream-port", type=int, required=True)
    ap.add_argument("--listen-port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--delay-ms", type=float, default=5.0, help="delay per chunk, each way")
    ap.add_argument("--max-conns", type=int, default=512)
    ap.add_argument("--max-queued", type=int, default=64, help="chunks in flight per direction")
    ap.add_argument("--port-file", help="write the listening port here once ready")
    ap.add_argument("--count-file", help="ranged GET bytes per top directory (SIGUSR1, exit)")
    ap.add_argument("--log", help="append one line per HTTP request to this file")
    ap.add_argument("--log-comm", default="tierfs",
                    help="process name of the clients whose pid the log names")
    args = ap.parse_args()

    log = open(args.log, "a", buffering=1) if args.log else None
    proxy = Proxy(args, log)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", args.listen_port,
                                        backlog=1024, reuse_address=True)
    port = server.sockets[0].getsockname()[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, args.port_file)
    print("delay_proxy: 127.0.0.1:%d -> 127.0.0.1:%d, %.1f ms each way"
          % (port, args.upstream_port, args.delay_ms), flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, proxy.write_counts)
    await stop.wait()
    proxy.write_counts()
    server.close()
    for t in list(proxy.tasks):
        t.cancel()
    await asyncio.sleep(0)
    print("delay_proxy: stopped after %d connections" % proxy.conns, flush=True)
    if log is not None:
        log.close()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    sys.exit(0)
