#!/usr/bin/python3
"""A fault-injecting HTTP/1.1 reverse proxy for the end-to-end tests (Python 3 stdlib only).

    fault_proxy.py --upstream-port PORT [--listen-port 0] [--port-file F] [--seed N]

Listens on 127.0.0.1 and forwards every request to http://127.0.0.1:PORT (an s3rver), keeping
client connections alive (one upstream connection per client connection) and passing chunked
answers through re-chunked. The Host header is forwarded unchanged, so SigV4 signatures stay valid.

Faults are rules set at run time through the control API on the same port:

    POST /__fault__         body: {"rules": [RULE, ...], "enforce_if_match": false}
                            replaces the rules (and the fired counters)
    GET  /__fault__         {"rules": [...], "fired": {ACTION: N}, "requests": {KIND: N}}

A RULE is a JSON object:

    action   503 | 500 | reset | short | stall | stall_body | drop | strip_if_match |
             strip_range | etag | corrupt | replace | delay
    kind     range | get | head | list | put | any (default any): range = GET with Range,
             get = GET of an object without Range, list = GET of a bucket (no key)
    key      regular expression searched in the object key (default: every key)
    prob     probability that a matching request fires the rule (default 1)
    count    the rule fires at most this often (default: unlimited)
    skip     the first `skip` matching requests never fire it (default 0): "the Nth ranged GET"
    seconds  stall / stall_body / delay: how long to hold the connection before closing it (default 30)
    body_file  replace: the new content PUT to the upstream (same key) before forwarding

What the actions do:

    503          answer 503 SlowDown with S3's XML error body (no upstream request)
    500          answer 500 InternalError with S3's XML error body (no upstream request)
    reset        forward, send the headers and half the body, then reset the connection (RST)
    short        forward, announce the full Content-Length, send half the body, close
    stall        read the request, send nothing for `seconds`, close
    drop         read the request and reset the connection without an answer (a server that
                 is down)
    stall_body   forward, send the headers and half the body, stall `seconds`, close
    strip_if_match  drop If-Match before forwarding (a server that ignores it)
    strip_range  drop Range before forwarding (the upstream answers 200 with the whole object)
    etag         rewrite the answer's ETag to a different value
    corrupt      flip one byte in the middle of the answer's body
    delay        wait `seconds` before forwarding (a slow origin)
    replace      PUT body_file to the same key upstream first (the object changes between two
                 ranged reads), then forward the request unchanged

With "enforce_if_match": true the proxy itself honours If-Match on GET/HEAD (s3rver does not):
it asks the upstream for the object's current ETag (HEAD) and answers 412 PreconditionFailed
when it differs.

reset, short, stall_body and corrupt act at half of the announced Content-Length; on a chunked
answer (no length) they act at the start of the body. Several rules may fire on one request:
request modifiers (strip_*, replace, delay) all apply, then the first answer fault that fires (at
most one answer fault fires per request). Stops on SIGTERM/SIGINT.
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.parse

HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "te",
       "upgrade", "trailer"}
ANSWER_FAULTS = ("503", "500", "reset", "short", "stall", "stall_body", "etag", "corrupt", "drop")
MODIFIERS = ("strip_if_match", "strip_range", "replace", "delay")
MAX_HEADER = 64 * 1024
CHUNK = 256 * 1024


class State:
    def __init__(self, seed):
        self.lock = threading.Lock()
        self.rules = []
        self.enforce_if_match = False
        self.fired = {}
        self.requests = {}
        self.rng = random.Random(seed)

    def set(self, cfg):
        rules = []
        for r in cfg.get("rules", []):
            a = str(r.get("action", ""))
            if a not in ANSWER_FAULTS + MODIFIERS:
                raise ValueError("unknown action %r" % a)
            k = r.get("kind", "any")
            if k not in ("range", "get", "head", "list", "put", "any"):
                raise ValueError("unknown kind %r" % k)
            rr = {"action": a, "kind": k, "key": r.get("key"), "prob": float(r.get("prob", 1.0)),
                  "count": r.get("count"), "skip": int(r.get("skip", 0)),
                  "seconds": float(r.get("seconds", 30)), "body_file": r.get("body_file"),
                  "seen": 0, "fired": 0}
            rr["key_re"] = re.compile(rr["key"]) if rr["key"] else None
            if a == "replace" and not rr["body_file"]:
                raise ValueError("replace needs body_file")
            rules.append(rr)
        with self.lock:
            self.rules = rules
            self.enforce_if_match = bool(cfg.get("enforce_if_match", False))
            self.fired = {}

    def snapshot(self):
        with self.lock:
            return {"rules": [{k: v for k, v in r.items() if k != "key_re"} for r in self.rules],
                    "enforce_if_match": self.enforce_if_match,
                    "fired": dict(self.fired), "requests": dict(self.requests)}

    def pick(self, kind, key):
        """The rules that fire on this request: at most one answer fault, then the modifiers
        (none when the answer fault never reaches the upstream: 503, 500, stall, drop)."""
        out = []
        with self.lock:
            self.requests[kind] = self.requests.get(kind, 0) + 1
            for modifiers in (False, True):
                if out and out[0]["action"] in ("503", "500", "stall", "drop"):
                    break
                for r in self.rules:
                    if (r["action"] in MODIFIERS) != modifiers:
                        continue
                    if r["kind"] not in ("any", kind):
                        continue
                    if r["key_re"] is not None and not r["key_re"].search(key):
                        continue
                    r["seen"] += 1
                    if r["seen"] <= r["skip"]:
                        continue
                    if r["count"] is not None and r["fired"] >= int(r["count"]):
                        continue
                    if r["prob"] < 1.0 and self.rng.random() >= r["prob"]:
                        continue
                    r["fired"] += 1
                    self.fired[r["action"]] = self.fired.get(r["action"], 0) + 1
                    out.append(dict(r))
                    if not modifiers:
                        break  # one answer fault per request
        return out


def s3_error(code, message):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message>'
            '<RequestId>FAULTPROXY%08X</RequestId></Error>' % (
                code, message, random.getrandbits(32))).encode()


class Closed(Exception):
    pass


class Handler(socketserver.StreamRequestHandler):
    rbufsize = 64 * 1024

    def setup(self):
        super().setup()
        self.upstream = None

    def finish(self):
        if self.upstream is not None:
            self.upstream.close()
        try:
            super().finish()
        except OSError:
            pass

    # ---- reading the client's request
    def read_line(self):
        line = self.rfile.readline(MAX_HEADER + 1)
        if len(line) > MAX_HEADER:
            raise Closed("header line too long")
        return line

    def read_request(self):
        line = self.read_line()
        if not line:
            return None
        while line in (b"\r\n", b"\n"):  # tolerate stray CRLF between requests
            line = self.read_line()
            if not line:
                return None
        parts = line.decode("latin-1").rstrip("\r\n").split(" ")
        if len(parts) != 3:
            raise Closed("bad request line %r" % line)
        method, target, version = parts
        headers = []
        total = 0
        while True:
            h = self.read_line()
            total += len(h)
            if total > MAX_HEADER:
                raise Closed("headers too long")
            if h in (b"\r\n", b"\n", b""):
                break
            name, _, value = h.decode("latin-1").partition(":")
            headers.append((name.strip(), value.strip()))
        return method, target, version, headers

    def read_body(self, headers):
        hd = {k.lower(): v for k, v in headers}
        if hd.get("expect", "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.wfile.flush()
        if "chunked" in hd.get("transfer-encoding", "").lower():
            body = bytearray()
            while True:
                size_line = self.read_line()
                if not size_line:
                    raise Closed("eof in chunked body")
                n = int(size_line.split(b";")[0].strip() or b"0", 16)
                if n == 0:
                    while self.read_line() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(body)
                body += self.rfile.read(n)
                self.read_line()
        n = int(hd.get("content-length", "0") or 0)
        body = self.rfile.read(n) if n else b""
        if len(body) != n:
            raise Closed("short request body")
        return body

    # ---- writing answers
    def send_head(self, status, reason, headers):
        out = ["HTTP/1.1 %d %s\r\n" % (status, reason)]
        out += ["%s: %s\r\n" % (k, v) for k, v in headers]
        out.append("\r\n")
        self.wfile.write("".join(out).encode("latin-1"))

    def send_simple(self, status, reason, body, ctype="application/xml", close=False):
        hs = [("Content-Type", ctype), ("Content-Length", str(len(body)))]
        if close:
            hs.append(("Connection", "close"))
        self.send_head(status, reason, hs)
        self.wfile.write(body)
        self.wfile.flush()

    def reset(self):
        try:
            self.wfile.flush()
        except OSError:
            pass
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()

    # ---- upstream
    def up(self):
        if self.upstream is None:
            self.upstream = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port,
                                                       timeout=120)
        return self.upstream

    def forward(self, method, target, headers, body):
        """Sends the request upstream (one retry on a stale keep-alive connection)."""
        for attempt in (1, 2):
            conn = self.up()
            try:
                conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
                for k, v in headers:
                    if k.lower() not in HOP and k.lower() != "content-length":
                        conn.putheader(k, v)
                if body or method in ("PUT", "POST"):
                    conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body if body else None)
                return conn.getresponse()
            except (http.client.HTTPException, OSError):
                conn.close()
                self.upstream = None
                if attempt == 2:
                    raise

    def upstream_etag(self, target, headers):
        path = urllib.parse.urlsplit(target).path
        conn = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port, timeout=30)
        try:
            conn.request("HEAD", path, headers={"Host": dict((k.lower(), v) for k, v in headers)
                                                 .get("host", "127.0.0.1")})
            r = conn.getresponse()
            r.read()
            return r.getheader("ETag") if r.status == 200 else None
        finally:
            conn.close()

    def replace(self, target, headers, body_file):
        path = urllib.parse.urlsplit(target).path
        with open(body_file, "rb") as f:
            data = f.read()
        conn = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port, timeout=60)
        try:
            conn.request("PUT", path, body=data, headers={
                "Host": dict((k.lower(), v) for k, v in headers).get("host", "127.0.0.1"),
                "Content-Length": str(len(data))})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                self.server.note("replace PUT %s -> %d" % (path, r.status))
        finally:
            conn.close()

    # ---- one connection
    def handle(self):
        try:
            while True:
                req = self.read_request()
                if req is None:
                    return
                if not self.one(*req):
                    return
        except Closed as e:
            self.server.note("closing a connection: %s" % e)
        except (OSError, http.client.HTTPException) as e:
            self.server.note("connection ended: %r" % e)

    def control(self, method, body):
        st = self.server.state
        if method == "POST":
            try:
                st.set(json.loads(body.decode() or "{}"))
            except (ValueError, TypeError) as e:
                self.send_simple(400, "Bad Request", ("%s\n" % e).encode(), "text/plain")
                return True
        self.send_simple(200, "OK", json.dumps(st.snapshot(), default=str).encode() + b"\n",
                         "application/json")
        return True

    def one(self, method, target, version, headers):
        body = self.read_body(headers)
        client_close = any(k.lower() == "connection" and v.lower() == "close" for k, v in headers)
        client_close |= version == "HTTP/1.0"
        split = urllib.parse.urlsplit(target)
        if split.path.startswith("/__fault__"):
            self.control(method, body)
            return not client_close
        parts = split.path.lstrip("/").split("/", 1)
        key = urllib.parse.unquote(parts[1]) if len(parts) > 1 else ""
        has_range = any(k.lower() == "range" for k, _ in headers)
        if method == "GET":
            kind = "list" if not key else ("range" if has_range else "get")
        else:
            kind = method.lower()
        fired = self.server.state.pick(kind, key)
        if self.server.verbose:
            rng = next((v for k, v in headers if k.lower() == "range"), "")
            self.server.note("%s %s %s %s%s" % (time.strftime("%H:%M:%S"), kind, key, rng,
                                                " -> " + ",".join(r["action"] for r in fired) if fired else ""))
        answer = next((r for r in fired if r["action"] in ANSWER_FAULTS), None)
        for r in fired:
            if r["action"] == "strip_if_match":
                headers = [(k, v) for k, v in headers if k.lower() != "if-match"]
            elif r["action"] == "strip_range":
                headers = [(k, v) for k, v in headers if k.lower() != "range"]
            elif r["action"] == "replace":
                self.replace(target, headers, r["body_file"])
            elif r["action"] == "delay":
                self.sleep(r["seconds"])
        if answer is not None and answer["action"] in ("503", "500"):
            if answer["action"] == "503":
                self.send_simple(503, "Slow Down", s3_error("SlowDown", "Please reduce your request rate."))
            else:
                self.send_simple(500, "Internal Server Error",
                                 s3_error("InternalError", "We encountered an internal error. Please try again."))
            return not client_close
        if answer is not None and answer["action"] == "drop":
            self.reset()
            return False
        if answer is not None and answer["action"] == "stall":
            self.sleep(answer["seconds"])
            return False
        if self.server.state.enforce_if_match and method in ("GET", "HEAD") and key:
            want = next((v for k, v in headers if k.lower() == "if-match"), None)
            if want is not None:
                have = self.upstream_etag(target, headers)
                if have is None or have.strip('"') != want.strip('"'):
                    self.send_simple(412, "Precondition Failed",
                                     s3_error("PreconditionFailed",
                                              "At least one of the pre-conditions you specified did not hold"))
                    return not client_close
        resp = self.forward(method, target, headers, body)
        return self.relay(method, resp, answer, client_close)

    def sleep(self, secs):
        end = time.monotonic() + secs
        while time.monotonic() < end and not self.server.stopping.is_set():
            time.sleep(min(0.2, end - time.monotonic()))

    def relay(self, method, resp, answer, client_close):
        action = answer["action"] if answer else None
        out = []
        length = None
        for k, v in resp.getheaders():
            lk = k.lower()
            if lk in HOP:
                continue
            if lk == "content-length":
                length = int(v)
            if lk == "etag" and action == "etag":
                v = '"%032x"' % random.getrandbits(128)
            out.append((k, v))
        chunked = length is None and method != "HEAD" and resp.status not in (204, 304)
        if chunked:
            out.append(("Transfer-Encoding", "chunked"))
        close = client_close or resp.will_close
        if close:
            out.append(("Connection", "close"))
        self.send_head(resp.status, resp.reason or "OK", out)
        if method == "HEAD" or resp.status in (204, 304):
            resp.read()
            self.wfile.flush()
            return not close
        # The body, streamed; faults that cut it act at half of it.
        half = (length // 2) if length else 0
        sent = 0
        flip_at = half if action == "corrupt" else -1
        cut = action in ("reset", "short", "stall_body")
        while True:
            data = resp.read(CHUNK)
            if not data:
                break
            if flip_at >= 0 and sent <= flip_at < sent + len(data):
                b = bytearray(data)
                b[flip_at - sent] ^= 0x5A
                data = bytes(b)
            if cut and sent + len(data) >= half:
                part = data[:max(0, half - sent)]
                if part:
                    self.wfile.write(part)
                self.wfile.flush()
                if action == "stall_body":
                    self.sleep(answer["seconds"])
                if action == "reset":
                    self.reset()
                resp.close()
                self.upstream.close()
                self.upstream = None
                return False
            if chunked:
                self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")
            else:
                self.wfile.write(data)
            sent += len(data)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        if self.server.verbose and method == "GET":
            self.server.note("%s   answered %d, %d bytes" % (time.strftime("%H:%M:%S"), resp.status, sent))
        if cut:  # an empty body: nothing to cut, the connection still ends
            return False
        return not close


class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, addr, upstream_port, seed, verbose):
        super().__init__(addr, Handler)
        self.upstream_port = upstream_port
        self.state = State(seed)
        self.stopping = threading.Event()
        self.verbose = verbose

    def note(self, msg):
        if self.verbose:
            print("fault_proxy: %s" % msg, file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream-port", type=int, required=True)
    ap.add_argument("--listen-port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--port-file", help="write the listening port here once ready")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    srv = Server(("127.0.0.1", args.listen_port), args.upstream_port, args.seed, args.verbose)
    port = srv.server_address[1]

    def stop(*_):
        srv.stopping.set()
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write("%d\n" % port)
        os.replace(args.port_file + ".tmp", args.port_file)
    print("fault_proxy: 127.0.0.1:%d -> 127.0.0.1:%d" % (port, args.upstream_port), flush=True)
    srv.serve_forever(poll_interval=0.2)
    srv.server_close()
    print("fault_proxy: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
