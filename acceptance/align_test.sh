#!/usr/bin/env bash
# The whole chain from the microscope's tiles on the real stack: broker,
# controller and workers on this machine, a cnx-synth dataset whose sections
# are distorted as a microscope records them (rotation, shift, smooth warp,
# intensity drift; truth in tiles/sections.json), its tile set recorded by
# cnx-ingest, the `pipeline` workflow: montage -> alignment (align-match,
# align-solve, align-render) -> segmentation of the aligned image (raw-image
# path) -> meshes.
#  1. montage against the truth (montage_check.py: numpy + Pillow);
#  2. alignment against the truth (align_check.py: numpy + scipy), the
#     issue's targets printed met or MISSED beside checks with these bounds:
#     adjacent sections' residual jump <= 0.5 px median (the target), block
#     seams no worse than inside a block, section-to-section intensity
#     steps < 5 % (the target), no missing section reported "ok"; the
#     accuracy after one global rigid transform (target: every node within
#     1 px, median 0.25 px) and the Pearson r against the true image (target
#     0.95) held to regression bounds (CNX_ALIGN_MAX_MEDIAN 1.0 px,
#     CNX_ALIGN_MAX_ERROR 4 px, CNX_ALIGN_MIN_PEARSON 0.5; measured here at
#     0.674 / 2.52 px and 0.68): the tissue's own drift between sections
#     keeps it from the targets (docs/align.md, "Quality"), and against the
#     control (the same kernel on the undistorted true image) the same
#     bounds; the workers' transforms equal to the one-process kernel's,
#     bit for bit, and that kernel's the same matched in reverse;
#  3. the segmentation of the aligned image (segmentation-aligned/v1) against
#     the ground truth carried into the aligned frame: VI split and merge
#     (target 0.30 each, missed: 0.49 / 0.66 here) held to the regression
#     bound CNX_ALIGN_MAX_VI, 0.8 each;
#  4. again with other worker counts: every repeated task bit-identical
#     (alignment objects and aligned chunks included).
# Env: CNX_ALIGN_SHAPE (default 256,256,128: bench/align_synth.sh runs the
# 256 sections), CNX_ALIGN_SEED (7), CNX_ALIGN_MISSING (sections to lose),
# CNX_ALIGN_MAX_MEDIAN / _MAX_ERROR / _MIN_PEARSON / _MAX_VI (the bounds),
# CNX_ALIGN_SYNTH_ARGS (more cnx-synth arguments, e.g. "--resolution
# 8,8,30"; bench/align_synth.sh runs the anisotropic case).
source "$(dirname "$0")/lib.sh"
DATA=$WORK/data
SHAPE=${CNX_ALIGN_SHAPE:-256,256,128}
SEED=${CNX_ALIGN_SEED:-7}
MAXVI=${CNX_ALIGN_MAX_VI:-0.80}
MAXMED=${CNX_ALIGN_MAX_MEDIAN:-1.0}
MAXERR=${CNX_ALIGN_MAX_ERROR:-4.0}
MINR=${CNX_ALIGN_MIN_PEARSON:-0.5}
SUPPORT=${CNX_SUPPORT:?}
# A lost section (empty, bridged, never "ok"), e.g. 77. Not by default: a
# lost section cuts every segment through it in two (docs/align.md,
# "Limits"), which the VI bound is not set for; the solve's handling of
# lost sections is unit-tested (test_align_solve).
MISSING=${CNX_ALIGN_MISSING:-}
IFS=, read -r SX SY SZ <<<"$SHAPE"
# shellcheck disable=SC2086
"$BIN/cnx-synth" --out "$DATA" --shape "$SHAPE" --seed "$SEED" --quiet \
  ${MISSING:+--missing "$MISSING"} ${CNX_ALIGN_SYNTH_ARGS:-}
"$BIN/cnx-ingest" --tiles "$DATA/tiles/tiles.json" --out "$DATA/tileset" -q >/dev/null
start_broker 4
start_controller

reprocess() { # workflow, request id
  set +e
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow "$1" \
    --workflows "$SRC/workflows" --dataset "file://$DATA" \
    --roi "0,0,0,$SX,$SY,$SZ" --request "$2" --wait --json --timeout 1200 \
    >"$WORK/$2.json" 2>"$WORK/$2.err"
  RC=$?
  set -e
}

# 1. The chain, two workers per map stage.
start_pipeline_pool 2 a
t0=$SECONDS
reprocess pipeline chain-first
echo "pipeline (tiles to meshes): $((SECONDS - t0)) s"
check "pipeline exits 0 (rc $RC)" [ "$RC" -eq 0 ]
jq_py "$WORK/chain-first.json" '[(s["stage"], s["done"]) for s in d["stages"]]'
check "montage against the truth (montage_check.py: numpy + Pillow)" \
  "$PY" "$SRC/acceptance/montage_check.py" --tiles "$DATA/tileset/tiles.json" \
  --truth "$DATA/tiles/truth.json" --layer "$DATA/stitched/v1" \
  --image "$DATA/image" --sections "$DATA/tiles/sections.json" \
  --report "$WORK/montage-report.json"

# The same kernel in one process (align_tool, tests/support) over the
# stitched sections, matched forward and in reverse: the same documents,
# and the workers' transforms equal to them bit for bit. And over the
# dataset's true image (no distortion at all): the control, whose drift is
# the tissue's own (align_check.py --control).
"$PY" "$SRC/acceptance/align_sections.py" export "$DATA/stitched/v1" "$WORK/st"
read -r ORIGIN NSEC < "$WORK/st/origin"
mkdir -p "$WORK/fwd" "$WORK/rev" "$WORK/control"
"$SUPPORT/align_tool" --sections "$WORK/st" --count "$NSEC" --origin "$ORIGIN" --out "$WORK/fwd"
"$SUPPORT/align_tool" --sections "$WORK/st" --count "$NSEC" --origin "$ORIGIN" --out "$WORK/rev" --reverse
check "one process: sections matched forward and in reverse give the same documents" \
  cmp "$WORK/fwd/transforms.json" "$WORK/rev/transforms.json"
check "the workers' transforms equal the one-process kernel's, bit for bit" \
  "$PY" "$SRC/acceptance/align_sections.py" same "$DATA/alignment/v1" "$WORK/fwd/transforms.json"
"$PY" "$SRC/acceptance/align_sections.py" export "$DATA/image" "$WORK/truth"
read -r TORIGIN TSEC < "$WORK/truth/origin"
"$SUPPORT/align_tool" --sections "$WORK/truth" --count "$TSEC" --origin "$TORIGIN" --out "$WORK/control"

# 2 and 3. The alignment and the segmentation of the aligned image. The
# issue's targets are printed met or MISSED; the accuracy against the truth
# and the Pearson figure are held to regression bounds (the tissue's own
# drift keeps them from the targets: docs/align.md "Quality").
check "alignment and segmentation against the truth (align_check.py: numpy + scipy)" \
  "$PY" "$SRC/acceptance/align_check.py" --dataset "$DATA" \
  --stitched "$DATA/stitched/v1" --aligned "$DATA/aligned/v1" \
  --transforms "$DATA/alignment/v1" --block 128 --overlap 32 \
  --control "$WORK/control/transforms.json" \
  --max-median-error "$MAXMED" --max-error "$MAXERR" --min-pearson "$MINR" \
  --control-max-median "$MAXMED" --control-max-error "$MAXERR" \
  --segmentation "$DATA/segmentation-aligned/v1" \
  --max-vi-split "$MAXVI" --max-vi-merge "$MAXVI" --json "$WORK/align-report.json"
[ -z "${CNX_ALIGN_REPORT:-}" ] || cp "$WORK/align-report.json" "$CNX_ALIGN_REPORT"

# 4. Again, one worker per map stage: bit-identical.
stop_workers
start_pipeline_pool 1 b
reprocess pipeline chain-second
check "second run exits 0 (rc $RC)" [ "$RC" -eq 0 ]
check "second run: every repeated task bit-identical" "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["repeated"] > 0 and d["identical"] == d["repeated"], (d["repeated"], d["identical"])
assert not d["violations"], d["violations"]
print("  %d of %d repeated tasks identical" % (d["identical"], d["repeated"]))' "$WORK/chain-second.json"
stop_workers
finish
