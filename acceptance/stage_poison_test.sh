#!/usr/bin/env bash
# Bad tasks at live montage and synapse workers: cnx-montage, cnx-synapses
# --stage synapses and --stage synapse-edges get, among good tasks, tasks
# (written here in Python, produced with kcat) that
#  - read a tile whose bytes were changed after the tile set was recorded,
#  - read a tile set that was never recorded (no digests),
#  - span two sections, or carry an unknown parameter,
#  - give synapses a parameter out of range, or a segmentation on another
#    grid,
#  - hand synapse-edges a table that is not a table.
# Each lands in cnx.dlq with a reason naming the problem; the workers keep
# running and finish the good tasks; nothing is written for the bad ones.
source "$(dirname "$0")/lib.sh"
make_key
D=$WORK/s
"$BIN/cnx-synth" --out "$D" --shape 256,256,130 --seed 5 --quiet >/dev/null
"$BIN/cnx-ingest" --tiles "$D/tiles/tiles.json" --out "$D/tileset" -q >/dev/null
"$BIN/cnx-ingest" --tiles "$D/tiles/tiles.json" --out "$D/tileset2" -q >/dev/null
start_broker 2
start_stage_worker cnx-montage montage mont-1
MONT=${WORKERS[-1]}
start_stage_worker cnx-synapses synapses syn-1
SYN=${WORKERS[-1]}
start_stage_worker cnx-synapses synapse-edges edges-1
EDGES=${WORKERS[-1]}
sleep 4
# A tile of tileset2 changed after recording (its tiles.json still lists
# the old digest); the tables for synapse-edges, one good, one broken.
printf '\x07' | dd of="$D/tileset2/tiles/z00001/r01-c01.png" bs=1 seek=200 conv=notrunc 2>/dev/null
mkdir -p "$D/tables/synapses/8_8_8"
printf '{"id":1,"not":"a synapse"}\n' >"$D/tables/synapses/8_8_8/0-128_0-128_0-128"

"$PY" - "$D" "$SRC/workflows" >"$WORK/tasks.jsonl" <<'PY'
import copy, glob, hashlib, json, os, sys
D = sys.argv[1]
# Each stage's kernel version as the shipped workflows ask for it, so that a
# bad task is refused for what is wrong with it, not for its version.
VERSION = {st["worker"]: st["kernel_version"]
           for f in sorted(glob.glob(os.path.join(sys.argv[2], "*.json")))
           for st in json.load(open(f))["stages"]}
def digest(path):
    return "sha256:" + hashlib.sha256(open(path, "rb").read()).hexdigest()
def write_info(layer, info):
    os.makedirs(layer, exist_ok=True)
    json.dump(info, open(os.path.join(layer, "info"), "w"))
# Output layers: the stitched geometry (as the planner derives it) and a
# segmentation on the synth grid.
ts = json.load(open(os.path.join(D, "tileset", "tiles.json")))
xs = [t["x"] for s in ts["sections"] for t in s["tiles"]]
ys = [t["y"] for s in ts["sections"] for t in s["tiles"]]
x1 = max(t["x"] + t["width"] for s in ts["sections"] for t in s["tiles"])
y1 = max(t["y"] + t["height"] for s in ts["sections"] for t in s["tiles"])
x0, y0 = min(xs) - 25, min(ys) - 25
size = [x1 + 25 - x0, y1 + 25 - y0, len(ts["sections"])]
stitched = {"@type": "neuroglancer_multiscale_volume", "type": "image",
            "data_type": "uint8", "num_channels": 1,
            "scales": [{"key": "8_8_8", "size": size, "resolution": [8, 8, 8],
                        "voxel_offset": [x0, y0, 0], "encoding": "raw",
                        "chunk_sizes": [[min(256, size[0]), min(256, size[1]), 1]]}]}
for name in ("stitched", "stitched2"):
    write_info(os.path.join(D, name), stitched)
seg = json.load(open(os.path.join(D, "gt", "info")))
write_info(os.path.join(D, "syn"), seg)
small = copy.deepcopy(seg)
small["scales"][0]["size"] = [128, 128, 128]
write_info(os.path.join(D, "gt-small"), small)

def task(request, stage, roi, inputs, output, params=None, halo=0):
    return {"schema": "cnx.task/1", "request": request, "stage": stage,
            "kernel_version": VERSION[stage], "roi": {"min": roi[:3], "max": roi[3:]},
            "halo": halo, "inputs": inputs,
            "output": {"layer": "file://" + os.path.join(D, output), "scale": "8_8_8"},
            "parameters": params or {}, "deadline": "2099-01-01T00:00:00Z",
            "retry_budget": 0}
def tiles_input(dirname, tiles_json=None):
    path = os.path.join(D, dirname, "tiles.json")
    return {"tiles": {"layer": "file://" + os.path.join(D, dirname), "scale": "8_8_8",
                      "objects": {"tiles.json": digest(path)}}}
def section(z):
    return [x0, y0, z, x0 + size[0], y0 + size[1], z + 1]
def chunks(layer, box, halo):
    lo = [max(0, box[i] - halo) for i in range(3)]
    hi = [min(256 if i < 2 else 130, box[i + 3] + halo) for i in range(3)]
    out = {}
    for z in range(lo[2] // 128 * 128, hi[2], 128):
        for y in range(lo[1] // 128 * 128, hi[1], 128):
            for x in range(lo[0] // 128 * 128, hi[0], 128):
                name = "8_8_8/%d-%d_%d-%d_%d-%d" % (x, min(x + 128, 256), y, min(y + 128, 256),
                                                    z, min(z + 128, 130))
                out[name] = digest(os.path.join(D, layer, name))
    return {"layer": "file://" + os.path.join(D, layer), "scale": "8_8_8", "objects": out}
box = [0, 0, 0, 128, 128, 128]
syn_in = {r: chunks(l, box, 16) for r, l in (("cleft", "cleft"), ("psd", "psd"), ("segmentation", "gt"))}
bad_grid = dict(syn_in, segmentation={"layer": "file://" + os.path.join(D, "gt-small"),
                                      "scale": "8_8_8",
                                      "objects": {"8_8_8/0-128_0-128_0-128":
                                                  digest(os.path.join(D, "gt", "8_8_8/0-128_0-128_0-128"))}})
tasks = [
    task("mont-good", "montage", section(0), tiles_input("tileset"), "stitched"),
    task("mont-tampered", "montage", section(1), tiles_input("tileset2"), "stitched2"),
    task("mont-unrecorded", "montage", section(2), tiles_input("tiles"), "stitched2"),
    task("mont-two", "montage", section(3)[:5] + [5], tiles_input("tileset"), "stitched2"),
    task("mont-key", "montage", section(4), tiles_input("tileset"), "stitched2", {"serach": 10}),
    task("syn-good", "synapses", box, syn_in, "syn", halo=16),
    task("syn-range", "synapses", box, syn_in, "syn", {"cleft_threshold": 0}, halo=16),
    task("syn-grid", "synapses", box, bad_grid, "syn", halo=16),
    task("edges-bad", "synapse-edges", [0, 0, 0, 256, 256, 130],
         {"tables": {"layer": "file://" + os.path.join(D, "tables"), "scale": "8_8_8",
                     "objects": {"synapses/8_8_8/0-128_0-128_0-128":
                                 digest(os.path.join(D, "tables", "synapses/8_8_8/0-128_0-128_0-128"))}}},
         "syn"),
]
for t in tasks:
    print(t["stage"] + "\t" + json.dumps(t, sort_keys=True, separators=(",", ":")))
PY
for stage in montage synapses synapse-edges; do
  grep -P "^$stage\t" "$WORK/tasks.jsonl" | cut -f2- |
    kcat -b "$BOOT" -P -t "cnx.tasks.$stage" 2>/dev/null
done

succeeded() { [ "$(topic_dump cnx.events | grep "\"request\":\"$1\"" | grep -c '"type":"succeeded"')" -ge 1 ]; }
have_all() {
  for r in mont-tampered mont-unrecorded mont-two mont-key syn-range syn-grid edges-bad; do
    [ -n "$(reason_of $r)" ] || return 1
  done
  succeeded mont-good && succeeded syn-good
}
check "every bad task dead-lettered, every good one done" wait_for 180 have_all
check "changed tile: digest mismatch naming the tile" expect mont-tampered "z00001/r01-c01.png"
check "unrecorded tile set: refused, names the missing sha256" expect mont-unrecorded "no sha256"
check "two sections: refused, one section per task" expect mont-two "one section"
check "unknown montage parameter: named" expect mont-key "serach"
check "synapse parameter out of range: named" expect syn-range "parameters.cleft_threshold"
check "segmentation on another grid: refused" expect syn-grid "not on the grid"
check "a broken table: refused with its name and line" expect edges-bad "line 1"
check "the montage worker is still running" kill -0 "$MONT"
check "the synapse workers are still running" bash -c "kill -0 $SYN && kill -0 $EDGES"
check "nothing written for the bad montage tasks" \
  [ ! -e "$D/stitched2/8_8_8" ] && [ ! -e "$D/stitched2/montage" ]
check "the good montage task wrote its section and report" \
  [ "$(ls "$D/stitched/8_8_8" | wc -l)" -ge 1 -a "$(ls "$D/stitched/montage/8_8_8" | wc -l)" -eq 1 ]
check "the good synapse task wrote its table, nothing else was" \
  [ "$(ls "$D/syn/synapses/8_8_8")" = "0-128_0-128_0-128" ] && [ ! -e "$D/syn/connectivity" ]
finish
