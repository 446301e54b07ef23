#!/usr/bin/env python3
"""A fault-injecting reverse HTTP proxy for the object-store tests.

    faultproxy.py --target http://127.0.0.1:PORT --port-file F --log F.jsonl
                  [--faults 503,429,reset,truncate,stall,corrupt-get,corrupt-put]
                  [--every N | --rate P] [--seed S] [--skip N] [--limit N]
                  [--stall-s S] [--force STATUS[:METHOD]:REGEX]...
                  [--access-log F] [--max-seconds S]
                  [--outage-file F [--outage-kind 503|reset]]

Listens on 127.0.0.1 (port 0: the kernel picks; the port is written to
--port-file once listening) and forwards every request to --target (the S3
server) on one upstream connection per client connection, Host header and
body as the client sent them (s3rver does not check signatures).

Requests are numbered 1, 2, ... in arrival order. Request n is scheduled a
fault when n > --skip and n is a multiple of --every (or, with --rate P, a
draw of random.Random(seed, n) falls below P), until --limit faults. The
kind is the one of --faults that applies to the request and has been
injected least so far (ties: --faults order), so every kind turns up after
a few scheduled requests. Kinds:
  503, 429     answer with that status and an S3 XML error (SlowDown), not
               forwarded (429 carries Retry-After: 0)
  reset        close the client connection with a TCP RST: before forwarding
               on odd occurrences, after the server did the request (and so
               after e.g. a PUT took effect) on even ones
  stall        hold the connection silent for --stall-s (set it longer than
               the client's timeout), then close it; not forwarded
  truncate     (GET) forward, then announce the full Content-Length, send
               half of the body and close
  corrupt-get  (GET of an object: no query string) forward, flip one byte
               of the response body
  corrupt-put  (PUT with a body) flip one byte of the request body; then,
               as S3 does and s3rver 3.7 does not, answer 400 BadDigest
               (XAmzContentSHA256Mismatch) if the request carries a
               Content-MD5, x-amz-content-sha256 (hex) or
               x-amz-checksum-sha256 the damaged body fails; otherwise
               forward the damaged body (the log says which)
A response-dependent kind whose response turns out to have no body to
damage (not a 200, or under 2 bytes) is owed: the next request it applies to
gets it. --force rules run before the schedule, on every matching request:
STATUS:REGEX (or STATUS:METHOD:REGEX) answers STATUS (403 AccessDenied, 404
NoSuchKey, other: InternalError) to requests whose path (with the query)
matches REGEX (re.search), unforwarded.
--outage-file F simulates the store being down: while the file F exists,
every request (before --force and the schedule) is answered 503 SlowDown
(--outage-kind 503, the default) or has its connection reset (reset),
unforwarded, and logged with kind "outage". A test opens the outage with
`touch F` and closes it with `rm F`; the proxy looks at F on every request.
The byte flipped is chosen by random.Random(seed, n): a run is reproducible
given the order requests arrive in. Every injected fault is one JSON line in
--log: {"n", "t", "kind", "method", "path", ...}. The proxy exits after
--max-seconds (default 600) whatever is in flight. Python 3 stdlib only.
"""
import argparse
import base64
import hashlib
import http.client
import http.server
import json
import os
import re
import socket
import struct
import sys
import threading
import time
import urllib.parse

KINDS = ("503", "429", "reset", "truncate", "stall", "corrupt-get",
         "corrupt-put")
HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
       "proxy-authorization", "te", "trailer", "transfer-encoding",
       "upgrade", "expect"}
CODES = {403: "AccessDenied", 404: "NoSuchKey", 429: "SlowDown",
         503: "SlowDown"}


def checksum_refusal(headers, body):
    """S3's integrity checks of a PUT body: the error code, or None."""
    md5 = headers.get("Content-MD5")
    if md5 and base64.b64encode(hashlib.md5(body).digest()).decode() != md5:
        return "BadDigest"
    sha = headers.get("x-amz-content-sha256", "")
    if re.fullmatch(r"[0-9a-fA-F]{64}", sha) and \
            hashlib.sha256(body).hexdigest() != sha.lower():
        return "XAmzContentSHA256Mismatch"
    c = headers.get("x-amz-checksum-sha256")
    if c and base64.b64encode(hashlib.sha256(body).digest()).decode() != c:
        return "BadDigest"
    return None


class Plan:
    """The schedule, shared by the handler threads (one lock for all)."""

    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.n = 0
        self.scheduled = 0
        self.injected = {k: 0 for k in args.faults}
        self.owed = {k: 0 for k in args.faults}
        self.force = []
        for rule in args.force:
            status, _, rest = rule.partition(":")
            method = None
            m = re.match(r"(GET|PUT|HEAD|POST|DELETE):", rest)
            if m:
                method, rest = m.group(1), rest[m.end():]
            self.force.append((int(status), method, re.compile(rest)))
        self.log = open(args.log, "a", buffering=1) if args.log else None
        self.access = (open(args.access_log, "a", buffering=1)
                       if args.access_log else None)
        self.t0 = time.monotonic()

    def rng(self, n):
        import random
        return random.Random(self.args.seed * 1000003 + n)

    def number(self):
        with self.lock:
            self.n += 1
            return self.n

    def forced(self, method, target):
        for status, m, rx in self.force:
            if (m is None or m == method) and rx.search(target):
                return status
        return None

    def choose(self, n, method, has_query, body_len):
        """The kind for request n (None: pass through)."""
        def applies(kind):
            if kind in ("truncate",):
                return method == "GET"
            if kind == "corrupt-get":
                return method == "GET" and not has_query
            if kind == "corrupt-put":
                return method == "PUT" and body_len > 0
            return True
        with self.lock:
            for kind in self.args.faults:  # owed ones first
                if self.owed[kind] and applies(kind):
                    self.owed[kind] -= 1
                    return kind
            if not self.args.faults or n <= self.args.skip:
                return None
            if self.args.limit and self.scheduled >= self.args.limit:
                return None
            if self.args.rate is not None:
                due = self.rng(n).random() < self.args.rate
            else:
                due = n % self.args.every == 0
            if not due:
                return None
            cands = [k for k in self.args.faults if applies(k)]
            if not cands:
                return None
            self.scheduled += 1
            return min(cands, key=lambda k: (self.injected[k],
                                             self.args.faults.index(k)))

    def owe(self, kind):
        with self.lock:
            self.owed[kind] += 1

    def record(self, n, kind, method, target, **extra):
        with self.lock:
            if kind in self.injected:
                self.injected[kind] += 1
            occurrence = self.injected.get(kind, 0)
            if self.log:
                line = dict(n=n, t=round(time.monotonic() - self.t0, 3),
                            kind=kind, method=method, path=target, **extra)
                self.log.write(json.dumps(line, sort_keys=True) + "\n")
            return occurrence

    def note(self, n, method, target, status, length):
        if self.access:
            with self.lock:
                self.access.write("%d %.3f %s %s %s %d\n" % (
                    n, time.monotonic() - self.t0, method, target, status,
                    length))


def error_xml(status, target, code=None):
    code = code or CODES.get(status, "InternalError")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
            '<Message>injected by faultproxy</Message><Resource>%s</Resource>'
            '</Error>' % (code, target.split("?")[0])).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "faultproxy"
    upstream = None  # per connection: this handler lives as long as it

    def log_message(self, fmt, *args):  # quiet: the logs are ours
        pass

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def reset(self):
        """Close the client connection with an RST (SO_LINGER 0)."""
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass
        self.close_connection = True

    def reply(self, status, headers, body, announce=None, close=False):
        self.send_response_only(status)
        for k, v in headers:
            if k.lower() not in HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length",
                         str(len(body) if announce is None else announce))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
        self.wfile.flush()

    def forward(self, body):
        """The request upstream: (status, headers, body)."""
        target = self.server.target
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in HOP}
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        for attempt in (0, 1):  # a kept-alive upstream may have gone away
            if self.upstream is None:
                self.upstream = http.client.HTTPConnection(
                    target.hostname, target.port or 80, timeout=120)
            try:
                self.upstream.putrequest(self.command, self.path,
                                         skip_host=True,
                                         skip_accept_encoding=True)
                for k, v in headers.items():
                    self.upstream.putheader(k, v)
                self.upstream.endheaders(body if body else None)
                resp = self.upstream.getresponse()
                data = resp.read()
                if resp.will_close:
                    self.upstream.close()
                    self.upstream = None
                return resp.status, resp.getheaders(), data
            except (ConnectionError, http.client.HTTPException, OSError):
                self.upstream.close()
                self.upstream = None
                if attempt:
                    raise

    def handle_one(self):
        try:
            self.serve_one()
        except Exception as e:  # a bug here must not pass for a fault
            sys.stderr.write("faultproxy: %s %s: %r\n" % (self.command,
                                                         self.path, e))
            try:
                self.reply(500, [("Content-Type", "text/plain")],
                           b"faultproxy: internal error\n", close=True)
            except OSError:
                pass

    def serve_one(self):
        plan = self.server.plan
        n = plan.number()
        method, target = self.command, self.path
        body = self.read_body()
        if self.server.outage_file and \
                os.path.exists(self.server.outage_file):
            plan.record(n, "outage", method, target,
                        answer=self.server.outage_kind)
            plan.note(n, method, target, "outage", 0)
            if self.server.outage_kind == "reset":
                self.reset()
            else:
                self.reply(503, [("Content-Type", "application/xml")],
                           error_xml(503, target))
            return
        status = plan.forced(method, target)
        if status is not None:
            plan.record(n, "force-%d" % status, method, target)
            plan.note(n, method, target, status, 0)
            self.reply(status, [("Content-Type", "application/xml")],
                       error_xml(status, target))
            return
        kind = plan.choose(n, method, "?" in target, len(body))
        if kind in ("503", "429"):
            plan.record(n, kind, method, target)
            plan.note(n, method, target, kind, 0)
            hdrs = [("Content-Type", "application/xml")]
            if kind == "429":
                hdrs.append(("Retry-After", "0"))
            self.reply(int(kind), hdrs, error_xml(int(kind), target))
            return
        if kind == "stall":
            plan.record(n, kind, method, target, seconds=self.server.stall_s)
            plan.note(n, method, target, "stall", 0)
            time.sleep(self.server.stall_s)
            self.reset()
            return
        if kind == "reset":
            occ = plan.injected.get("reset", 0) + 1
            if occ % 2 == 1:
                plan.record(n, kind, method, target, phase="before")
                plan.note(n, method, target, "reset", 0)
                self.reset()
                return
        if kind == "corrupt-put":
            at = plan.rng(n).randrange(len(body))
            body = body[:at] + bytes([body[at] ^ 0x01]) + body[at + 1:]
            refused = checksum_refusal(self.headers, body)
            plan.record(n, kind, method, target, offset=at, length=len(body),
                        outcome=refused or "forwarded")
            if refused:
                plan.note(n, method, target, 400, 0)
                self.reply(400, [("Content-Type", "application/xml")],
                           error_xml(400, target, refused))
                return
        try:
            status, headers, data = self.forward(body)
        except (ConnectionError, http.client.HTTPException, OSError) as e:
            plan.note(n, method, target, "upstream-error", 0)
            self.reply(502, [("Content-Type", "text/plain")],
                       ("upstream: %s\n" % e).encode(), close=True)
            return
        plan.note(n, method, target, status, len(data))
        if kind == "reset":
            plan.record(n, kind, method, target, phase="after",
                        status=status)
            self.reset()
            return
        if kind in ("truncate", "corrupt-get"):
            if status != 200 or len(data) < 2:
                plan.owe(kind)
            elif kind == "truncate":
                half = len(data) // 2
                plan.record(n, kind, method, target, sent=half,
                            length=len(data))
                self.reply(status, headers, data[:half], announce=len(data),
                           close=True)
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            else:
                at = plan.rng(n).randrange(len(data))
                data = data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]
                plan.record(n, kind, method, target, offset=at,
                            length=len(data))
        self.reply(status, headers, data,
                   announce=(None if method != "HEAD" else
                             dict((k.lower(), v) for k, v in headers)
                             .get("content-length", 0)))

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = handle_one

    def finish(self):
        if self.upstream is not None:
            self.upstream.close()
        try:
            super().finish()
        except OSError:
            pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True,
                    help="http://host:port of the server to forward to")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", help="write the listening port here")
    ap.add_argument("--log", help="one JSON line per injected fault")
    ap.add_argument("--access-log", help="one line per request")
    ap.add_argument("--faults", default="",
                    help="comma-separated kinds: " + ",".join(KINDS))
    ap.add_argument("--every", type=int, default=0)
    ap.add_argument("--rate", type=float, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--skip", type=int, default=0,
                    help="schedule nothing for the first N requests")
    ap.add_argument("--limit", type=int, default=0,
                    help="at most N scheduled faults (0: no limit)")
    ap.add_argument("--stall-s", type=float, default=10.0)
    ap.add_argument("--force", action="append", default=[],
                    metavar="STATUS[:METHOD]:REGEX")
    ap.add_argument("--max-seconds", type=float, default=600.0)
    ap.add_argument("--outage-file", default=None,
                    help="while this file exists, answer every request "
                    "with --outage-kind, unforwarded")
    ap.add_argument("--outage-kind", choices=("503", "reset"), default="503")
    args = ap.parse_args()
    args.faults = [k for k in args.faults.split(",") if k]
    for k in args.faults:
        if k not in KINDS:
            ap.error("unknown fault kind %r (kinds: %s)" % (k, ",".join(KINDS)))
    if args.faults and not args.every and args.rate is None:
        ap.error("--faults needs --every N or --rate P")
    if args.every < 0 or (args.rate is not None and not 0 <= args.rate <= 1):
        ap.error("--every must be >= 1 and --rate in [0, 1]")
    for rule in args.force:
        if not re.match(r"\d{3}:.", rule):
            ap.error("--force takes STATUS[:METHOD]:REGEX, not %r" % rule)
    target = urllib.parse.urlsplit(args.target)
    if target.scheme != "http" or not target.hostname:
        ap.error("--target must be http://host:port")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.plan = Plan(args)
    server.target = target
    server.stall_s = args.stall_s
    server.outage_file = args.outage_file
    server.outage_kind = args.outage_kind
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % server.server_address[1])
        os.replace(tmp, args.port_file)
    timer = threading.Timer(args.max_seconds, lambda: os._exit(0))
    timer.daemon = True
    timer.start()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
