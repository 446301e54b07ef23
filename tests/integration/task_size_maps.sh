#!/usr/bin/env bash
# Tasks of several chunks for the downsample stage: a chunk's bytes do not
# depend on the task size. A 256x256x128 cnx-synth image (128^3 chunks)
# goes through workflows/pyramid.json twice on the real stack (broker,
# controller, one downsample worker): with task_size one input chunk per
# level (ds1 128^3 on the image, ds2 64^3 on ds1's 64^3 chunks) into
# pyramid/v1, and with task_size 256^3 for both levels (ds1: 2x2x1 input
# chunks, ds2: 2x2x1 of ds1's chunks, each one task of 4 output chunks)
# into pyramid/v2. Checked:
#  1. both requests done, with 4 tasks per level and with 1;
#  2. every object of v1 (both scales' chunks, info) exists in v2 with the
#     same bytes, and nothing else (lineage manifests name their tasks and
#     are not compared);
#  3. the chunks of v2's first scale (ds1's) read back with numpy (x fastest) are
#     the 2x2x2 block means of the image, rounded half up: the bytes do not
#     only agree, they are the downsampled image.
# The segment, segment-relabel, mesh and synapses stages are checked the
# same way by segment_task_size.sh.
source "${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}/acceptance/lib.sh"
DATA=$WORK/data
for tool in kcat sqlite3 openssl; do
  command -v "$tool" >/dev/null || { echo "task_size_maps.sh: $tool is not installed" >&2; exit 1; }
done
"$PY" -c 'import numpy' 2>/dev/null || { echo "task_size_maps.sh: numpy missing: skipped"; exit 77; }

"$BIN/cnx-synth" --out "$DATA" --shape 256,256,128 --seed 5 --quiet >/dev/null

mkdir -p "$WORK/wf"
"$PY" - "$SRC/workflows/pyramid.json" "$WORK/wf" <<'PY'
import json, sys
src, out = sys.argv[1], sys.argv[2]
def variant(name, version, sizes):
    wf = json.load(open(src))
    wf["name"] = name
    for st, size in zip(wf["stages"], sizes):
        st["output"]["layer"] = st["output"]["layer"].replace("/v1", "/v%d" % version)
        st["task_size"] = [size] * 3
    json.dump(wf, open("%s/%s.json" % (out, name), "w"), indent=1)
variant("pyr-one", 1, [128, 64])
variant("pyr-eight", 2, [256, 256])
PY

start_broker 2
start_controller
start_stage_worker cnx-downsample downsample ds

tasks_of() { jq_py "$WORK/$1.json" '[(s["stage"], s["done"]) for s in d["stages"]]'; }

request_over 0,0,0,256,256,128 300 pyr-one one
check "one chunk per task: done (rc $RC)" [ "$RC" -eq 0 ]
check "one chunk per task: 4 ds1 tasks, 4 ds2 tasks ($(tasks_of one))" \
  [ "$(tasks_of one)" = "[('ds1', 4), ('ds2', 4)]" ]
request_over 0,0,0,256,256,128 300 pyr-eight eight
check "256^3 tasks: done (rc $RC)" [ "$RC" -eq 0 ]
check "256^3 tasks: 1 ds1 task, 1 ds2 task ($(tasks_of eight))" \
  [ "$(tasks_of eight)" = "[('ds1', 1), ('ds2', 1)]" ]
[ "$RC" -eq 0 ] || { tail -n 20 "$WORK"/*.log "$WORK/eight.err" >&2 || true; }

check "pyramid: both scales' chunks and the info byte-identical across task sizes" \
  same_tree "$DATA/pyramid/v1" "$DATA/pyramid/v2"
check "the first scale of v2 is the 2x2x2 block mean of the image (numpy)" "$PY" - "$DATA" <<'PY'
import json, os, sys
import numpy as np
root = sys.argv[1]
def read(layer, scale=0):
    info = json.load(open(os.path.join(root, layer, "info")))
    sc = info["scales"][scale]
    assert sc["encoding"] == "raw", sc["encoding"]
    dt = np.dtype(info["data_type"]).newbyteorder("<")
    vol = np.zeros(sc["size"][::-1], dt)
    d = os.path.join(root, layer, sc["key"])
    n = 0
    for name in os.listdir(d):
        if name.startswith("."):
            continue
        (x0, x1), (y0, y1), (z0, z1) = (map(int, p.split("-")) for p in name.split("_"))
        vol[z0:z1, y0:y1, x0:x1] = np.frombuffer(open(os.path.join(d, name), "rb").read(),
                                                 dt).reshape(z1 - z0, y1 - y0, x1 - x0)
        n += 1
    return vol, n
img, _ = read("image")
r0 = json.load(open(os.path.join(root, "image/info")))["scales"][0]["resolution"]
r1 = json.load(open(os.path.join(root, "pyramid/v2/info")))["scales"][0]["resolution"]
f = [int(round(b / a)) for a, b in zip(r0, r1)][::-1]
out, n = read("pyramid/v2")
z, y, x = out.shape
blocks = img[:z * f[0], :y * f[1], :x * f[2]].astype(np.float64).reshape(
    z, f[0], y, f[1], x, f[2]).mean(axis=(1, 3, 5))
diff = np.abs(np.floor(blocks + 0.5) - out.astype(np.float64))
print("  factor %s, %d chunks of %s, max |diff| %g" % (f, n, out.shape, diff.max()))
assert n > 1 and diff.max() <= 1, diff.max()
PY
check "nothing was dead-lettered" [ -z "$(topic_dump cnx.dlq)" ]
stop_workers
finish
