#!/usr/bin/env bash
# The main job: install what is missing, build, then run cnx end to end on
# this machine and print a summary. Today that is: a 256^3 synthetic dataset
# with ground truth and its montage tile set (cnx-synth), the tile set checked
# and recorded with a digest per tile (cnx-ingest --tiles), the real ISBI
# 2012 stack ingested as an image and a segmentation layer (cnx-ingest), and
# the synthetic image and ground truth downsampled one level through the
# embedded Kafka stack (cnx-broker, two cnx-downsample workers, cnx-submit),
# every signed manifest verified with the openssl CLI.
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

# The Kafka stack: broker, two downsample workers, tasks for the synthetic
# image and ground truth, signed manifests verified with openssl alone.
echo "== downsample through cnx-broker and two cnx-downsample workers"
ds_start=$(date +%s.%N)
"$bin/cnx-keygen" --out "$out/keys" >/dev/null
"$bin/cnx-broker" --partitions 4 >"$out/broker.out" 2>"$out/broker.log" &
broker=$!
workers=()
cleanup() { kill "${workers[@]}" "$broker" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 100); do boot=$(head -n1 "$out/broker.out" 2>/dev/null || true); [ -n "$boot" ] && break; sleep 0.1; done
dirty=""
"$bin/cnx-downsample" --version | grep -q -- '-dirty$' && dirty=--allow-dirty
for i in 1 2; do
  "$bin/cnx-downsample" --brokers "$boot" --key "$out/keys/cnx.key" --instance "demo-$i" \
    --metrics-port $((9460 + i)) --session-timeout-ms 6000 $dirty --quiet \
    2>>"$out/workers.log" &
  workers+=($!)
done
# The development broker settles a new group in a few seconds; submitting
# after that spares the first tasks a rebalance.
sleep 5
ntasks=0
for layer in image gt; do
  n=$("$bin/cnx-submit" --dry-run --layer "file://$out/synth/$layer" | wc -l)
  "$bin/cnx-submit" --brokers "$boot" --layer "file://$out/synth/$layer" --request "demo-$layer"
  ntasks=$((ntasks + n))
done
done_tasks=0
for _ in $(seq 600); do
  done_tasks=$(kcat -b "$boot" -C -t cnx.events -o beginning -e -q 2>/dev/null | { grep '"type":"succeeded"' || true; } | grep -o '"request":"demo-[a-z]*","roi":{[^}]*}' | sort -u | wc -l || true)
  [ -t 2 ] && printf '\rdownsample tasks done: %d/%d' "$done_tasks" "$ntasks" >&2
  [ "$done_tasks" -ge "$ntasks" ] && break
  sleep 0.5
done
echo >&2
kcat -b "$boot" -C -t cnx.lineage -o beginning -e -q 2>/dev/null >"$out/lineage.jsonl"
mkdir -p "$out/envelopes"
split -l 1 -d -a 4 "$out/lineage.jsonl" "$out/envelopes/env-"
verified=$(bash acceptance/verify_openssl.sh "$out/keys/cnx.pub" "$out"/envelopes/env-* 2>/dev/null | grep -c '^OK' || true)
metrics=$(python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9461/metrics', timeout=2).read().decode())" 2>/dev/null | grep '^cnx_tasks_total.*succeeded' || true)
cleanup
trap - EXIT
awk -v a="$ds_start" -v b="$(date +%s.%N)" 'BEGIN{printf "downsample (Kafka)\t%.1f\n", b-a}' >>"$out/times.tsv"

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
echo "downsample: $done_tasks/$ntasks tasks through Kafka; $(wc -l <"$out/lineage.jsonl") signed manifests, $verified verified with the openssl CLI alone"
echo "worker demo-1 metrics: ${metrics:-(none)}"
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
