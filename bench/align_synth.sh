#!/usr/bin/env bash
# The long alignment runs (not in CI): the whole chain from the
# microscope's tiles through the real stack (acceptance/align_test.sh:
# broker, controller, workers; montage -> align-match / align-solve /
# align-render -> segmentation of the aligned image -> meshes), on a tall
# distorted cnx-synth stack, with align_check.py's figures collected and
# summarised:
#
#   iso    256 x 256 x 256, default distortions, isotropic 8 nm
#          (CNX_ALIGN_SHAPE=256,256,256, the acceptance test's own case);
#   aniso  the same at 8 x 8 x 30 nm: CNX_ALIGN_SYNTH_ARGS="--resolution
#          8,8,30" (classic style: its geometry is in voxels whatever the
#          resolution, so the sections and their distortions are those of
#          the iso case; only the nm coordinates and the info change);
#   hard   --style hard --resolution 8,8,30 (geometry in nm, sampled at
#          30 nm in z: neighbouring sections differ far more).
#
# usage: bench/align_synth.sh [iso|aniso|hard ...]   (default: iso aniso)
# Env: CNX_BIN (default <repo>/build/bin), CNX_ALLOW_DIRTY=1 to run
# workers from a dirty tree, CNX_ALIGN_SEED (7), ALIGN_SYNTH_SHAPE
# (256,256,256), ALIGN_SYNTH_OUT (default /tmp/align-synth: each case's
# log and align-report.json are copied there as CASE.log, CASE.json),
# ALIGN_SYNTH_KEEP=1 keeps each case's work directory (the dataset with
# stitched/v1, aligned/v1, segmentation/v1: about 1 GB at 256^3; a case
# that failed keeps it anyway, for its logs).
# Each case takes 5-15 minutes on two cores. Exit 1 if any case failed.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
export CNX_BIN=${CNX_BIN:-$SRC/build/bin}
PY=${CNX_PYTHON:-/usr/bin/python3}
OUT=${ALIGN_SYNTH_OUT:-/tmp/align-synth}
SHAPE=${ALIGN_SYNTH_SHAPE:-256,256,256}
mkdir -p "$OUT"
[ $# -gt 0 ] || set -- iso aniso
status=0

for case in "$@"; do
  case $case in
  iso) args="" ;;
  aniso) args="--resolution 8,8,30" ;;
  hard) args="--style hard --resolution 8,8,30" ;;
  *) echo "align_synth: unknown case $case (iso, aniso, hard)" >&2; exit 2 ;;
  esac
  echo "== $case: CNX_ALIGN_SHAPE=$SHAPE CNX_ALIGN_SYNTH_ARGS=\"$args\" acceptance/align_test.sh"
  # align_test.sh makes its own /tmp/cnx-acceptance-XXXXXX (lib.sh);
  # KEEP_WORK=1 keeps it, and an exported mktemp tells us which it is.
  : >"$OUT/$case.work"
  # shellcheck disable=SC2317  # called by align_test.sh, exported
  mktemp() {
    local d
    d=$(command mktemp "$@") || return
    case "$*" in *cnx-acceptance-*) echo "$d" >>"$ALIGN_SYNTH_WORKLIST" ;; esac
    echo "$d"
  }
  export -f mktemp
  t0=$SECONDS
  ALIGN_SYNTH_WORKLIST=$OUT/$case.work KEEP_WORK=1 CNX_ALIGN_SHAPE=$SHAPE \
    CNX_ALIGN_SYNTH_ARGS=$args \
    bash "$SRC/acceptance/align_test.sh" >"$OUT/$case.log" 2>&1
  rc=$?
  secs=$((SECONDS - t0))
  unset -f mktemp
  work=$(head -n1 "$OUT/$case.work")
  [ -f "$work/align-report.json" ] || work=""
  grep -E '^(ok|FAILED|pipeline|align_test)' "$OUT/$case.log" | sed 's/^/  /'
  if [ -z "$work" ]; then
    echo "  no align-report.json (rc $rc; log $OUT/$case.log)"
    status=1
    continue
  fi
  cp "$work/align-report.json" "$OUT/$case.json"
  cp "$work/chain-first.json" "$OUT/$case-chain.json" 2>/dev/null || true
  [ "$rc" -eq 0 ] || status=1
  if [ "${ALIGN_SYNTH_KEEP:-0}" != 1 ] && [ "$rc" -eq 0 ]; then
    rm -rf "$work"
    work="$work (removed; ALIGN_SYNTH_KEEP=1 keeps it)"
  fi
  "$PY" - "$OUT/$case.json" "$case" "$rc" "$secs" "$work" <<'EOF'
import json, sys
f = json.load(open(sys.argv[1]))
case, rc, secs, work = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
g = lambda k: f.get(k, float("nan"))
print("  %s: rc %s in %s s (work %s)" % (case, rc, secs, work))
print("  sections %s: ok %s, failed %s, empty %s" % (
    g("sections"), g("sections_ok"), f.get("sections_failed"),
    f.get("sections_empty")))
print("  accuracy (after one rigid G): median %.4f px, max %.4f px" %
      (g("error_median"), g("error_max")))
print("  jump: median %.4f px, max %.4f px (stitched before: median %.3f, "
      "max %.3f)" % (g("jump_median"), g("jump_max"), g("before_jump_median"),
                     g("before_jump_max")))
print("  block seams: median jump %.4f px at the handovers vs %.4f px "
      "inside the blocks" % (g("jump_seam_median"),
                              g("jump_interior_median")))
print("  Pearson r: min %.4f, median %.4f" % (g("pearson_min"),
                                              g("pearson_median")))
print("  intensity steps: after max %.4f, median %.4f (before max %.4f, "
      "median %.4f)" % (g("step_after_max"), g("step_after_median"),
                        g("step_before_max"), g("step_before_median")))
print("  segmentation of the aligned image: VI split %.4f, merge %.4f, "
      "ARE %.4f" % (g("vi_split"), g("vi_merge"), g("are")))
print("  failed checks: %s" % f.get("failed_checks"))
EOF
done
exit $status
