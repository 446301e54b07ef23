#!/usr/bin/env bash
# A dataset-sized request through the real stack (not in CI): a cnx-synth
# volume (default 1024 x 1024 x 512, 5.4e8 voxels, chunks of 128^3) through
# the segmentation workflow with map tasks of 256^3 (8 chunks), twice, on
# cnx-broker, cnx-controller and this machine's workers:
#   tree:   workflows/segmentation-tree.json, the join as a tree of two
#           levels (join-blocks over blocks of 512^3, then the top), into
#           segmentation/v2;
#   single: workflows/segmentation.json, the one-task join (the peer), into
#           segmentation/v1.
# Both write their fragments into fragments/v1: the same tasks, so the
# second request reuses the first's (its fragments stage shows them as
# reused). Without --meshes the mesh stages are left out of both.
# Printed:
#  - per request and stage: tasks, CPU seconds and wall seconds of its
#    attempts (summed over the tasks), the request's wall time;
#  - the peak resident memory of every reduce worker process (VmHWM: one
#    segment-join process per request; the join-blocks workers each ran
#    several blocks), beside an idle worker's;
#  - build/bench/bench_join on the fragments' face records: each reduce
#    task of both methods in its own process, its peak memory and time, and
#    whether the tree's mappings and properties are the one-task join's;
#  - whether segmentation/v2 is segmentation/v1 byte for byte (every chunk,
#    mapping, property; lineage apart), object for object;
#  - the ledger's bytes per task (SQLite page_count x page_size over the
#    tasks of both requests) and its rows per task.
#
# usage: bench/bench_scale.sh [--shape X,Y,Z] [--seed N] [--task N]
#          [--block N] [--workers N] [--meshes] [--data DIR] [--out DIR]
#   --task     map task side, voxels (default 256)
#   --block    join block side, voxels (default 512)
#   --workers  workers per map stage (default: the number of cores)
#   --data     a cnx-synth dataset of that shape made before (its boundary
#              layer is hard-linked in; cnx-synth takes ~6 min at the
#              default shape)
#   --out      where the report goes (default /tmp/bench-scale)
# Env: CNX_BIN (default <repo>/build/bin), CNX_ALLOW_DIRTY=1 for workers of
# a dirty tree, KEEP_WORK=1 keeps the work directory. The default volume
# takes about 40 minutes on two cores and 3 GB of disk.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
export CNX_BIN=${CNX_BIN:-$SRC/build/bin}
BENCH=${CNX_BENCH_BIN:-$(dirname "$CNX_BIN")/bench}
SHAPE=1024,1024,512
SEED=5
TASK=256
BLOCK=512
NW=$(nproc 2>/dev/null || echo 2)
MESHES=0
OUT=/tmp/bench-scale
SYNTH=""
usage() { sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
  --shape) SHAPE=$2; shift 2 ;;
  --seed) SEED=$2; shift 2 ;;
  --task) TASK=$2; shift 2 ;;
  --block) BLOCK=$2; shift 2 ;;
  --workers) NW=$2; shift 2 ;;
  --meshes) MESHES=1; shift ;;
  --data) SYNTH=$2; shift 2 ;;
  --out) OUT=$2; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  *) echo "bench_scale: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $SHAPE =~ ^[0-9]+,[0-9]+,[0-9]+$ ]] || { echo "bench_scale: --shape '$SHAPE': expected X,Y,Z" >&2; exit 2; }
for v in "$TASK" "$BLOCK" "$NW"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "bench_scale: '$v': expected a positive integer" >&2; exit 2; }
done
[ -x "$BENCH/bench_join" ] || { echo "bench_scale: $BENCH/bench_join is not built" >&2; exit 2; }
source "$SRC/acceptance/lib.sh"
mkdir -p "$OUT"
IFS=, read -r SX SY SZ <<<"$SHAPE"
DATA=$WORK/data
REPORT=$OUT/bench-scale.txt
: >"$REPORT"
say() { echo "$*" | tee -a "$REPORT"; }

if [ -n "$SYNTH" ]; then
  [ -f "$SYNTH/boundary/info" ] || { echo "bench_scale: --data $SYNTH: no boundary layer" >&2; exit 2; }
  mkdir -p "$DATA"
  cp -al "$SYNTH/boundary" "$DATA/boundary"
  say "the boundary layer of $SYNTH (hard links)"
else
  say "cnx-synth $SHAPE seed $SEED (chunks of 128^3) ..."
  t0=$(date +%s)
  "$BIN/cnx-synth" --out "$DATA" --shape "$SHAPE" --seed "$SEED" --quiet
  say "  $(($(date +%s) - t0)) s"
fi

mkdir -p "$WORK/wf"
"$PY" - "$SRC/workflows" "$WORK/wf" "$TASK" "$BLOCK" "$MESHES" <<'PY'
import json, sys
src, out, task, block, meshes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
def variant(base, name, version):
    wf = json.load(open("%s/%s.json" % (src, base)))
    wf["name"] = name
    if not meshes:
        wf["stages"] = [s for s in wf["stages"] if s["worker"] not in ("mesh", "mesh-manifest")]
    for st in wf["stages"]:
        if st["name"] != "fragments":
            st["output"]["layer"] = st["output"]["layer"].replace("/v1", "/v%d" % version)
        if st["kind"] == "map":
            st["task_size"] = [task] * 3
        if st["worker"] == "segment-join-block":
            st["task_size"] = [block] * 3
    json.dump(wf, open("%s/%s.json" % (out, name), "w"), indent=1)
variant("segmentation-tree", "scale-tree", 2)
variant("segmentation", "scale-single", 1)
PY

start_broker 4
start_controller
declare -A WPID
worker() { # binary, stage, instance
  start_stage_worker "$1" "$2" "$3"
  WPID[$3]=$!
}
for i in $(seq "$NW"); do
  worker cnx-segment segment "seg-$i"
  worker cnx-segment segment-relabel "relabel-$i"
  worker cnx-segment segment-join-block "blocks-$i"
  [ "$MESHES" -eq 1 ] && worker cnx-mesh mesh "mesh-$i"
done
[ "$MESHES" -eq 1 ] && worker cnx-mesh mesh-manifest manifest
worker cnx-segment segment-join join-top
sleep 3
idle_hwm=$(awk '/VmHWM/ {print $2}' "/proc/${WPID[join-top]}/status")
hwm() { awk '/VmHWM/ {print $2}' "/proc/${WPID[$1]}/status"; }

run() { # workflow, request id
  local t0 rc
  t0=$(date +%s.%N)
  set +e
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow "$1" \
    --workflows "$WORK/wf" --dataset "file://$DATA" --roi "0,0,0,$SX,$SY,$SZ" \
    --request "$2" --wait --json --timeout 14400 >"$WORK/$2.json" 2>"$WORK/$2.err"
  rc=$?
  set -e
  cp "$WORK/$2.json" "$OUT/$2.json"
  say "$2 ($1): exit $rc after $("$PY" -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(date +%s.%N)") s"
  [ "$rc" -eq 0 ] || { say "  $(tail -n 3 "$WORK/$2.err")"; return 1; }
  "$PY" - "$WORK/$2.json" <<'PY' | tee -a "$REPORT"
import json, sys
d = json.load(open(sys.argv[1]))
print("  %-12s %7s %7s %9s %12s" % ("stage", "tasks", "reused", "cpu s", "task wall s"))
for s in d["stages"]:
    print("  %-12s %7d %7d %9.1f %12.1f" % (s["stage"], s["total"], s.get("reused", 0), s["cpu_s"], s["wall_s"]))
PY
}

# One segment-join process per request, so that each one's peak is its
# own: the top's for the tree, then the one-task join's.
run scale-tree tree
declare -A HWM
HWM[join-top]=$(hwm join-top)
kill -TERM "${WPID[join-top]}"; wait "${WPID[join-top]}" 2>/dev/null || true
worker cnx-segment segment-join join-single
run scale-single single
HWM[join-single]=$(hwm join-single)

say ""
say "peak resident memory of the worker processes (VmHWM, MiB; an idle worker: $((idle_hwm / 1024)))"
say "  join-single  $((HWM[join-single] / 1024))   (the one-task join)"
say "  join-top     $((HWM[join-top] / 1024))   (the tree's top)"
for w in $(for i in $(seq "$NW"); do echo "blocks-$i"; done) $( [ "$MESHES" -eq 1 ] && echo manifest); do
  say "  $(printf '%-12s' "$w") $(($(hwm "$w") / 1024))"
done

say ""
say "each reduce task in its own process (bench_join, blocks of $BLOCK^3):"
"$BENCH/bench_join" "$DATA/fragments/v1" "$BLOCK" | sed 's/^/  /' | tee -a "$REPORT"

say ""
if same_tree "$DATA/segmentation/v1" "$DATA/segmentation/v2" >>"$REPORT" 2>&1; then
  say "segmentation/v2 (tree) = segmentation/v1 (one-task join): byte-identical, object for object"
else
  say "segmentation/v2 (tree) and segmentation/v1 (one-task join) DIFFER"
fi

stop_workers
kill -TERM "$CTL_PID" 2>/dev/null || true
wait "$CTL_PID" 2>/dev/null || true
say ""
say "ledger: $(sqlite3 "$WORK/ledger.db" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null; "$PY" - "$WORK/ledger.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
size = c.execute("PRAGMA page_count").fetchone()[0] * c.execute("PRAGMA page_size").fetchone()[0]
tasks = c.execute("SELECT count(*) FROM tasks").fetchone()[0]
rows = 0
for (t,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
    rows += c.execute('SELECT count(*) FROM "%s"' % t).fetchone()[0]
print("%d bytes, %d tasks: %.0f bytes and %.1f rows per task" % (size, tasks, size / tasks, rows / tasks))
PY
)"
say "report: $REPORT"
