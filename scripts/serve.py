#!/usr/bin/env python3
"""Serve a directory of Neuroglancer precomputed layers over HTTP, with the
CORS header a browser needs to let Neuroglancer (served from another
origin) read them.

    python3 scripts/serve.py DIR [--port 8080] [--bind 127.0.0.1]

Then add a layer in Neuroglancer as precomputed://http://HOST:PORT/<layer>,
e.g. precomputed://http://127.0.0.1:8080/synth/segmentation/v1. Files are
served as they are (no gzip: cnx writes plain chunks). A GET with one
byte range ("Range: bytes=A-B", "bytes=A-", "bytes=-N") gets 206 and those
bytes: Neuroglancer reads multi-resolution mesh fragments and sharded
layers that way; a range past the end gets 416. Read-only: GET and HEAD
only; nothing outside DIR is served (the standard library's path
handling). --port 0 lets the kernel pick the port (printed). Stops on
Ctrl-C.
"""
import argparse
import functools
import http.server
import os
import re
import sys

RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class CORSHandler(http.server.SimpleHTTPRequestHandler):
    def end_headers(self):
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "Range")
        self.send_header("Access-Control-Expose-Headers", "Content-Range, Content-Length")
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def send_head(self):
        spec = self.headers.get("Range")
        m = RANGE.match(spec.strip()) if spec else None
        if m is None or m.group(1) == m.group(2) == "":
            self.range = None
            return super().send_head()
        path = self.translate_path(self.path)
        if os.path.isdir(path):
            self.range = None
            return super().send_head()
        try:
            f = open(path, "rb")
        except OSError:
            self.send_error(404, "File not found")
            return None
        size = os.fstat(f.fileno()).st_size
        if m.group(1) == "":
            start, end = max(0, size - int(m.group(2))), size - 1
        else:
            start = int(m.group(1))
            end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
        if start >= size or end < start:
            f.close()
            self.send_response(416)
            self.send_header("Content-Range", "bytes */%d" % size)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        f.seek(start)
        self.range = end - start + 1
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.send_header("Content-Length", str(self.range))
        self.end_headers()
        return f

    def copyfile(self, source, outputfile):
        if getattr(self, "range", None) is None:
            return super().copyfile(source, outputfile)
        left = self.range
        while left > 0:
            buf = source.read(min(left, 1 << 16))
            if not buf:
                break
            outputfile.write(buf)
            left -= len(buf)

    def do_OPTIONS(self):
        self.send_response(204)
        self.end_headers()

    def log_message(self, fmt, *args):
        if not self.server.quiet:
            super().log_message(fmt, *args)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    handler = functools.partial(CORSHandler, directory=a.dir)
    try:
        server = http.server.ThreadingHTTPServer((a.bind, a.port), handler)
    except OSError as e:
        print("serve.py: cannot listen on %s:%d: %s" % (a.bind, a.port, e),
              file=sys.stderr)
        return 1
    server.quiet = a.quiet
    print("serving %s on http://%s:%d/ (CORS: any origin); Ctrl-C stops"
          % (a.dir, a.bind, server.server_address[1]), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
