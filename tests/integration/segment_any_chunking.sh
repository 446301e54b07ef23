#!/usr/bin/env bash
# Issue 14, any chunking: the same volume stored as 64^3, 128x128x64 and
# 128^3 chunks gives segmentations equal up to relabelling within 0.02 VI.
# One cnx-synth volume (256x256x128 at 8,8,30 nm, --style hard, seed 7)
# written three times with --chunk (the voxels must not change: checked),
# each segmented by the one-process chunked method (tests/support/
# segjoin_tool --chunked: the workers' bytes, acceptance/pipeline_test.sh)
# with workflows/segmentation.json's parameters in chunks of its layer and
# the halo the planner derives for that workflow on that layer
# (tests/support/plan_tool; the workflow pins none). Checked with numpy and
# scikit-image only: for every pair of layouts, VI split and VI merge
# (skimage.metrics.variation_of_information, both directions) within a
# bound: 0.02 (the issue's target) between 128x128x64 and 128^3, which
# meet it; 64^3 against the other two MISSES it (join version 4: split
# 0.148, merge 0.072; version 5, whose seam edges decide alone: split
# 0.178, merge 0.104: chunks of 64 sections of 30 nm cut more objects,
# and agglomeration is global while a halo is local), so that pair is held
# to 0.20 / 0.11, a bound against regressions, not the target (issue 14's
# and issue 18's closing notes).
# Reported: each layout and the whole-volume run (segjoin_tool --whole)
# against gt (CREMI convention: gt 0 ignored).
# Skipped (77) without numpy or scikit-image.
# Env: CNX_BIN, CNX_SUPPORT, CNX_SOURCE, CNX_PYTHON.
set -euo pipefail
: "${CNX_BIN:?}" "${CNX_SUPPORT:?}" "${CNX_SOURCE:?}"
PY=${CNX_PYTHON:-/usr/bin/python3}
"$PY" -c 'import numpy, skimage' 2>/dev/null ||
  { echo "skipped: numpy or scikit-image missing"; exit 77; }

work=$(mktemp -d "${TMPDIR:-/tmp}/cnx-any-chunking-XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

SHAPE=256,256,128
RES=8,8,30
LAYOUTS="64,64,64 128,128,64 128,128,128"
WF=$CNX_SOURCE/workflows/segmentation.json
PARAMS=$("$PY" -c 'import json, sys
print(json.dumps(json.load(open(sys.argv[1]))["stages"][0]["parameters"]))' "$WF")

t0=$SECONDS
halo=
for c in $LAYOUTS; do
  "$CNX_BIN/cnx-synth" --out "$work/d$c" --shape "$SHAPE" --resolution "$RES" \
    --style hard --seed 7 --chunk "$c" --quiet >/dev/null
  grep -q "\"chunk_sizes\":\[\[$c\]\]" "$work/d$c/boundary/info" ||
    fail "cnx-synth --chunk $c: $(cat "$work/d$c/boundary/info")"
  h=$("$CNX_SUPPORT/plan_tool" --workflow "$WF" --dataset "file://$work/d$c" --halo fragments)
  [ -z "$halo" ] || [ "$h" = "$halo" ] || fail "derived halo $h for $c, $halo before"
  halo=$h
  "$CNX_SUPPORT/segjoin_tool" --layer "file://$work/d$c/boundary" \
    --params "$PARAMS" --halo "$h" --threads 2 --chunked "$work/$c.u64" \
    2>"$work/$c.err" >/dev/null || fail "segjoin_tool on $c: $(cat "$work/$c.err")"
  cat "$work/$c.err"
  grep -q "resolution 8,8,30, chunk $c, halo $h\$" "$work/$c.err" ||
    fail "segjoin_tool did not run at $RES in chunks of $c"
done
"$CNX_SUPPORT/segjoin_tool" --layer "file://$work/d128,128,128/boundary" \
  --params "$PARAMS" --whole "$work/whole.u32" >/dev/null 2>&1 ||
  fail "segjoin_tool --whole"
echo "derived halo: $halo; synth and segmentation: $((SECONDS - t0)) s"

"$PY" - "$work" "$CNX_SOURCE/tests/py" $LAYOUTS <<'PY'
import itertools
import sys

import numpy as np
from skimage.metrics import variation_of_information

work, layouts = sys.argv[1], sys.argv[3:]
sys.path.insert(0, sys.argv[2])
from layer_ref import read_layer  # noqa: E402

# The same volume in every layout: boundary and gt voxel for voxel.
_, gt = read_layer("%s/d%s/gt" % (work, layouts[0]))
_, boundary = read_layer("%s/d%s/boundary" % (work, layouts[0]))
for c in layouts[1:]:
    assert np.array_equal(read_layer("%s/d%s/gt" % (work, c))[1], gt), c
    assert np.array_equal(read_layer("%s/d%s/boundary" % (work, c))[1],
                          boundary), c
print("ok: the boundary and gt layers are the same voxels in %s"
      % ", ".join(layouts))


def dense(seg):
    """The same partition with ids 1..n (the chunked ids are packed
    coordinates, too large for scikit-image's contingency table)."""
    inv = np.unique(seg, return_inverse=True)[1]
    return (inv.reshape(seg.shape) + 1).astype(np.uint32)


segs = {c: dense(np.fromfile("%s/%s.u64" % (work, c), "<u8").reshape(gt.shape))
        for c in layouts}
whole = dense(np.fromfile(work + "/whole.u32", "<u4").reshape(gt.shape))
mask = gt != 0
g = dense(gt[mask])
print("against gt (VI split / merge, gt 0 ignored):")
for name, s in [("whole volume", whole)] + [(c, segs[c]) for c in layouts]:
    split, merge = variation_of_information(g, dense(s[mask]))
    print("  %-12s %7.4f %7.4f  (%d segments)"
          % (name, split, merge, len(np.unique(s))))
failed = 0
print("between layouts (VI of the second against the first: split, merge):")
for a, b in itertools.combinations(layouts, 2):
    split, merge = variation_of_information(segs[a], segs[b])
    # The 64^3 layout misses the 0.02 target (see the header).
    bound = (0.20, 0.11) if "64,64,64" in (a, b) else (0.02, 0.02)
    ok = split <= bound[0] and merge <= bound[1]
    failed += not ok
    print("%s: %s vs %s: split %.4f, merge %.4f (<= %.2f / %.2f%s)"
          % ("ok" if ok else "FAILED", b, a, split, merge, bound[0], bound[1],
             "" if bound[0] == 0.02 else "; target 0.02 missed"))
for c in layouts:
    split, merge = variation_of_information(whole, segs[c])
    print("  (%s vs the whole volume: split %.4f, merge %.4f)"
          % (c, split, merge))
sys.exit(1 if failed else 0)
PY
