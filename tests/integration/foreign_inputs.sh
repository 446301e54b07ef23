#!/usr/bin/env bash
# Inputs as other tools write them: jpeg and png image chunks, a layer with
# a "hidden" scale and members cnx does not use, sharded raw and sharded
# compressed_segmentation layers. tests/py/foreign_layers.py (numpy,
# Pillow, sharded_ref.py's shard writer and cseg_ref.py's encoder: no cnx
# code) writes them from a 128^3 cnx-synth dataset in 48^3 chunks (edge
# chunks truncated). Checked:
#  1. the jpeg and png layers read through cnx_layer_read (sharded_tool
#     volume: 13 boxes, whole and unaligned) equal, voxel for voxel, what
#     Pillow decodes from the same chunks;
#  2. the real stack (broker, controller, workers) runs
#     workflows/segmentation.json on the boundary map as cnx-synth wrote it
#     (raw), sharded, as png, and on the jpeg layer and on the raw layer of
#     its decoded voxels; and workflows/synapses-gt.json on the gt
#     segmentation unsharded and sharded: every request done;
#  3. the outputs are byte-identical: raw = sharded = png, jpeg = its
#     decoded raw layer, gt = sharded gt (every object but the lineage
#     manifests, which name their tasks and inputs);
#  4. the tasks of the sharded requests name each input chunk as
#     "<key>/<box>" with the digest of its bytes inside the shard (the same
#     digests as the unsharded layer's chunks for the raw boundary), and
#     cnx-verify of the sharded requests' layers, which hashes those root
#     inputs again from the shards, exits 0;
#  5. a chunk changed inside its shard (the shard rewritten as the writer
#     builds them) is found by cnx-verify, which names the chunk.
source "${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}/acceptance/lib.sh"
SUPPORT=${CNX_SUPPORT:?CNX_SUPPORT must name the directory of the test support programs}
DATA=$WORK/data
for tool in kcat sqlite3 openssl; do
  command -v "$tool" >/dev/null || { echo "foreign_inputs.sh: $tool is not installed" >&2; exit 1; }
done
"$PY" -c 'import numpy, PIL' 2>/dev/null || { echo "foreign_inputs.sh: numpy or Pillow missing: skipped"; exit 77; }

"$BIN/cnx-synth" --out "$DATA" --shape 128,128,128 --seed 5 --chunk 48,48,48 --quiet >/dev/null
"$PY" "$SRC/tests/py/foreign_layers.py" "$DATA"

# ---- 1. jpeg and png chunks read as Pillow decodes them
for l in boundary_jpeg boundary_png; do
  check "$l: cnx_layer_read equals Pillow's decoding, 13 boxes" \
    "$SUPPORT/sharded_tool" volume "$DATA/$l"
done

# ---- the workflows: the shipped files with their inputs and outputs renamed
mkdir -p "$WORK/wf"
"$PY" - "$SRC/workflows" "$WORK/wf" <<'PY'
import json, sys
src, out = sys.argv[1], sys.argv[2]
def variant(base, name, layer_from, layer_to, version):
    wf = json.load(open("%s/%s.json" % (src, base)))
    wf["name"] = name
    for st in wf["stages"]:
        for inp in st["inputs"].values():
            if inp.get("layer") == layer_from:
                inp["layer"] = layer_to
        st["output"]["layer"] = st["output"]["layer"].replace("/v1", "/" + version)
        if st["kind"] == "map":
            st["task_size"] = [144] * 3  # one task per map stage: 3 x 48
    json.dump(wf, open("%s/%s.json" % (out, name), "w"), indent=1)
# output versions: v1 raw, v2 sharded, v3 png, v4 jpeg, v5 decoded jpeg
for v, (name, layer) in enumerate((("raw", "boundary"), ("sh", "boundary_sh"),
                                   ("png", "boundary_png"), ("jpeg", "boundary_jpeg"),
                                   ("jdec", "boundary_jdec")), 1):
    variant("segmentation", "seg-" + name, "boundary", layer, "v%d" % v)
variant("synapses-gt", "syn-raw", "gt", "gt", "v1")
variant("synapses-gt", "syn-sh", "gt", "gt_sh", "v2")
PY

start_broker 2
start_controller
start_segmentation_pool 1
start_stage_worker cnx-synapses synapses synapses
start_stage_worker cnx-synapses synapse-edges edges

reprocess() { request_over 0,0,0,128,128,128 300 "$@"; } # workflow, request id

# ---- 2. every request done
for w in seg-raw seg-sh seg-png seg-jpeg seg-jdec syn-raw syn-sh; do
  reprocess "$w" "$w"
  check "$w: done (rc $RC)" [ "$RC" -eq 0 ]
  [ "$RC" -eq 0 ] || { cat "$WORK/$w.err" >&2; tail -n 20 "$WORK"/*.log >&2 || true; }
done

# ---- 3. the same bytes, object for object (same_tree: acceptance/lib.sh)
for pair in "v1 v2 raw sharded" "v1 v3 raw png" "v5 v4 decoded-jpeg jpeg"; do
  set -- $pair
  check "fragments/$1 ($3) = fragments/$2 ($4)" same_tree "$DATA/fragments/$1" "$DATA/fragments/$2"
  check "segmentation/$1 ($3) = segmentation/$2 ($4): chunks, meshes, properties" \
    same_tree "$DATA/segmentation/$1" "$DATA/segmentation/$2"
done
nsyn=$(cat "$DATA"/gt-synapses/v1/synapses/*/* 2>/dev/null | wc -l)
check "gt-synapses/v1 (gt) = gt-synapses/v2 (sharded gt): tables, connectivity ($nsyn synapses)" \
  same_tree "$DATA/gt-synapses/v1" "$DATA/gt-synapses/v2"
check "the synapse tables are not empty" [ "$nsyn" -gt 0 ]

# ---- 4. input chunks inside shards: their names and digests in the tasks
check "the fragments tasks of seg-raw and seg-sh expect the same chunks with the same digests" \
  "$PY" -c '
import json, sys
objs = {}
for line in sys.stdin:
    t = json.loads(line)
    if t["request"] in ("seg-raw", "seg-sh"):
        objs[t["request"]] = t["inputs"]["boundary"]["objects"]
a, b = objs["seg-raw"], objs["seg-sh"]
assert len(a) == 27 and a == b, (len(a), len(b))' < <(topic_dump cnx.tasks.segment)
verify() { # layers... -> RC, $WORK/verify.txt
  local args=() l
  for l in "$@"; do args+=(--layer "file://$DATA/$l"); done
  set +e
  "$BIN/cnx-verify" --trust "$WORK/trust" --ledger "$WORK/ledger.db" --quiet \
    "${args[@]}" >"$WORK/verify.txt" 2>&1
  RC=$?
  set -e
}
verify fragments/v2 segmentation/v2 gt-synapses/v2
check "cnx-verify of the sharded inputs' outputs (root inputs hashed from their shards) exits 0 (rc $RC)" \
  [ "$RC" -eq 0 ]
[ "$RC" -eq 0 ] || tail -n 5 "$WORK/verify.txt" >&2

# ---- 5. a chunk changed inside its shard: cnx-verify names it
"$PY" - "$DATA/boundary_sh" "$SRC/tests/py" <<'PY'
import json, os, random, sys
sys.path.insert(0, sys.argv[2])
import sharded_ref
root = sys.argv[1]
spec = json.load(open(os.path.join(root, "info")))["scales"][0]["sharding"]
# Chunk 0 (the box 0-48_0-48_0-48) with one voxel changed, rewritten into a
# shard as the writer builds them; the other chunks of that shard kept.
import gzip, struct
shard, mini = sharded_ref.locate(spec, 0)
path = os.path.join(root, "8_8_8", sharded_ref.shard_name(spec, shard))
data = open(path, "rb").read()
chunks = {}
nmini = 1 << spec["minishard_bits"]
for m in range(nmini):
    s, e = struct.unpack_from("<QQ", data, 16 * m)
    if s == e:
        continue
    raw = data[16 * nmini + s:16 * nmini + e]
    raw = gzip.decompress(raw) if spec["minishard_index_encoding"] == "gzip" else raw
    n = len(raw) // 24
    cols = struct.unpack("<%dQ" % (3 * n), raw)
    cid, off = 0, 0
    for i in range(n):
        cid += cols[i]
        start = 16 * nmini + off + cols[n + i]
        blob = data[start:start + cols[2 * n + i]]
        chunks[cid] = gzip.decompress(blob) if spec["data_encoding"] == "gzip" else blob
        off = off + cols[n + i] + cols[2 * n + i]
c = bytearray(chunks[0])
c[100] ^= 0xff
chunks[0] = bytes(c)
open(path, "wb").write(sharded_ref.build_shard(spec, chunks, random.Random(1)))
PY
verify fragments/v2
check "cnx-verify after a chunk changed inside its shard exits non-zero (rc $RC)" [ "$RC" -ne 0 ]
check "... and names that chunk: boundary_sh/8_8_8/0-48_0-48_0-48" \
  grep -q 'boundary_sh/8_8_8/0-48_0-48_0-48' "$WORK/verify.txt"
verify fragments/v1
check "cnx-verify of the unsharded input's outputs still exits 0 (rc $RC)" [ "$RC" -eq 0 ]
stop_workers
finish
