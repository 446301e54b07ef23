#!/usr/bin/env bash
# The pipeline's cost end to end, through the real stack (not in CI):
# cnx-synth writes a distorted dataset with its microscope tiles, cnx-ingest
# records the tile set, and `cnx-reprocess --workflow pipeline` runs the
# whole chain on cnx-broker, cnx-controller and the stage workers of this
# machine (montage -> align-match / align-solve / align-render ->
# segmentation of the aligned image -> joins -> meshes). Then, from the
# controller's SQLite ledger (the stage_costs view and the attempts),
# bench/pipeline_costs.py prints per stage: tasks, CPU seconds, the voxels
# the stage processed and its MVx per core-second, each stage's share of the
# CPU; the end-to-end figure (the request's voxels / the CPU seconds of every
# stage); the projected core-hours per mm^3 at 8 x 8 x 30 nm (5.21e14
# voxels), and the cores that 10 mm^3 a week needs; and the request's wall
# time.
#
# The peer, in the same run and on the same bytes: --baseline BIN:SRC runs
# the same request with another build (BIN: its bin directory; SRC: its
# source tree, for the workflows and the acceptance helpers), e.g. the
# commit before a speed change built in a git worktree:
#   git worktree add /tmp/cnx-base REV && cmake -S /tmp/cnx-base \
#     -B /tmp/cnx-base/build -DCMAKE_BUILD_TYPE=Release && \
#     cmake --build /tmp/cnx-base/build -j2
#   bench/bench_pipeline.sh --baseline /tmp/cnx-base/build/bin:/tmp/cnx-base
# Without it, the figures of one build are printed alone.
#
# usage: bench/bench_pipeline.sh [--shape X,Y,Z] [--seed N]
#          [--workers N] [--baseline BIN:SRC] [--out DIR]
#   --shape     the volume (default 512,512,512)
#   --seed      cnx-synth's seed (default 5)
#   --workers   workers per map stage (default: the number of cores)
#   --out       where the report (pipeline-costs.txt, one .json per run)
#               is copied (default /tmp/bench-pipeline)
# Env: CNX_BIN (default <repo>/build/bin), CNX_ALLOW_DIRTY=1 to run the
# workers from a dirty tree, KEEP_WORK=1 keeps the work directory.
# 512^3 takes tens of minutes on two cores and about 3 GB of disk.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
export CNX_BIN=${CNX_BIN:-$SRC/build/bin}
SHAPE=512,512,512
SEED=5
NW=$(nproc 2>/dev/null || echo 2)
BASELINE=""
OUT=/tmp/bench-pipeline
usage() { sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
  --shape) SHAPE=$2; shift 2 ;;
  --seed) SEED=$2; shift 2 ;;
  --workers) NW=$2; shift 2 ;;
  --baseline) BASELINE=$2; shift 2 ;;
  --out) OUT=$2; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  *) echo "bench_pipeline: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if ! [[ $SHAPE =~ ^[0-9]+,[0-9]+,[0-9]+$ ]]; then
  echo "bench_pipeline: --shape '$SHAPE': expected X,Y,Z" >&2; exit 2
fi
if ! [[ $NW =~ ^[1-9][0-9]*$ ]]; then
  echo "bench_pipeline: --workers '$NW': expected a positive integer" >&2; exit 2
fi
if [ -n "$BASELINE" ] && ! [[ $BASELINE == *:* ]]; then
  echo "bench_pipeline: --baseline '$BASELINE': expected BIN:SRC" >&2; exit 2
fi
source "$SRC/acceptance/lib.sh"
mkdir -p "$OUT"
IFS=, read -r SX SY SZ <<<"$SHAPE"
DATA=$WORK/data
echo "cnx-synth $SHAPE seed $SEED (distorted sections, tiles) ..."
"$BIN/cnx-synth" --out "$DATA" --shape "$SHAPE" --seed "$SEED" --quiet
"$BIN/cnx-ingest" --tiles "$DATA/tiles/tiles.json" --out "$DATA/tileset" -q >/dev/null

# One run: a fresh broker, controller and pool from bin directory $2 and
# workflows of source tree $3, over a copy of the dataset's inputs in $4.
run_one() { # label, bin dir, source dir, data dir
  local label=$1 bin=$2 src=$3 data=$4 i t0 rc
  BIN=$bin
  WORKERS=()
  rm -rf "$WORK/keys" "$WORK/ckeys" "$WORK/trust" "$WORK/ledger.db"
  start_broker 4
  start_controller
  start_pipeline_pool "$NW" "$label"
  echo "$label: cnx-reprocess --workflow pipeline over $SHAPE, $NW workers per map stage ..."
  t0=$(date +%s.%N)
  set +e
  "$bin/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow pipeline \
    --workflows "$src/workflows" --dataset "file://$data" \
    --roi "0,0,0,$SX,$SY,$SZ" --request "bench-$label" --wait --json --timeout 14400 \
    >"$WORK/$label.json" 2>"$WORK/$label.err"
  rc=$?
  set -e
  echo "$label: exit $rc after $(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(date +%s.%N)") s"
  stop_workers
  kill -TERM "$CTL_PID" 2>/dev/null || true
  wait "$CTL_PID" 2>/dev/null || true
  kill -TERM "$BROKER_PID" 2>/dev/null || true
  wait "$BROKER_PID" 2>/dev/null || true
  cp "$WORK/ledger.db" "$WORK/$label.db"
  cp "$WORK/$label.json" "$OUT/$label.json"
  if [ "$rc" -ne 0 ]; then
    echo "$label: the request did not finish (exit $rc): $(tail -n 3 "$WORK/$label.err")" >&2
    return 1
  fi
}

# The inputs the pipeline reads (the tile set and the truth stays aside);
# each run writes its own layers into its own copy.
prepare() { # dir
  mkdir -p "$1"
  cp -r "$DATA/tiles" "$DATA/tileset" "$1/"
  cp "$DATA"/*.json "$1/" 2>/dev/null || true
}
runs=()
if [ -n "$BASELINE" ]; then
  prepare "$WORK/base"
  run_one baseline "${BASELINE%%:*}" "${BASELINE#*:}" "$WORK/base"
  runs+=("baseline=$WORK/baseline.db")
fi
prepare "$WORK/this"
run_one this "$CNX_BIN" "$SRC" "$WORK/this"
runs+=("this=$WORK/this.db")
"$PY" "$SRC/bench/pipeline_costs.py" --voxels "$((SX * SY * SZ))" "${runs[@]}" |
  tee "$OUT/pipeline-costs.txt"
