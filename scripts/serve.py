#!/usr/bin/env python3
"""Serve a directory of Neuroglancer precomputed layers over HTTP, with the
CORS header a browser needs to let Neuroglancer (served from another
origin) read them.

    python3 scripts/serve.py DIR [--port 8080] [--bind 127.0.0.1]

Then add a layer in Neuroglancer as precomputed://http://HOST:PORT/<layer>,
e.g. precomputed://http://127.0.0.1:8080/synth/segmentation/v1. Files are
served as they are (no gzip: cnx writes plain chunks). Read-only: GET and
HEAD only; nothing outside DIR is served (the standard library's path
handling). Stops on Ctrl-C.
"""
import argparse
import functools
import http.server
import sys


class CORSHandler(http.server.SimpleHTTPRequestHandler):
    def end_headers(self):
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "Range")
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

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
