#!/usr/bin/env bash
# cnx-synth's section distortions against an independent numpy rebuild
# (tests/py/synth_sections.py, from docs/synth.md "Section distortions"
# alone): on 96x80x8 datasets, distorted (the default), undistorted
# (--distort none) and with lost sections (--missing), every tile equals
# g * S_z + o within the noise of docs/synth.md, S_z rebuilt in numpy from
# the image layer and tiles/sections.json; missing sections have no tiles
# and are marked in sections.json; none gives identity transforms and
# S_z = I_z. Also the hard style at 8x8x30 nm, and the CLI's errors.
set -euo pipefail

BIN=${CNX_BIN:?CNX_BIN must name the directory of the built tools}
PY=${CNX_PYTHON:-/usr/bin/python3}
SRC=${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}
SYNTH="$BIN/cnx-synth"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "synth_sections.sh: FAILED: $*" >&2
    exit 1
}

"$SYNTH" --out "$tmp/d" --shape 96,80,8 --seed 3 --quiet >/dev/null
"$SYNTH" --out "$tmp/n" --shape 96,80,8 --seed 3 --distort none --quiet >/dev/null
"$SYNTH" --out "$tmp/m" --shape 96,80,8 --seed 3 --missing 0,5 --quiet >"$tmp/m.out"
"$SYNTH" --out "$tmp/h" --shape 96,80,8 --seed 3 --style hard --resolution 8,8,30 \
    --missing 7 --quiet >/dev/null
grep -q "6 tiles" "$tmp/m.out" || fail "--missing 0,5: $(cat "$tmp/m.out")"
grep -q '"distort":{' "$tmp/d/synth.json" || fail "synth.json lacks distort: $(cat "$tmp/d/synth.json")"
! grep -q '"distort"' "$tmp/n/synth.json" || fail "--distort none: synth.json names it"
grep -q '"missing":\[0,5\]' "$tmp/m/synth.json" || fail "synth.json lacks missing"
[ ! -e "$tmp/m/tiles/z00005" ] || fail "a missing section has tiles"
# The layers do not depend on the distortion: only the tiles do.
for l in gt image boundary cleft psd; do
    diff -r -q "$tmp/d/$l" "$tmp/n/$l" >/dev/null || fail "layer $l depends on --distort"
done
"$PY" "$SRC/tests/py/synth_sections.py" check "$tmp/d" "$tmp/n" "$tmp/m" "$tmp/h"

# Usage errors: exit 2, one line.
for args in "--distort some" "--missing 8" "--missing 1,1" "--missing 0,1,2,3,4,5,6,7" \
    "--missing -1" "--missing 1," "--missing"; do
    set +e
    # shellcheck disable=SC2086
    "$SYNTH" --out "$tmp/u" --shape 96,80,8 $args >"$tmp/out" 2>"$tmp/err"
    rc=$?
    set -e
    [ "$rc" -eq 2 ] || fail "cnx-synth $args: exit $rc, want 2"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "cnx-synth $args: stderr: $(cat "$tmp/err")"
done
[ ! -e "$tmp/u" ] || fail "a usage error created the output directory"
echo "synth_sections: distorted, undistorted, missing and hard datasets agree with numpy"
