#!/usr/bin/env bash
# ISBI 2012 through the workers (issue 14): the raw image stack ingested by
# cnx-ingest into a layer of 128x128 chunks in xy (4,4,50 nm), run through
# the real stack (broker, controller, two segment workers, join, relabel,
# mesh, mesh-manifest) with workflows/segmentation-em.json over the whole
# volume (its fragments halo derived by the planner), then segmentation/v1
# scored per section against the ISBI labels exactly as bench/isbi_eval.py
# scores, beside the same kernel on the whole stack (isbi_eval's run_ours),
# by bench/isbi_chunked.py. Also: the halo the fragments tasks carried
# (== plan_tool's), and segmentation/v1 equal voxel for voxel to the
# one-process chunked method (tests/support/segjoin_tool --chunked).
#
#   CNX_BIN=build/bin CNX_SUPPORT=build/tests/support CNX_ALLOW_DIRTY=1 \
#     bench/isbi_workers.sh
#
# Env: CNX_SHARED (default ../shared beside the checkout), KEEP_WORK=1
# keeps the work directory. Exit 0 when the workers' VI split and merge are
# each within 0.02 of the whole-stack run's, 1 otherwise (the figures are
# printed either way), 2 when the data is missing. About a minute on two
# cores.
source "$(dirname "$0")/../acceptance/lib.sh"
SUPPORT=${CNX_SUPPORT:?CNX_SUPPORT must name the directory of the test support programs}
ISBI=${CNX_SHARED:-$SRC/../shared}/data/isbi2012
[ -d "$ISBI/image" ] && [ -d "$ISBI/label" ] ||
  { echo "isbi_workers.sh: no ISBI 2012 data at $ISBI" >&2; exit 2; }
DATA=$WORK/data
WF=$SRC/workflows/segmentation-em.json
PARAMS=$("$PY" -c 'import json, sys
print(json.dumps(json.load(open(sys.argv[1]))["stages"][0]["parameters"]))' "$WF")

"$BIN/cnx-ingest" --quiet --out "file://$DATA/image" --resolution 4,4,50 \
  --chunk 128,128,128 "$ISBI"/image/*.png
HALO=$("$SUPPORT/plan_tool" --workflow "$WF" --dataset "file://$DATA" --halo fragments)
"$SUPPORT/plan_tool" --workflow "$WF" --dataset "file://$DATA" | sed 's/^/plan: /'
echo "derived halo of the fragments stage: $HALO voxels"

start_broker 4
start_controller
start_segmentation_pool 2

t0=$SECONDS
set +e
"$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" \
  --workflow segmentation-em --workflows "$SRC/workflows" \
  --dataset "file://$DATA" --roi 0,0,0,512,512,30 --request isbi-em \
  --wait --json --quiet --timeout 900 >"$WORK/isbi-em.json" 2>"$WORK/isbi-em.err"
RC=$?
set -e
echo "segmentation-em through the stack: $((SECONDS - t0)) s (cnx-reprocess exit $RC)"
if [ "$RC" -ne 0 ]; then
  cat "$WORK/isbi-em.err" >&2
  tail -n 20 "$WORK"/*.log >&2 || true
  exit 1
fi
jq_py "$WORK/isbi-em.json" '" ".join("%s %d" % (s["stage"], s["done"]) for s in d["stages"])' |
  sed 's/^/tasks done: /'
CARRIED=$(topic_dump cnx.tasks.segment | "$PY" -c 'import json, sys
print(",".join(sorted({str(json.loads(l)["halo"]) for l in sys.stdin})))')
echo "halo carried by the fragments tasks: $CARRIED"
stop_workers

status=0
[ "$CARRIED" = "$HALO" ] || { echo "FAIL: the tasks carried halo $CARRIED, the plan derives $HALO"; status=1; }

# The workers' bytes are the one-process chunked method's.
"$SUPPORT/segjoin_tool" --layer "file://$DATA/image" --params "$PARAMS" \
  --halo "$HALO" --threads 2 --chunked "$WORK/chunked.u64" >/dev/null
"$PY" - "$DATA/segmentation/v1" "$WORK/chunked.u64" "$SRC/tests/py" <<'PY' || status=1
import sys
import numpy as np
sys.path.insert(0, sys.argv[3])
from layer_ref import read_layer
_, seg = read_layer(sys.argv[1])
ref = np.fromfile(sys.argv[2], dtype="<u8").reshape(seg.shape)
same = np.array_equal(seg, ref)
print("%s: segmentation/v1 %s the one-process chunked method voxel for voxel"
      % ("ok" if same else "FAIL", "equals" if same else "differs from"))
sys.exit(0 if same else 1)
PY

"$PY" "$SRC/bench/isbi_chunked.py" --data "$ISBI" --tool "$SUPPORT/segment_tool" \
  --layer "$DATA/segmentation/v1" \
  --name "workers, 128x128 chunks, halo $HALO" || status=1
exit $status
