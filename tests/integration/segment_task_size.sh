#!/usr/bin/env bash
# Any chunk layout: the segmentation workflow's map stages (segment,
# segment-relabel, mesh) and synapses take tasks of several chunks, and a
# chunk's bytes do not depend on the task size. A 128^3 cnx-synth
# dataset's boundary, cleft and psd layers are re-stored in chunks of 64^3
# (numpy), then the real stack (broker, controller, one worker per stage)
# runs workflows/segmentation.json, followed by the synapse stages of
# workflows/predictions.json, twice over it: with task_size one chunk (64^3:
# 8 tasks per map stage) into fragments/v1 + segmentation/v1, and with
# task_size 2x2x2 chunks (128^3: one task per map stage) into
# fragments/v2 + segmentation/v2. Checked:
#  1. both requests done (exit 0), with 8 and 1 tasks per map stage;
#  2. every object of v1 (chunks, face records, mappings, mesh fragments,
#     mesh indexes, mesh manifests, segment properties, info) exists in v2
#     with the same bytes, and nothing else does (the lineage manifests,
#     one per task, name their tasks and are not compared);
#  3. the halo of the fragments tasks is the one the planner derives from
#     the segment kernel (tests/support/plan_tool, the controller's plan
#     step without a broker), the workflow pinning none;
#  4. plan-time refusals: the same workflow with the mesh stage's halo
#     pinned to 0, or segment reading a uint64 layer, is refused by
#     plan_tool (exit 2) and by the controller (cnx-reprocess exit 2) with
#     one line naming the workflow, the stage and the fix; no task of the
#     refused requests exists in the ledger.
source "${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}/acceptance/lib.sh"
SUPPORT=${CNX_SUPPORT:?CNX_SUPPORT must name the directory of the test support programs}
DATA=$WORK/data
for tool in kcat sqlite3 openssl; do
  command -v "$tool" >/dev/null || { echo "segment_task_size.sh: $tool is not installed" >&2; exit 1; }
done
"$PY" -c 'import numpy' 2>/dev/null || { echo "segment_task_size.sh: numpy missing: skipped"; exit 77; }

"$BIN/cnx-synth" --out "$DATA" --shape 128,128,128 --seed 3 --quiet >/dev/null
# boundary64: the boundary in chunks of 64^3 (raw: x fastest).
"$PY" - "$DATA" <<'PY'
import json, os, sys
import numpy as np
root = sys.argv[1]
def restore(src, dst):
    info = json.load(open(os.path.join(root, src, "info")))
    sc = info["scales"][0]
    assert sc["encoding"] == "raw", sc["encoding"]
    dt = np.dtype(info["data_type"]).newbyteorder("<")
    size, (cx, cy, cz) = sc["size"], sc["chunk_sizes"][0]
    vol = np.zeros(size[::-1], dt)
    d = os.path.join(root, src, sc["key"])
    for name in os.listdir(d):
        (x0, x1), (y0, y1), (z0, z1) = (map(int, p.split("-")) for p in name.split("_"))
        vol[z0:z1, y0:y1, x0:x1] = np.frombuffer(
            open(os.path.join(d, name), "rb").read(), dt).reshape(z1 - z0, y1 - y0, x1 - x0)
    sc["chunk_sizes"] = [[64, 64, 64]]
    out = os.path.join(root, dst, sc["key"])
    os.makedirs(out)
    for z in range(0, size[2], 64):
        for y in range(0, size[1], 64):
            for x in range(0, size[0], 64):
                c = vol[z:z + 64, y:y + 64, x:x + 64]
                name = "%d-%d_%d-%d_%d-%d" % (x, x + c.shape[2], y, y + c.shape[1], z, z + c.shape[0])
                open(os.path.join(out, name), "wb").write(np.ascontiguousarray(c).tobytes())
    json.dump(info, open(os.path.join(root, dst, "info"), "w"))
for name in ("boundary", "cleft", "psd"):
    restore(name, name + "64")
PY

# The workflows: the shipped file with its input, outputs and task size.
mkdir -p "$WORK/wf"
"$PY" - "$SRC/workflows/segmentation.json" "$SRC/workflows/predictions.json" "$WORK/wf" <<'PY'
import json, sys
src, predictions, out = sys.argv[1], sys.argv[2], sys.argv[3]
# segmentation.json, then predictions.json's synapse stages on its segments
synapses = [s for s in json.load(open(predictions))["stages"]
            if s["worker"] in ("synapses", "synapse-edges")]
def variant(name, version, size, edit=None):
    wf = json.load(open(src))
    wf["name"] = name
    wf["stages"] += json.loads(json.dumps(synapses))
    for st in wf["stages"]:
        for role, inp in st["inputs"].items():
            if inp.get("layer") in ("boundary", "cleft", "psd"):
                inp["layer"] += "64"
        st["output"]["layer"] = st["output"]["layer"].replace("/v1", "/v%d" % version)
        if st["kind"] == "map":
            st["task_size"] = [size] * 3
    if edit:
        edit(wf)
    json.dump(wf, open("%s/%s.json" % (out, name), "w"), indent=1)
def stage(wf, name):
    return next(s for s in wf["stages"] if s["name"] == name)
variant("seg-one", 1, 64)
variant("seg-eight", 2, 128)
variant("seg-nohalo", 3, 64, lambda wf: stage(wf, "mesh").update(halo=0))
variant("seg-u64", 4, 64, lambda wf: stage(wf, "fragments")["inputs"]["boundary"].update(layer="gt"))
PY
for w in seg-one seg-eight seg-nohalo seg-u64; do
  check "workflow $w: the fragments stage pins no halo" \
    "$PY" -c 'import json, sys; assert "halo" not in json.load(open(sys.argv[1]))["stages"][0]' "$WORK/wf/$w.json"
done

# ---- 4a. plan-time refusals without a broker (the controller's plan step)
refused_by_plan() { # workflow, text the one-line refusal must contain
  local rc=0
  "$SUPPORT/plan_tool" --workflow "$WORK/wf/$1.json" --dataset "file://$DATA" \
    >"$WORK/$1.plan" 2>"$WORK/$1.plan.err" || rc=$?
  echo "  $1: exit $rc: $(cat "$WORK/$1.plan.err")"
  [ "$rc" -eq 2 ] && [ "$(wc -l <"$WORK/$1.plan.err")" -eq 1 ] && grep -qF "$2" "$WORK/$1.plan.err"
}
check "plan_tool: mesh with halo 0 refused, naming the stage and the fix" \
  refused_by_plan seg-nohalo 'workflow seg-nohalo: stage mesh: halo 0: the mesh worker reads one voxel beyond each chunk'"'"'s high faces; set "halo" to at least 1'
check "plan_tool: segment on a uint64 layer refused, naming the stage" \
  refused_by_plan seg-u64 'workflow seg-u64: stage fragments: input boundary is uint64 x1; the segment worker needs one channel of uint8 or float32'
"$SUPPORT/plan_tool" --workflow "$WORK/wf/seg-one.json" --dataset "file://$DATA" >"$WORK/seg-one.plan"
"$SUPPORT/plan_tool" --workflow "$WORK/wf/seg-eight.json" --dataset "file://$DATA" >"$WORK/seg-eight.plan"
cat "$WORK/seg-one.plan" "$WORK/seg-eight.plan"
HALO=$("$SUPPORT/plan_tool" --workflow "$WORK/wf/seg-one.json" --dataset "file://$DATA" --halo fragments)
check "plan: fragments' halo derived ($HALO), mesh 1, join and relabel 0" \
  grep -qx "fragments worker=segment halo=$HALO pinned=0 tasks=8" "$WORK/seg-one.plan"
check "plan: 2x2x2-chunk tasks: one task per map stage, the same halo" \
  grep -qx "fragments worker=segment halo=$HALO pinned=0 tasks=1" "$WORK/seg-eight.plan"

# ---- the stack -----------------------------------------------------------
start_broker 2
start_controller
start_stage_worker cnx-segment segment seg
start_stage_worker cnx-segment segment-join join
start_stage_worker cnx-segment segment-relabel relabel
start_stage_worker cnx-mesh mesh mesh
start_stage_worker cnx-mesh mesh-manifest meshes
start_stage_worker cnx-synapses synapses synapses
start_stage_worker cnx-synapses synapse-edges edges

reprocess() { request_over 0,0,0,128,128,128 240 "$@"; } # workflow, request id
tasks_of() { jq_py "$WORK/$1.json" '[(s["stage"], s["done"]) for s in d["stages"]]'; }

# ---- 1. one chunk per task, then 2x2x2 chunks per task
reprocess seg-one one
check "one chunk per task: done (rc $RC)" [ "$RC" -eq 0 ]
check "one chunk per task: 8 fragments, relabel, mesh and synapses tasks" \
  [ "$(tasks_of one)" = "[('fragments', 8), ('join', 1), ('relabel', 8), ('mesh', 8), ('meshes', 1), ('synapses', 8), ('connectivity', 1)]" ]
reprocess seg-eight eight
check "2x2x2 chunks per task: done (rc $RC)" [ "$RC" -eq 0 ]
check "2x2x2 chunks per task: one fragments, relabel, mesh and synapses task each" \
  [ "$(tasks_of eight)" = "[('fragments', 1), ('join', 1), ('relabel', 1), ('mesh', 1), ('meshes', 1), ('synapses', 1), ('connectivity', 1)]" ]
[ "$RC" -eq 0 ] || { tail -n 20 "$WORK"/*.log "$WORK/eight.err" >&2 || true; }

# ---- 2. the same bytes, object for object
check "fragments: chunks and face records byte-identical across task sizes" same_tree "$DATA/fragments/v1" "$DATA/fragments/v2"
check "segmentation: chunks, mappings, meshes, indexes, manifests, properties, synapse tables, connectivity byte-identical" same_tree "$DATA/segmentation/v1" "$DATA/segmentation/v2"
check "every chunk has its face record, mapping, mesh index and synapse table" bash -c '
  for d in fragments/v1/8_8_8 fragments/v1/faces/8_8_8 segmentation/v1/8_8_8 \
           segmentation/v1/agglomeration/8_8_8 segmentation/v1/mesh_index/8_8_8 \
           segmentation/v1/synapses/8_8_8; do
    [ "$(ls "$1/$d" | wc -l)" -eq 8 ] || { echo "$d: $(ls "$1/$d" | wc -l)" >&2; exit 1; }
  done' _ "$DATA"

check "mesh/info: the legacy type and ../segment_properties, as Neuroglancer reads it" "$PY" -c '
import json, sys
d = json.load(open(sys.argv[1] + "/segmentation/v1/mesh/info"))
assert d == {"@type": "neuroglancer_legacy_mesh",
             "segment_properties": "../segment_properties"}, d
assert json.load(open(sys.argv[1] + "/segmentation/v1/info"))["mesh"] == "mesh"' "$DATA"
check "mesh/info is a subject of one signed manifest (its writer: the one meshes task)" "$PY" -c '
import base64, glob, json, sys
n = 0
for f in glob.glob(sys.argv[1] + "/segmentation/v1/lineage/*/*.dsse.json"):
    st = json.loads(base64.b64decode(json.load(open(f))["payload"]))
    n += sum(s["name"].endswith("/segmentation/v1/mesh/info") for s in st["subject"])
assert n == 1, n' "$DATA"

check "mesh_multires/info and every manifest and data file read back by tests/py/multires_ref.py with draco_decoder: in their cells, level 0 closed and the legacy mesh, fewer triangles per level" \
  "$PY" "${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/py/multires_ref.py" "$DATA/segmentation/v1" --report "$WORK/multires.json"
check "the multi-resolution meshes have more than one level ($(jq_py "$WORK/multires.json" 'len(d["multires"]["lods"])' 2>/dev/null) levels, $(jq_py "$WORK/multires.json" 'd["segments"]' 2>/dev/null) segments)" \
  "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); assert len(d["multires"]["lods"]) > 1 and d["segments"] > 0' "$WORK/multires.json"
check "multires_ref.py fails on a copy where two segments' multi-resolution meshes are swapped" bash -c '
  set -e
  bad=$2/bad-multires; rm -rf "$bad"; mkdir -p "$bad"
  cp -r "$1/segmentation/v1/mesh" "$1/segmentation/v1/mesh_multires" "$bad/"
  a=$(ls "$bad/mesh_multires" | grep "\.index$" | head -1); a=${a%.index}
  b=$(ls "$bad/mesh_multires" | grep "\.index$" | tail -1); b=${b%.index}
  [ "$a" != "$b" ]
  for f in "" .index; do
    mv "$bad/mesh_multires/$a$f" "$bad/t"; mv "$bad/mesh_multires/$b$f" "$bad/mesh_multires/$a$f"; mv "$bad/t" "$bad/mesh_multires/$b$f"
  done
  ! "$3" "$4" "$bad" > "$2/bad-multires.log" 2>&1
  grep -q "differ by\|triangles, the legacy mesh\|bounding box" "$2/bad-multires.log"' \
  _ "$DATA" "$WORK" "$PY" "${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/py/multires_ref.py"
check "mesh_multires/info: the multilod type, ../segment_properties, a subject of the meshes task's manifest" "$PY" -c '
import base64, glob, json, sys
d = json.load(open(sys.argv[1] + "/segmentation/v1/mesh_multires/info"))
assert d["@type"] == "neuroglancer_multilod_draco" and d["segment_properties"] == "../segment_properties", d
n = 0
for f in glob.glob(sys.argv[1] + "/segmentation/v1/lineage/*/*.dsse.json"):
    st = json.loads(base64.b64decode(json.load(open(f))["payload"]))
    n += sum(s["name"].endswith("/segmentation/v1/mesh_multires/info") for s in st["subject"])
assert n == 1, n' "$DATA"

check "the synapse tables are not all empty ($(cat "$DATA"/segmentation/v1/synapses/8_8_8/* | wc -l) synapses)" \
  [ "$(cat "$DATA"/segmentation/v1/synapses/8_8_8/* | wc -l)" -gt 0 ]

# ---- 3. the derived halo is the one the tasks carry
check "every fragments task carries the derived halo $HALO" "$PY" -c '
import json, sys
n = 0
for line in sys.stdin:
    t = json.loads(line)
    assert t["halo"] == int(sys.argv[1]), t["halo"]
    n += 1
assert n >= 9, n' "$HALO" < <(topic_dump cnx.tasks.segment)
check "every mesh task carries halo 1" "$PY" -c '
import json, sys
assert {json.loads(l)["halo"] for l in sys.stdin} == {1}' < <(topic_dump cnx.tasks.mesh)

# ---- 4b. the controller refuses at plan time, before any task
for w in seg-nohalo seg-u64; do
  reprocess "$w" "bad-$w"
  check "controller refuses $w (exit $RC): $(jq_py "$WORK/bad-$w.json" 'd.get("error")' 2>/dev/null)" \
    [ "$RC" -eq 2 ]
done
check "the refusal names the stage and the fix" \
  grep -qF 'stage mesh: halo 0: the mesh worker reads one voxel' "$WORK/bad-seg-nohalo.json"
check "no task exists for the refused requests" \
  [ "$(sqlite3 "$WORK/ledger.db" "SELECT count(*) FROM tasks WHERE request LIKE 'bad-%'")" = 0 ]
check "nothing was dead-lettered" [ -z "$(topic_dump cnx.dlq)" ]
stop_workers
finish
