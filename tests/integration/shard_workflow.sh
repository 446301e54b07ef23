#!/usr/bin/env bash
# A sharded output layer written by a workflow: workflows/segmentation-
# sharded.json (segmentation.json and a shard stage) over a 128x128x64
# cnx-synth volume stored in chunks of 32^3 (a grid of 4x4x2), with the
# shard stage's target set to 2 MiB (8 chunks of 32^3 uint64 a shard: 4
# shards), through the real stack (broker, controller, one worker per
# stage). Checked:
#  0. the shipped workflow is segmentation.json's stages (the meshes
#     stage with "multires_sharded": true) and the shard stage (the two
#     files cannot drift apart);
#  1. the request is done (exit 0) with 4 shard tasks, one a shard; the
#     sharded layer holds exactly the 4 shard files (and its info);
#  2. the sharded layer read through cnx_layer_read (sharded_tool same)
#     equals segmentation/v1, the unsharded layer, voxel for voxel;
#  3. the independent reader (tests/py/sharded_ref.py, from the spec)
#     finds every chunk file of segmentation/v1 byte for byte in the
#     shards and nothing else, chunks in their own shard and minishard;
#  4. cnx-verify over the sharded layer and the ledger finds nothing; the
#     shards are those sharded_tool reshard writes offline;
#  5. a rerun into segmentation-sharded/v2 gives bit-identical shards;
#  6. the meshes stage's multi-resolution meshes, sharded
#     ("multires_sharded": true), read back by tests/py/multires_ref.py
#     through tests/py/sharded_ref.py's reader with the same checks as the
#     unsharded form; and the rerun (plain segmentation.json stages into
#     fragments/v2 and segmentation/v2: the unsharded form) gives the same
#     manifests and the same Draco bytes per fragment;
#  7. no sanitizer report in any log (an ASan+UBSan build).
# Env: CNX_BIN, CNX_SUPPORT, CNX_SOURCE, CNX_PYTHON.
source "${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}/acceptance/lib.sh"
SUPPORT=${CNX_SUPPORT:?CNX_SUPPORT must name the directory of the test support programs}
DATA=$WORK/data
for tool in kcat sqlite3; do
  command -v "$tool" >/dev/null || { echo "shard_workflow.sh: $tool is not installed" >&2; exit 1; }
done

"$BIN/cnx-synth" --out "$DATA" --shape 128,128,64 --chunk 32,32,32 --seed 5 --quiet >/dev/null
mkdir -p "$WORK/wf"
"$PY" - "$SRC/workflows/segmentation-sharded.json" "$WORK/wf" \
  "$SRC/workflows/segmentation.json" >"$WORK/drift.txt" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
plain = json.load(open(sys.argv[3]))["stages"]
ours = [dict(s) for s in d["stages"] if s["worker"] != "shard"]
for s in ours:
    if s["worker"] == "mesh-manifest":
        if s["parameters"] != {"multires_sharded": True}:
            print("segmentation-sharded.json's meshes stage does not shard "
                  "the multi-resolution meshes")
        s["parameters"] = {}
if ours != plain:
    print("segmentation-sharded.json's stages differ from segmentation.json's")
shard = [s for s in d["stages"] if s["worker"] == "shard"][0]
shard["parameters"] = {"shard_bytes": 2097152}
# meshes: shards of about 64 KiB, so that the demo's meshes fill several
meshes = [s for s in d["stages"] if s["worker"] == "mesh-manifest"][0]
meshes["parameters"] = {"multires_sharded": True, "shard_bytes": 65536,
                        "minishard_segments": 4}
json.dump(d, open(sys.argv[2] + "/seg-sharded.json", "w"))
# the rerun: the plain stages (unsharded meshes) into v2 layers
shard["output"]["layer"] = "segmentation-sharded/v2"
meshes["parameters"] = {}
for s in d["stages"]:
    s["output"]["layer"] = s["output"]["layer"].replace(
        "segmentation/v1", "segmentation/v2").replace(
        "fragments/v1", "fragments/v2")
d["name"] = "seg-sharded-again"
json.dump(d, open(sys.argv[2] + "/seg-sharded-again.json", "w"))
PY

check "workflows/segmentation-sharded.json is segmentation.json and a shard stage" \
  [ ! -s "$WORK/drift.txt" ]

start_broker 2
start_controller
start_segmentation_pool 1
start_stage_worker cnx-shard shard shard

reprocess() { request_over 0,0,0,128,128,64 300 "$@"; } # workflow, request id
shard_tasks() { jq_py "$WORK/$1.json" '[s["done"] for s in d["stages"] if s["stage"] == "shard"]'; }

reprocess seg-sharded r1
check "the request is done (rc $RC: $(tail -n1 "$WORK/r1.err"))" [ "$RC" -eq 0 ]
check "4 shard tasks ($(shard_tasks r1))" [ "$(shard_tasks r1)" = "[4]" ]
SH=$DATA/segmentation-sharded/v1
KEY=$(jq_py "$SH/info" 'd["scales"][0]["key"]')
ls "$SH/$KEY" >"$WORK/shards.txt" 2>/dev/null || true
four_shards() { [ "$(grep -c '\.shard$' "$WORK/shards.txt")" -eq 4 ] && [ "$(wc -l <"$WORK/shards.txt")" -eq 4 ]; }
check "4 shard files in $SH/$KEY: $(tr '\n' ' ' <"$WORK/shards.txt")" four_shards
check "the info's scale is sharded" grep -q neuroglancer_uint64_sharded_v1 "$SH/info"
check "cnx_layer_read: the sharded layer equals segmentation/v1" \
  "$SUPPORT/sharded_tool" same "file://$DATA/segmentation/v1" "file://$SH"

# the independent reader: every chunk of segmentation/v1 in the shards
"$PY" - "$DATA/segmentation/v1" "$SH" "$KEY" "$WORK/ref" <<'PY'
import json, os, shutil, sys
src, sh, key, out = sys.argv[1:]
info = json.load(open(os.path.join(src, "info")))
sc = [s for s in info["scales"] if s["key"] == key][0]
chunk, size, off = sc["chunk_sizes"][0], sc["size"], sc["voxel_offset"]
grid = [-(-size[d] // chunk[d]) for d in range(3)]
os.makedirs(os.path.join(out, "expect"))
ids = []
for name in sorted(os.listdir(os.path.join(src, key))):
    lo = [int(r.split("-")[0]) for r in name.split("_")]
    pos = [(lo[d] - off[d]) // chunk[d] for d in range(3)]
    bits = [(g - 1).bit_length() for g in grid]
    code, j = 0, 0
    for i in range(max(bits)):
        for d in range(3):
            if i < bits[d]:
                code |= ((pos[d] >> i) & 1) << j
                j += 1
    shutil.copy(os.path.join(src, key, name), os.path.join(out, "expect", str(code)))
    ids.append(code)
assert len(ids) == grid[0] * grid[1] * grid[2], (len(ids), grid)
shinfo = json.load(open(os.path.join(sh, "info")))
shinfo["scales"] = [s for s in shinfo["scales"] if s["key"] == key]
json.dump(shinfo, open(os.path.join(out, "info"), "w"))
open(os.path.join(out, "chunks.txt"), "w").write("".join("%d\n" % i for i in ids))
open(os.path.join(out, "missing.txt"), "w").write("%d\n" % (1 << 40))
os.symlink(os.path.join(sh, key), os.path.join(out, key))
PY
check "sharded_ref.py read: every chunk byte for byte, nothing else" \
  "$PY" "$SRC/tests/py/sharded_ref.py" read "$WORK/ref"

set +e
"$BIN/cnx-verify" --trust "$WORK/trust" --repo "$SRC" --ledger "$WORK/ledger.db" \
  --layer "file://$SH" >"$WORK/verify.out" 2>&1
vrc=$?
set -e
check "cnx-verify finds nothing (exit $vrc: $(tail -n1 "$WORK/verify.out"))" [ "$vrc" -eq 0 ]

"$SUPPORT/sharded_tool" reshard "$DATA/segmentation/v1" "$WORK/resharded" 2097152
check "the same shards as sharded_tool reshard (the rule and encoder offline)" \
  diff -r "$SH/$KEY" "$WORK/resharded/$KEY"

MR=$DATA/segmentation/v1/mesh_multires
check "mesh_multires/info has a murmurhash3 sharding member" \
  "$PY" -c 'import json, sys; s = json.load(open(sys.argv[1]))["sharding"]; assert s["hash"] == "murmurhash3_x86_128" and s["data_encoding"] == "raw"' "$MR/info"
check "mesh_multires holds shard files only ($(ls "$MR" | wc -l) files), more than one" \
  bash -c '[ -z "$(ls "$1" | grep -v "\.shard$" | grep -vx info)" ] && [ "$(ls "$1" | grep -c "\.shard$")" -gt 1 ]' _ "$MR"
check "multires_ref.py reads the sharded multi-resolution meshes (level 0 closed, the legacy mesh, fewer triangles per level)" \
  "$PY" "$SRC/tests/py/multires_ref.py" "$DATA/segmentation/v1" \
  --fragments "$WORK/frag-sharded.json" --report "$WORK/mr-sharded.json"
check "multires_ref.py fails on a copy whose sharding says identity hash" bash -c '
  bad=$2/bad-mr; rm -rf "$bad"; mkdir -p "$bad"
  cp -r "$1/mesh" "$1/mesh_multires" "$bad/"
  "$3" -c "import json, sys; p = sys.argv[1]; d = json.load(open(p)); d[\"sharding\"][\"hash\"] = \"identity\"; json.dump(d, open(p, \"w\"))" "$bad/mesh_multires/info"
  ! "$3" "$4" "$bad" >/dev/null 2>&1' _ "$DATA/segmentation/v1" "$WORK" "$PY" "$SRC/tests/py/multires_ref.py"

reprocess seg-sharded-again r2
check "the rerun is done (rc $RC: $(tail -n1 "$WORK/r2.err"))" [ "$RC" -eq 0 ]
check "the rerun's shards are bit-identical" \
  diff -r "$SH/$KEY" "$DATA/segmentation-sharded/v2/$KEY"
check "the rerun's multi-resolution meshes are unsharded ($DATA/segmentation/v2/mesh_multires)" \
  bash -c '! grep -q sharding "$1/info" && ls "$1" | grep -q "\.index$"' _ "$DATA/segmentation/v2/mesh_multires"
check "multires_ref.py reads the unsharded ones" \
  "$PY" "$SRC/tests/py/multires_ref.py" "$DATA/segmentation/v2" \
  --fragments "$WORK/frag-plain.json"
check "sharded and unsharded: the same segments, manifests and Draco bytes per fragment ($(jq_py "$WORK/mr-sharded.json" 'd["segments"]' 2>/dev/null) segments)" \
  cmp "$WORK/frag-sharded.json" "$WORK/frag-plain.json"
stop_workers
check "no sanitizer report in the workers' and the controller's logs" \
  bash -c '! grep -lE "ERROR: (Address|Leak)Sanitizer|runtime error:" "$1"/*.log' _ "$WORK"
finish
