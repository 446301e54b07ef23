#!/usr/bin/env bash
# Neuroglancer screenshots of a dataset's aligned and stitched image layers
# (the xz view shows what alignment does: stitched sections jump left and
# right from one z to the next, aligned ones line up), taken in headless
# Chromium. Not in CI: it needs Debian's chromium, the npm packages
# playwright-core and @janelia-flyem/neuroglancer (its packed tarball's
# dist/min, a prebuilt Neuroglancer), all kept outside the repository.
#
# usage: bench/ng_screenshot.sh DATASET [OUTDIR] [LAYOUT]
#   DATASET  a directory holding aligned/v1 and stitched/v1 (e.g. a work
#            directory of acceptance/align_test.sh kept with KEEP_WORK=1:
#            WORK/data; bench/align_synth.sh with ALIGN_SYNTH_KEEP=1)
#   OUTDIR   default /tmp: writes OUTDIR/ng-aligned-LAYOUT.png and
#            OUTDIR/ng-stitched-LAYOUT.png
#   LAYOUT   xz (default), xy or yz
# Env: NG_DIR (default /tmp/ng: node_modules/playwright-core and
# package/dist/min are installed there on first use; apt-get install
# chromium if /usr/bin/chromium is missing), NG_PORT (8123), CHROMIUM
# (/usr/bin/chromium), NG_POSITION (X,Y,Z voxels; default the middle of
# DATASET/image, the true volume, else of aligned/v1: the same point and
# zoom for both layers), NG_SETTLE_MS (1000: after Neuroglancer is ready).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
DATA=$(cd "${1:?usage: ng_screenshot.sh DATASET [OUTDIR] [LAYOUT]}" && pwd)
OUT=${2:-/tmp}
LAYOUT=${3:-xz}
NG=${NG_DIR:-/tmp/ng}
PORT=${NG_PORT:-8123}
for l in aligned/v1 stitched/v1; do
  [ -f "$DATA/$l/info" ] || { echo "ng_screenshot: $DATA/$l/info missing" >&2; exit 1; }
done

# Tools, outside the repository.
[ -x "${CHROMIUM:-/usr/bin/chromium}" ] || apt-get install -y chromium >/dev/null
mkdir -p "$NG"
if [ ! -d "$NG/node_modules/playwright-core" ]; then
  (cd "$NG" && { [ -f package.json ] || npm init -y >/dev/null; } &&
    npm install --no-audit --no-fund playwright-core@1 >/dev/null)
fi
if [ ! -f "$NG/package/dist/min/index.html" ]; then
  (cd "$NG" && npm pack @janelia-flyem/neuroglancer >/dev/null &&
    tar xzf janelia-flyem-neuroglancer-*.tgz package/dist/min)
fi

# One origin: /ng/ is Neuroglancer, /data/ the dataset (CORS headers
# anyway, so another viewer can be pointed at it).
ROOT=$(mktemp -d /tmp/ng-serve.XXXXXX)
ln -s "$NG/package/dist/min" "$ROOT/ng"
ln -s "$DATA" "$ROOT/data"
python3 - "$ROOT" "$PORT" >"$ROOT.log" 2>&1 <<'EOF' &
import functools, http.server, sys
class H(http.server.SimpleHTTPRequestHandler):
    def end_headers(self):
        self.send_header("Access-Control-Allow-Origin", "*")
        super().end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(
    ("127.0.0.1", int(sys.argv[2])),
    functools.partial(H, directory=sys.argv[1])).serve_forever()
EOF
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null; rm -rf "$ROOT" "$ROOT.log"' EXIT
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$PORT/ng/index.html" >/dev/null && break
  sleep 0.1
done
# One position and one zoom for both: the larger extent of the two layers.
read -r POS FIT < <(python3 - "$DATA" "$LAYOUT" <<'EOF'
import json, os, sys
d, lay = sys.argv[1], sys.argv[2]
ax = {"xy": (0, 1), "xz": (0, 2), "yz": (1, 2)}[lay]
info = lambda l: json.load(open(os.path.join(d, l, "info")))["scales"][0]
c = info("image" if os.path.exists(os.path.join(d, "image", "info"))
         else "aligned/v1")
pos = ",".join("%g" % (c["voxel_offset"][k] + c["size"][k] / 2) for k in range(3))
fit = max(info(l)["size"][k] for l in ("aligned/v1", "stitched/v1") for k in ax)
print(pos, fit)
EOF
)
POS=${NG_POSITION:-$POS}
status=0
for l in aligned stitched; do
  NODE_PATH=$NG/node_modules node "$SRC/bench/ng_screenshot.js" \
    "http://127.0.0.1:$PORT/ng/index.html" \
    "http://127.0.0.1:$PORT/data/$l/v1" "$OUT/ng-$l-$LAYOUT.png" "$LAYOUT" \
    "$POS" "$FIT" || status=1
done
exit $status
