#!/usr/bin/python3
"""A fake EC2 instance metadata service (IMDSv2 only) on 127.0.0.1, for test_credentials.sh.

The real token dance: PUT /latest/api/token with X-aws-ec2-metadata-token-ttl-seconds gives a
session token; every metadata GET must carry it in X-aws-ec2-metadata-token, else 401. The role
listing names one role; its credentials (JSON, Code "Success") expire LIFE seconds after each
fetch. Every request is appended to LOG as "METHOD PATH STATUS".

  fake_imds.py PORT_FILE LOG --key S3RVER --secret S3RVER [--life 16]
"""
import argparse
import datetime
import http.server
import json
import secrets
import threading

ROLE = "e2e-role"
BASE = "/latest/meta-data/iam/security-credentials/"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port_file")
    ap.add_argument("log")
    ap.add_argument("--key", required=True)
    ap.add_argument("--secret", required=True)
    ap.add_argument("--life", type=int, default=16)
    args = ap.parse_args()
    tokens = set()
    lock = threading.Lock()
    fetches = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def answer(self, status, body=b"", ctype="text/plain"):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            with lock, open(args.log, "a") as f:
                f.write("%s %s %d\n" % (self.command, self.path, status))

        def do_PUT(self):
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            if self.path != "/latest/api/token":
                return self.answer(404)
            if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return self.answer(400)
            tok = secrets.token_urlsafe(24)
            with lock:
                tokens.add(tok)
            self.answer(200, tok.encode())

        def do_GET(self):
            with lock:
                ok = self.headers.get("X-aws-ec2-metadata-token") in tokens
            if not ok:
                return self.answer(401)
            if self.path == BASE:
                return self.answer(200, (ROLE + "\n").encode())
            if self.path == BASE + ROLE:
                with lock:
                    fetches[0] += 1
                    n = fetches[0]
                exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
                    seconds=args.life)
                doc = {
                    "Code": "Success",
                    "LastUpdated": datetime.datetime.now(datetime.timezone.utc).strftime(
                        "%Y-%m-%dT%H:%M:%SZ"),
                    "Type": "AWS-HMAC",
                    "AccessKeyId": args.key,
                    "SecretAccessKey": args.secret,
                    "Token": "imds-session-token-%d" % n,
                    "Expiration": exp.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
                return self.answer(200, json.dumps(doc).encode(), "application/json")
            self.answer(404)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    import os
    os.rename(args.port_file + ".tmp", args.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
