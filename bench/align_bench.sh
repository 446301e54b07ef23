#!/usr/bin/env bash
# Section alignment beside scikit-image on the same section pairs: our
# cnx_align_match_sections (build/bench/bench_align) and
# phase_cross_correlation + optical_flow_ilk (bench/align_peer.py), both on
# one core, both scored against the truth of a distorted cnx-synth dataset.
#
#  1. cnx-synth writes the dataset (the peer reads its `image` layer and
#     tiles/sections.json, the truth U_z);
#  2. bench_align generates the same dataset in memory, records the
#     sections S_z as cnx-synth does before cutting tiles, writes them as
#     raw files + a list, and times match (per adjacent pair), solve and
#     render (per section);
#  3. one section is checked against tests/py/synth_sections.py's numpy
#     rebuild (the two datasets are the same);
#  4. align_peer.py --sections-from reads bench_align's files (the same
#     pixels), OMP_NUM_THREADS=1;
#  5. a table: Mpx/s per core and node error (median / p99 / max px) for
#     both, and the ratios, measured in this run.
#
# Env: CNX_BUILD (default <repo>/build), CNX_PYTHON (default /usr/bin/python3:
# Debian's numpy, scipy and scikit-image), ALIGN_BENCH_SHAPE (256,256,16),
# ALIGN_BENCH_SEED (11; the acceptance test uses 7), ALIGN_BENCH_REPEAT (3),
# ALIGN_BENCH_SYNTH_ARGS (more cnx-synth arguments, passed to both, of
# --style and --resolution), ALIGN_BENCH_PEER_ARGS (e.g. "--tune
# 11,16,24,32,48"; default: the peer's radius 32), ALIGN_BENCH_PARAMS
# (our parameters as JSON), ALIGN_BENCH_BASELINE (a bench_align built from
# an earlier version: run on the same arguments after ours, its speed and
# error printed beside ours), KEEP_WORK=1 keeps the work directory.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${CNX_BUILD:-$SRC/build}
PY=${CNX_PYTHON:-/usr/bin/python3}
SHAPE=${ALIGN_BENCH_SHAPE:-256,256,16}
SEED=${ALIGN_BENCH_SEED:-11}
REPEAT=${ALIGN_BENCH_REPEAT:-3}
read -r -a EXTRA <<<"${ALIGN_BENCH_SYNTH_ARGS:-}"
read -r -a PEER_ARGS <<<"${ALIGN_BENCH_PEER_ARGS:-}"
for exe in "$BUILD/bin/cnx-synth" "$BUILD/bench/bench_align"; do
  [ -x "$exe" ] || { echo "align_bench: $exe missing (set CNX_BUILD)" >&2; exit 1; }
done
WORK=$(mktemp -d /tmp/align-bench.XXXXXX)
if [ "${KEEP_WORK:-0}" = 1 ]; then
  echo "work: $WORK"
else
  trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$WORK/sections"

echo "== cnx-synth --shape $SHAPE --seed $SEED ${EXTRA[*]:-}"
"$BUILD/bin/cnx-synth" --out "$WORK/data" --shape "$SHAPE" --seed "$SEED" \
  --quiet "${EXTRA[@]}" >/dev/null

echo "== ours: bench_align (one thread)"
BARGS=(--shape "$SHAPE" --seed "$SEED" --repeat "$REPEAT"
  --out "$WORK/sections" --json "$WORK/ours.json" "${EXTRA[@]}")
[ -n "${ALIGN_BENCH_PARAMS:-}" ] && BARGS+=(--params "$ALIGN_BENCH_PARAMS")
"$BUILD/bench/bench_align" "${BARGS[@]}"
if [ -n "${ALIGN_BENCH_BASELINE:-}" ]; then
  echo "== baseline: $ALIGN_BENCH_BASELINE (one thread)"
  mkdir -p "$WORK/base-sections"
  BASE_ARGS=("${BARGS[@]}")
  for i in "${!BASE_ARGS[@]}"; do
    case "${BASE_ARGS[$i]}" in
      "$WORK/sections") BASE_ARGS[$i]="$WORK/base-sections" ;;
      "$WORK/ours.json") BASE_ARGS[$i]="$WORK/base.json" ;;
    esac
  done
  "$ALIGN_BENCH_BASELINE" "${BASE_ARGS[@]}" | grep -E '^ours   : (match|error)'
fi

echo "== the same sections as tests/py/synth_sections.py rebuilds"
"$PY" - "$SRC" "$WORK" <<'EOF'
import json, os, sys
import numpy as np
src, work = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(src, "tests", "py"))
import synth_sections
from layer_ref import read_layer
doc = synth_sections.load(os.path.join(work, "data", "tiles", "sections.json"))
_, image = read_layer(os.path.join(work, "data", "image"))
lst = json.load(open(os.path.join(work, "sections", "sections.json")))
for e in (lst["sections"][0], lst["sections"][-1]):
    z = e["z"]
    ours = np.fromfile(os.path.join(work, "sections", e["file"]), np.uint8)
    ref = synth_sections.distort_section(image[z], doc["sections"][z],
                                         doc["shape"])
    ref = np.asarray(ref, np.uint8).ravel()
    if not np.array_equal(ours, ref):
        sys.exit("section %d differs from the numpy rebuild in %d pixels"
                 % (z, int(np.count_nonzero(ours != ref))))
print("  sections %d and %d identical" % (lst["sections"][0]["z"],
                                         lst["sections"][-1]["z"]))
EOF

echo "== peer: align_peer.py (OMP_NUM_THREADS=1)"
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \
  "$PY" "$SRC/bench/align_peer.py" --dataset "$WORK/data" \
  --sections-from "$WORK/sections/sections.json" --json "$WORK/peer.json" \
  "${PEER_ARGS[@]}"

echo "== side by side (same pairs, same pixels, one core each, this run)"
BASE_JSON=()
[ -n "${ALIGN_BENCH_BASELINE:-}" ] && BASE_JSON=("$WORK/base.json")
"$PY" - "$WORK/ours.json" "$WORK/peer.json" "${BASE_JSON[@]}" <<'EOF'
import json, sys
o = json.load(open(sys.argv[1]))
p = json.load(open(sys.argv[2]))["best"]
row = "%-44s %9s %8s %8s %8s %7s"
print(row % ("method", "Mpx/s", "median", "p99", "max", "nodes"))
print(row % ("cnx_align_match_sections (valid nodes)",
             "%.2f" % o["mpx_per_s"], "%.3f" % o["error_median"],
             "%.3f" % o["error_p99"], "%.3f" % o["error_max"],
             "%d/%d" % (o["valid"], o["nodes"])))
print(row % ("cnx_align_match_sections (>= %d px inside)" % o["margin"], "",
             "%.3f" % o["inside_error_median"], "%.3f" % o["inside_error_p99"],
             "%.3f" % o["inside_error_max"],
             "%d/%d" % (o["valid_inside"], o["nodes_inside"])))
print(row % ("skimage pcc + optical_flow_ilk r=%d" % p["radius"],
             "%.2f" % p["mpx_per_s"], "%.3f" % p["error_median"],
             "%.3f" % p["error_p99"], "%.3f" % p["error_max"],
             "%d/%d" % (p["nodes"], p["nodes"])))
if len(sys.argv) > 3:
    b = json.load(open(sys.argv[3]))
    print(row % ("baseline bench_align (>= %d px inside)" % b["margin"],
                 "%.2f" % b["mpx_per_s"], "%.3f" % b["inside_error_median"],
                 "%.3f" % b["inside_error_p99"], "%.3f" % b["inside_error_max"],
                 "%d/%d" % (b["valid_inside"], b["nodes_inside"])))
    print("ratio (ours / baseline): speed %.1fx" % (o["mpx_per_s"] /
                                                   b["mpx_per_s"]))
print("ratios (ours / peer): speed %.1fx; median error %.2f, max error %.2f "
      "(>= %d px inside)" % (o["mpx_per_s"] / p["mpx_per_s"],
                              o["inside_error_median"] / p["error_median"],
                              o["inside_error_max"] / p["error_max"],
                              o["margin"]))
print("ours also: solve %.2f ms and render %.2f ms per section; residual "
      "jump of the solved stack median %.3f px, max %.3f (>= %d px inside: "
      "median %.3f, max %.3f)"
      % (1e3 * o["solve_seconds_per_section"],
         1e3 * o["render_seconds_per_section"], o["jump_median"],
         o["jump_max"], o["margin"], o["inside_jump_median"],
         o["inside_jump_max"]))
print("errors in px at the section-b nodes (ours: its grid, rejected nodes "
      "left out; peer: every node at stride 32, >= 32 px inside), Mpx/s = "
      "pixels of b / median seconds per pair")
EOF
