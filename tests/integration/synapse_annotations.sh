#!/usr/bin/env bash
# Synapses as a Neuroglancer annotation collection, end to end: on a 128^3
# cnx-synth dataset the real stack (broker, controller, a synapses and a
# synapse-edges worker) runs workflows/synapses-gt.json; its reduce task
# writes gt-synapses/v1/synapse_annotations/<scale>/<region>/. Checked:
#  1. the request is done, with synapses found;
#  2. tests/py/annotations_ref.py (numpy, written from the spec, no cnx
#     code) reads the info, every by_id entry, every rel_ index and every
#     spatial cell and recovers the JSON-lines tables exactly, each synapse
#     under its pre and post id and in one spatial cell;
#  3. cnx-verify on the layer: every annotation object is covered by the
#     reduce task's signed manifest, its bytes matching;
#  4. the request again: every repeated task bit-identical;
#  5. negative controls, on a copy: a flipped byte in a by_id entry, a
#     missing post-synaptic index file, a synapse missing from the
#     collection and a property moved by one byte each make the reader fail.
source "${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}/acceptance/lib.sh"
source "$SRC/acceptance/annotations_lib.sh"
DATA=$WORK/data
REF=$SRC/tests/py/annotations_ref.py
for tool in kcat openssl; do
  command -v "$tool" >/dev/null || { echo "synapse_annotations.sh: $tool is not installed" >&2; exit 1; }
done
"$PY" -c 'import numpy' 2>/dev/null || { echo "synapse_annotations.sh: numpy missing: skipped"; exit 77; }

"$BIN/cnx-synth" --out "$DATA" --shape 128,128,128 --seed 3 --quiet >/dev/null

start_broker 2
start_controller
start_stage_worker cnx-synapses synapses synapses
start_stage_worker cnx-synapses synapse-edges edges

reprocess() { # request id -> RC, $WORK/<id>.json
  set +e
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow synapses-gt \
    --workflows "$SRC/workflows" --dataset "file://$DATA" --roi 0,0,0,128,128,128 \
    --request "$1" --wait --json --timeout 240 >"$WORK/$1.json" 2>"$WORK/$1.err"
  RC=$?
  set -e
}

# ---- 1. the workflow
reprocess ann-first
check "synapses-gt done (rc $RC)" [ "$RC" -eq 0 ]
[ "$RC" -eq 0 ] || { tail -n 20 "$WORK"/*.log "$WORK/ann-first.err" >&2 || true; }
LAYER=$DATA/gt-synapses/v1
SKEY=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["scales"][0]["key"])' "$LAYER/info")
RES=$("$PY" -c 'import json, sys; print(",".join("%g" % r for r in json.load(open(sys.argv[1]))["scales"][0]["resolution"]))' "$LAYER/info")
COLL=$LAYER/synapse_annotations/$SKEY/0-128_0-128_0-128
N=$(cat "$LAYER"/synapses/"$SKEY"/* | wc -l)
echo "  collection $COLL, $N synapses in the tables, resolution $RES nm"
check "the tables hold synapses ($N)" [ "$N" -gt 0 ]

# ---- 2. the independent reader
check "annotations_ref.py: the collection gives back the tables exactly" \
  "$PY" "$REF" "$COLL" "$LAYER/synapses" --resolution "$RES" --sharded no
check "by_id holds one entry per synapse" [ "$(ls "$COLL/by_id" | wc -l)" -eq "$N" ]

# ---- 3. lineage covers every annotation object
check_lineage_covers "file"

# ---- 4. again: bit-identical
check_second_run ann-second

# ---- 5. the reader fails on damaged collections
check "a flipped byte in a by_id entry is found" broken flip '
import os, sys
d = os.path.join(sys.argv[1], "by_id"); f = os.path.join(d, sorted(os.listdir(d))[0])
b = bytearray(open(f, "rb").read()); b[17] ^= 1; open(f, "wb").write(b)'
check "a missing post-synaptic index file is found" broken norel '
import os, sys
d = os.path.join(sys.argv[1], "rel_post_synaptic_cell"); os.remove(os.path.join(d, sorted(os.listdir(d))[0]))'
check "a synapse missing from the collection is found" broken nosyn '
import os, sys
d = os.path.join(sys.argv[1], "by_id"); os.remove(os.path.join(d, sorted(os.listdir(d))[-1]))'
check "a spatial cell whose records are shifted by one byte is found" broken shift '
import os, sys
f = os.path.join(sys.argv[1], "spatial0", "0_0_0")
b = open(f, "rb").read(); open(f, "wb").write(b[:8] + b[9:] + b"\0")'
finish
