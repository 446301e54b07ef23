#!/usr/bin/env bash
# The main job: install what is missing, build, then run cnx end to end on
# this machine and print a summary. Today that is: a 256^3 synthetic dataset
# with ground truth and its montage tile set (cnx-synth), the tile set checked
# and recorded with a digest per tile (cnx-ingest --tiles), and the real ISBI
# 2012 stack ingested as an image and a segmentation layer (cnx-ingest).
# Outputs: out/demo/ (precomputed layers; point Neuroglancer at them).
# Environment: CNX_DEMO_SHAPE (default 256,256,256), CNX_DEMO_OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
shape=${CNX_DEMO_SHAPE:-256,256,256}
out=${CNX_DEMO_OUT:-$root/out/demo}
shared=${CNX_SHARED:-$root/../shared}

t0=$(date +%s.%N)
bash scripts/setup.sh release
bin=$root/build/bin
t_build=$(date +%s.%N)

rm -rf "$out"
mkdir -p "$out"
step() { # name, command...
  local name=$1; shift
  local s; s=$(date +%s.%N)
  echo "== $name"
  "$@"
  awk -v a="$s" -v b="$(date +%s.%N)" -v n="$name" 'BEGIN{printf "%s\t%.1f\n", n, b-a}' >> "$out/times.tsv"
}

step "synthesise $shape" "$bin/cnx-synth" --out "$out/synth" --shape "$shape" --seed 1
step "record tile set" "$bin/cnx-ingest" --tiles "$out/synth/tiles/tiles.json" --out "$out/tiles/v1"
if [ -d "$shared/data/isbi2012" ]; then
  step "ingest ISBI image" "$bin/cnx-ingest" --out "$out/isbi/image" --resolution 4,4,50 \
    "$shared"/data/isbi2012/image/*.png
  step "ingest ISBI labels" "$bin/cnx-ingest" --out "$out/isbi/label" --resolution 4,4,50 \
    --segmentation "$shared"/data/isbi2012/label/*.png
else
  echo "(no $shared/data/isbi2012: skipping the ISBI ingest)"
fi

echo
echo "== summary"
awk -v a="$t0" -v b="$t_build" 'BEGIN{printf "build (incl. install)  %.1f s\n", b-a}'
while IFS=$'\t' read -r name secs; do printf '%-22s %s s\n' "$name" "$secs"; done < "$out/times.tsv"
echo
printf '%-16s %-13s %-24s %-8s %-13s %7s %11s\n' layer type encoding dtype size chunks bytes
for info in $(find "$out" -name info -not -path '*/tiles/*' | sort); do
  dir=$(dirname "$info")
  python3 - "$info" "$dir" "$out" <<'PY'
import json, os, sys
info = json.load(open(sys.argv[1])); d = sys.argv[2]; out = sys.argv[3]
s = info["scales"][0]
files = [f for f in os.listdir(os.path.join(d, s["key"]))]
size = sum(os.path.getsize(os.path.join(d, s["key"], f)) for f in files)
print("%-16s %-13s %-24s %-8s %-13s %7d %11d" % (os.path.relpath(d, out),
      info["type"], s["encoding"], info["data_type"],
      "x".join(map(str, s["size"])), len(files), size))
PY
done
if [ -f "$out/synth/gt-synapses.json" ]; then
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); s=d if isinstance(d,list) else d.get('synapses',[]); print('ground-truth synapses: %d' % len(s))" "$out/synth/gt-synapses.json"
fi
python3 -c "import json,sys; t=json.load(open(sys.argv[1])); print('tile set: %d sections, %d tiles, each recorded with its sha256' % (len(t['sections']), sum(len(s['tiles']) for s in t['sections'])))" "$out/tiles/v1/tiles.json"
python3 - "$out/synth" <<'PY'
import hashlib, os, sys
root = sys.argv[1]; h = hashlib.sha256(); n = 0
for dirpath, dirs, names in os.walk(root):
    dirs.sort()
    for name in sorted(names):
        p = os.path.join(dirpath, name)
        h.update(os.path.relpath(p, root).encode() + b"\0")
        h.update(hashlib.sha256(open(p, "rb").read()).digest())
        n += 1
print("synthetic dataset digest (%d files): sha256:%s (same seed, same digest)" % (n, h.hexdigest()))
PY
awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "total %.1f s\n", b-a}'
echo "layers are under $out (Neuroglancer: serve the directory over HTTP and add precomputed://http://HOST:PORT/<layer>)"
