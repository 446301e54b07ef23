#!/usr/bin/env bash
# The montage kernel on real EM: ten ISBI 2012 sections cut into 3 x 3 tile
# sets with known true positions, gains, offsets and nominal errors up to
# 20 px (tests/integration/montage_isbi.py cut), stitched by montage_tool
# (cnx_tileset_load, cnx_montage_solve, report and render), and scored
# against the truth by numpy/PIL (montage_isbi.py check): median pair
# residual < 1 px, every tile within 1 px of its true position after the
# section's mean translation, seam intensity steps < 5 % of the mean.
# The same run twice gives the same report and PNG bytes.
# Skipped (77) when the shared data is not beside the checkout.
# Env: CNX_SUPPORT (montage_tool), CNX_SHARED, CNX_SOURCE, CNX_PYTHON.
set -euo pipefail
: "${CNX_SUPPORT:?}" "${CNX_SOURCE:?}"
PY=${CNX_PYTHON:-/usr/bin/python3}
DATA=${CNX_SHARED:-$CNX_SOURCE/../shared}/data/isbi2012
if [ ! -d "$DATA/image" ]; then
  echo "skipped: no ISBI 2012 data at $DATA"
  exit 77
fi
WORK=$(mktemp -d /tmp/cnx-montage-isbi-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
SCRIPT="$CNX_SOURCE/tests/integration/montage_isbi.py"

"$PY" "$SCRIPT" cut --data "$DATA" --out "$WORK/tiles" --sections 10
mkdir -p "$WORK/out" "$WORK/again"
"$CNX_SUPPORT/montage_tool" --tiles "$WORK/tiles/tiles.json" \
  --out "$WORK/out" --render
"$CNX_SUPPORT/montage_tool" --tiles "$WORK/tiles/tiles.json" \
  --out "$WORK/again" --render --section 3 > /dev/null
for f in z00003.json z00003.png z00003.box.json; do
  if ! cmp -s "$WORK/out/$f" "$WORK/again/$f"; then
    echo "FAILED: $f differs between two runs"
    exit 1
  fi
done
echo "deterministic: section 3 report and render identical across runs"
"$PY" "$SCRIPT" check --tiles "$WORK/tiles" --reports "$WORK/out"
