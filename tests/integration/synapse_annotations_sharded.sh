#!/usr/bin/env bash
# Synapses as a sharded Neuroglancer annotation collection, end to end: on a
# 128^3 cnx-synth dataset the real stack (broker, controller, a synapses and
# a synapse-edges worker) runs workflows/synapses-gt.json with the
# connectivity stage's parameters set to {"annotation_sharding": "on"}; its
# reduce task writes every index of
# gt-synapses/v1/synapse_annotations/<scale>/<region>/ as shard files.
# Checked:
#  1. the request is done, with synapses found; the info gives each index
#     (by_id, both rel_ indexes, spatial0) a "sharding" member and each
#     index directory holds shard files only;
#  2. tests/py/annotations_ref.py --sharded yes (numpy and sharded_ref.py,
#     both written from the specs, no cnx code) walks every shard, reads
#     every annotation by id, every segment's list and every spatial cell
#     (by compressed Morton code) and recovers the tables exactly;
#  3. every shard file is a subject of the reduce task's signed manifest,
#     and cnx-verify --layer passes;
#  4. the request again: every repeated task bit-identical;
#  5. negative controls, on a copy: a flipped byte in a by_id shard, a
#     missing rel_post_synaptic_cell shard and an info without the
#     sharding of by_id each make the reader fail;
#  6. a larger collection (5000 synapses from a seeded generator over
#     3000 x 3000 x 100 voxels, 9 spatial cells), written by
#     tests/support/annotation_tool: sharded, its by_id index has 2^7
#     minishards and the reader recovers the table exactly; written with
#     "auto" it is unsharded (below 100000 synapses) and the reader agrees;
#  7. no sanitizer report in the workers' and the controller's logs (an
#     ASan+UBSan build).
source "${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}/acceptance/lib.sh"
source "$SRC/acceptance/annotations_lib.sh"
DATA=$WORK/data
REF=$SRC/tests/py/annotations_ref.py
for tool in kcat openssl; do
  command -v "$tool" >/dev/null || { echo "synapse_annotations_sharded.sh: $tool is not installed" >&2; exit 1; }
done
"$PY" -c 'import numpy' 2>/dev/null || { echo "synapse_annotations_sharded.sh: numpy missing: skipped"; exit 77; }

"$BIN/cnx-synth" --out "$DATA" --shape 128,128,128 --seed 3 --quiet >/dev/null
# the shipped workflows, the connectivity stage asked for sharded indexes
cp -r "$SRC/workflows" "$WORK/workflows"
"$PY" -c 'import json, sys
p = sys.argv[1]; w = json.load(open(p))
st = [s for s in w["stages"] if s["worker"] == "synapse-edges"]
assert len(st) == 1, st
st[0]["parameters"] = {"annotation_sharding": "on"}
json.dump(w, open(p, "w"), indent=2)' "$WORK/workflows/synapses-gt.json"

start_broker 2
start_controller
start_stage_worker cnx-synapses synapses synapses
start_stage_worker cnx-synapses synapse-edges edges

reprocess() { # request id -> RC, $WORK/<id>.json
  set +e
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow synapses-gt \
    --workflows "$WORK/workflows" --dataset "file://$DATA" --roi 0,0,0,128,128,128 \
    --request "$1" --wait --json --timeout 240 >"$WORK/$1.json" 2>"$WORK/$1.err"
  RC=$?
  set -e
}

# ---- 1. the workflow
reprocess shard-first
check "synapses-gt (sharded annotations) done (rc $RC)" [ "$RC" -eq 0 ]
[ "$RC" -eq 0 ] || { tail -n 20 "$WORK"/*.log "$WORK/shard-first.err" >&2 || true; }
LAYER=$DATA/gt-synapses/v1
SKEY=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["scales"][0]["key"])' "$LAYER/info")
RES=$("$PY" -c 'import json, sys; print(",".join("%g" % r for r in json.load(open(sys.argv[1]))["scales"][0]["resolution"]))' "$LAYER/info")
COLL=$LAYER/synapse_annotations/$SKEY/0-128_0-128_0-128
N=$(cat "$LAYER"/synapses/"$SKEY"/* | wc -l)
echo "  collection $COLL, $N synapses in the tables"
check "the tables hold synapses ($N)" [ "$N" -gt 0 ]
check "every index is sharded and holds shard files only" "$PY" -c '
import json, os, sys
coll = sys.argv[1]
info = json.load(open(os.path.join(coll, "info")))
idx = [info["by_id"]] + info["relationships"] + info["spatial"]
for r in idx:
    sh = r["sharding"]
    assert sh["@type"] == "neuroglancer_uint64_sharded_v1", sh
    names = os.listdir(os.path.join(coll, r["key"]))
    assert names and all(n.endswith(".shard") for n in names), (r["key"], names[:3])
    print("  %s: %d shard file(s), hash %s, %d minishard bits" % (
        r["key"], len(names), sh["hash"], sh["minishard_bits"]))' "$COLL"

# ---- 2. the independent reader
check "annotations_ref.py --sharded yes: the shards give back the tables exactly" \
  "$PY" "$REF" "$COLL" "$LAYER/synapses" --resolution "$RES" --sharded yes

# ---- 3. lineage covers every shard
check_lineage_covers "shard file"

# ---- 4. again: bit-identical
check_second_run shard-second

# ---- 5. the reader fails on damaged collections
check "a flipped byte in a by_id shard is found" broken flip '
import os, sys
d = os.path.join(sys.argv[1], "by_id"); f = os.path.join(d, sorted(os.listdir(d))[0])
b = bytearray(open(f, "rb").read()); b[len(b) // 3] ^= 1; open(f, "wb").write(b)'
check "a missing post-synaptic shard is found" broken noshard '
import os, sys
d = os.path.join(sys.argv[1], "rel_post_synaptic_cell"); os.remove(os.path.join(d, sorted(os.listdir(d))[0]))'
check "an info that drops by_id.sharding is found" broken noinfo '
import json, os, sys
p = os.path.join(sys.argv[1], "info"); i = json.load(open(p)); del i["by_id"]["sharding"]
open(p, "w").write(json.dumps(i))'

# ---- 6. a collection of many minishards
"$PY" -c '
import json, random, sys
rng = random.Random(17); seen = set(); out = []
while len(out) < 5000:
    x, y, z = rng.randrange(3, 2997), rng.randrange(0, 3000), rng.randrange(0, 100)
    if (x, y, z) in seen:
        continue
    seen.add((x, y, z))
    sid = 1 + (x | y << 21 | z << 42)
    out.append({"id": sid, "site": [x, y, z], "site_nm": [8 * x, 8 * y, 40 * z],
                "size": rng.randrange(1, 5000), "score": rng.randrange(0, 1000001) / 1e6,
                "pre_id": rng.choice([0, rng.randrange(1, 400)]), "pre_site": [x - 2, y, z],
                "post_id": rng.randrange(1, 1 << 40), "post_site": [x + 3, y, z]})
out.sort(key=lambda s: s["id"])
with open(sys.argv[1], "w") as f:
    for s in out:
        f.write(json.dumps(s, sort_keys=True, separators=(",", ":")) + "\n")' "$WORK/big.jsonl"
TOOL=${CNX_SUPPORT:?CNX_SUPPORT must name build/tests/support}/annotation_tool
check "annotation_tool writes 5000 synapses sharded" "$TOOL" "$WORK/big.jsonl" "$WORK/big-on" 3000,3000,100 on
check "its by_id index has 2^7 minishards in one shard" "$PY" -c '
import json, sys
sh = json.load(open(sys.argv[1]))["by_id"]["sharding"]
print("  by_id: %d minishard bits, %d shard bits" % (sh["minishard_bits"], sh["shard_bits"]))
assert (sh["minishard_bits"], sh["shard_bits"]) == (7, 0), sh' "$WORK/big-on/info"
check "annotations_ref.py --sharded yes: 5000 synapses recovered exactly" \
  "$PY" "$REF" "$WORK/big-on" "$WORK/big.jsonl" --resolution 8,8,40 --sharded yes
check "annotation_tool writes them with auto" "$TOOL" "$WORK/big.jsonl" "$WORK/big-auto" 3000,3000,100 auto
check "annotations_ref.py --sharded no: auto below 100000 synapses is unsharded, same table" \
  "$PY" "$REF" "$WORK/big-auto" "$WORK/big.jsonl" --resolution 8,8,40 --sharded no

# ---- 7. sanitizers
stop_workers
check "no sanitizer report in the workers' and the controller's logs" \
  bash -c '! grep -lE "ERROR: (Address|Leak)Sanitizer|runtime error:" "$1"/*.log' _ "$WORK"
finish
