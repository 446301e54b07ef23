#!/usr/bin/env bash
# cnx-synth end to end: the same seed writes the same bytes into two
# directories (sha256 of every file), another seed differs, the classic
# style with --distort none still writes the bytes it wrote before the hard
# style and section distortions existed (a digest recorded here), the
# distorted default writes the same layers, its own recorded bytes and
# only its tiles differ, a re-run is a no-op, a directory holding another
# dataset is refused and left unchanged, bad arguments exit 2 with one line,
# --chunk changes the chunking and nothing else, and tests/py/synth_check.py
# reads the results with numpy/scipy/scikit-image and checks them against
# docs/synth.md: the classic datasets, and hard-style ones at 8x8x30 nm
# (radii in nm, gaps, false membranes, sections) and 8x8x8 nm (the same
# physical statistics).
set -euo pipefail

BIN=${CNX_BIN:?CNX_BIN must name the directory of the built tools}
PY=${CNX_PYTHON:-/usr/bin/python3}
SRC=${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}
SYNTH="$BIN/cnx-synth"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "synth.sh: FAILED: $*" >&2
    exit 1
}

digests() {
    (cd "$1" && find . -type f | LC_ALL=C sort | xargs sha256sum)
}

# Truncated edge chunks on every axis, 2x2 tiles per section. a, b and c
# are undistorted (--distort none: the classic bytes), ad and bd the
# distorted default.
shape=160,144,64
"$SYNTH" --out "$tmp/a" --shape "$shape" --seed 5 --distort none --quiet >"$tmp/a.out"
"$SYNTH" --out "file://$tmp/b" --shape "$shape" --seed 5 --distort none --quiet >/dev/null
"$SYNTH" --out "$tmp/c" --shape "$shape" --seed 6 --distort none --quiet >/dev/null
"$SYNTH" --out "$tmp/ad" --shape "$shape" --seed 5 --quiet >/dev/null
"$SYNTH" --out "file://$tmp/bd" --shape "$shape" --seed 5 --distort default --quiet >/dev/null
grep -q "objects, .* synapses, 256 tiles" "$tmp/a.out" ||
    fail "summary line: $(cat "$tmp/a.out")"

digests "$tmp/a" >"$tmp/a.sha"
digests "$tmp/b" >"$tmp/b.sha"
digests "$tmp/c" >"$tmp/c.sha"
[ "$(wc -l <"$tmp/a.sha")" -gt 250 ] || fail "too few files written"
diff -q "$tmp/a.sha" "$tmp/b.sha" >/dev/null ||
    fail "same seed, different bytes: $(diff "$tmp/a.sha" "$tmp/b.sha" | head -3)"
! diff -q "$tmp/a.sha" "$tmp/c.sha" >/dev/null || fail "different seeds, same bytes"
[ -z "$(find "$tmp/a" -name '.tmp.*')" ] || fail "temporary files left behind"
echo "determinism: $(wc -l <"$tmp/a.sha") files identical for seed 5, seed 6 differs"

# The classic style's bytes may not change within CNX_SYNTH_VERSION 1: the
# digest of the sorted sha256 list of every file but the tile PNGs (whose
# bytes also depend on zlib's deflate) and tiles/sections.json (which did
# not exist then), recorded with the tool as it was before the hard style,
# --chunk and --distort existed; --distort none writes those bytes.
classic_digest=124344c80bb4f81091a14cc17c9933aeb34ac52de5c996f2a86966c6df83d0f5
got=$(grep -v -e '\.png$' -e ' \./tiles/sections\.json$' "$tmp/a.sha" | sha256sum | cut -d' ' -f1)
[ "$got" = "$classic_digest" ] || fail "classic bytes changed: $got, want $classic_digest"
"$SYNTH" --out "$tmp/a2" --shape "$shape" --seed 5 --style classic --chunk 128,128,128 \
    --distort none --quiet >/dev/null
digests "$tmp/a2" | diff -q - "$tmp/a.sha" >/dev/null ||
    fail "--style classic --chunk 128,128,128 differs from the defaults"
rm -rf "$tmp/a2"
echo "classic: bytes as recorded, explicit defaults identical"

# The distorted default: deterministic; the same layers, synapses,
# tiles.json and truth.json (tile positions, gains and offsets come from
# their own streams) as --distort none; synth.json, sections.json and every
# tile PNG differ. Its non-PNG bytes are recorded too, so a change to the
# distortion model shows here.
digests "$tmp/ad" >"$tmp/ad.sha"
digests "$tmp/bd" | diff -q - "$tmp/ad.sha" >/dev/null || fail "distorted: same seed, different bytes"
diff <(grep -e ' \./gt/' -e ' \./image/' -e ' \./boundary/' -e ' \./cleft/' -e ' \./psd/' \
        -e ' \./gt-synapses\.json$' -e ' \./tiles/truth\.json$' -e ' \./tiles/tiles\.json$' "$tmp/a.sha") \
    <(grep -e ' \./gt/' -e ' \./image/' -e ' \./boundary/' -e ' \./cleft/' -e ' \./psd/' \
        -e ' \./gt-synapses\.json$' -e ' \./tiles/truth\.json$' -e ' \./tiles/tiles\.json$' "$tmp/ad.sha") \
    >/dev/null || fail "--distort changed a layer, the synapses or the tile positions"
n=$(diff <(grep '\.png$' "$tmp/a.sha") <(grep '\.png$' "$tmp/ad.sha") | grep -c '^>' || true)
[ "$n" -eq 256 ] || fail "distorted: $n of 256 tiles differ from the undistorted ones"
distorted_digest=619cecc72f06ca654c801dfb9a0e3f577dde9932b4270523eab4fab4071752ba
got=$(grep -v '\.png$' "$tmp/ad.sha" | sha256sum | cut -d' ' -f1)
[ "$got" = "$distorted_digest" ] || fail "distorted bytes changed: $got, want $distorted_digest"
echo "distorted: deterministic, bytes as recorded, layers and tile positions as undistorted"

# Re-running into the same directory is a no-op success.
"$SYNTH" --out "$tmp/a" --shape "$shape" --seed 5 --distort none --quiet >/dev/null ||
    fail "re-run of the same dataset failed"
# Another dataset into it: exit 1, one line naming the conflict, no change.
set +e
"$SYNTH" --out "$tmp/a" --shape "$shape" --seed 6 --quiet >/dev/null 2>"$tmp/err"
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "other dataset into a used directory: exit $rc, want 1"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "want one error line, got: $(cat "$tmp/err")"
grep -q "different" "$tmp/err" || fail "error does not say what: $(cat "$tmp/err")"
digests "$tmp/a" | diff -q - "$tmp/a.sha" >/dev/null || fail "refused run changed files"
# The distorted dataset of the same seed is another dataset too.
set +e
"$SYNTH" --out "$tmp/a" --shape "$shape" --seed 5 --quiet >/dev/null 2>"$tmp/err"
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "different" "$tmp/err" ||
    fail "distorted into an undistorted directory: exit $rc, $(cat "$tmp/err")"
digests "$tmp/a" | diff -q - "$tmp/a.sha" >/dev/null || fail "refused run changed files"
echo "write-once: re-run ok, other dataset refused: $(cat "$tmp/err")"

# Usage errors: exit 2 and exactly one line on stderr.
usage_fails() {
    set +e
    "$SYNTH" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    set -e
    [ "$rc" -eq 2 ] || fail "cnx-synth $*: exit $rc, want 2"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "cnx-synth $*: stderr: $(cat "$tmp/err")"
    [ ! -s "$tmp/out" ] || fail "cnx-synth $*: wrote to stdout"
}
usage_fails
usage_fails --shape 8,8,8
usage_fails --out "$tmp/u"
usage_fails --out "$tmp/u" --shape 8,8
usage_fails --out "$tmp/u" --shape 8,8,8,8
usage_fails --out "$tmp/u" --shape 8,0,8
usage_fails --out "$tmp/u" --shape 8,-1,8
usage_fails --out "$tmp/u" --shape 8,8,4097
usage_fails --out "$tmp/u" --shape 8,8,x
usage_fails --out "$tmp/u" --shape " 8,8,8"
usage_fails --out "$tmp/u" --shape 4096,4096,4096
usage_fails --out "$tmp/u" --shape 8,8,8 --seed abc
usage_fails --out "$tmp/u" --shape 8,8,8 --seed -1
usage_fails --out "$tmp/u" --shape 8,8,8 --seed 12x
usage_fails --out "$tmp/u" --shape 8,8,8 --seed 99999999999999999999
usage_fails --out "$tmp/u" --shape 8,8,8 --seed
usage_fails --out "$tmp/u" --shape 8,8,8 --resolution 4,4
usage_fails --out "$tmp/u" --shape 8,8,8 --resolution 4,0,40
usage_fails --out "$tmp/u" --shape 8,8,8 --resolution 4,nan,40
usage_fails --out "$tmp/u" --shape 8,8,8 --frobnicate
usage_fails --out "$tmp/u" --shape 8,8,8 --shape 8,8,8
usage_fails --out "$tmp/u" --shape 8,8,8 --style fancy
usage_fails --out "$tmp/u" --shape 8,8,8 --style
usage_fails --out "$tmp/u" --shape 8,8,8 --style hard --resolution 1,8,8
usage_fails --out "$tmp/u" --shape 8,8,8 --style hard --resolution 8,8,201
usage_fails --out "$tmp/u" --shape 8,8,8 --chunk 0,64,64
usage_fails --out "$tmp/u" --shape 8,8,8 --chunk 64,4097,64
usage_fails --out "$tmp/u" --shape 8,8,8 --chunk 64,64
usage_fails --out "$tmp/u" --shape 8,8,8 --chunk 64,64,x
usage_fails --out "$tmp/u" --shape 8,8,8 --chunk 64,64,-1
[ ! -e "$tmp/u" ] || fail "a usage error created the output directory"
"$SYNTH" --help >"$tmp/help"
for want in "usage: cnx-synth" "--style S" "classic (default)" "hard:" \
    "--chunk X,Y,Z" "1..4096" "(default 128,128,128)" "2..200 nm" \
    "--distort D" "default (the default)" "none:" "tiles/sections.json" \
    "--missing Z[,Z...]"; do
    grep -qF -- "$want" "$tmp/help" || fail "--help lacks '$want'"
done
echo "usage errors: exit 2 with one line each"

# A second, anisotropic dataset for the nm coordinates.
"$SYNTH" --out "$tmp/d" --shape 128,96,40 --seed 3 --resolution 4,4,40 --quiet >/dev/null

# --chunk: odd sizes (not multiples of the 8^3 compressed_segmentation
# blocks), the same voxels; into a directory with other chunks: refused.
"$SYNTH" --out "$tmp/ac" --shape "$shape" --seed 5 --chunk 100,50,30 --quiet >/dev/null
n=$(find "$tmp/ac/gt" -type f | wc -l)
[ "$n" -eq $((1 + 2 * 3 * 3)) ] || fail "--chunk 100,50,30: $n gt files, want 19"
set +e
"$SYNTH" --out "$tmp/ac" --shape "$shape" --seed 5 --quiet >/dev/null 2>"$tmp/err"
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "different" "$tmp/err" ||
    fail "default chunks into a --chunk directory: exit $rc, $(cat "$tmp/err")"

# The hard style at 8x8x30 nm: deterministic, --chunk changes only the
# chunking; at 8x8x8 nm over the same physical box for --same-physics.
hard=(--shape 128,128,64 --resolution 8,8,30 --style hard --seed 7 --quiet)
"$SYNTH" --out "$tmp/h" "${hard[@]}" >"$tmp/h.out"
"$SYNTH" --out "$tmp/h2" "${hard[@]}" >/dev/null
"$SYNTH" --out "$tmp/hc" "${hard[@]}" --chunk 64,64,32 >/dev/null
"$SYNTH" --out "$tmp/hi" --shape 128,128,240 --resolution 8,8,8 --style hard --seed 7 \
    --quiet >/dev/null
grep -q "objects, .* synapses, 64 tiles" "$tmp/h.out" || fail "hard summary: $(cat "$tmp/h.out")"
digests "$tmp/h" >"$tmp/h.sha"
digests "$tmp/h2" | diff -q - "$tmp/h.sha" >/dev/null || fail "hard style: same seed, different bytes"
grep -q '"style":"hard"' "$tmp/h/synth.json" || fail "hard synth.json: $(cat "$tmp/h/synth.json")"
grep -q '"chunk":\[64,64,32\]' "$tmp/hc/synth.json" || fail "chunk synth.json: $(cat "$tmp/hc/synth.json")"
n=$(find "$tmp/hc/boundary" -type f | wc -l)
[ "$n" -eq 9 ] || fail "--chunk 64,64,32: $n boundary files, want 9"
# Tiles and synapses do not depend on the chunking either.
(cd "$tmp/h" && find tiles gt-synapses.json -type f | LC_ALL=C sort | xargs sha256sum) >"$tmp/ht.sha"
(cd "$tmp/hc" && find tiles gt-synapses.json -type f | LC_ALL=C sort | xargs sha256sum) |
    diff -q - "$tmp/ht.sha" >/dev/null || fail "--chunk changed tiles or synapses"
echo "hard style: deterministic, $(wc -l <"$tmp/h.sha") files; --chunk changes the chunks only"

"$PY" "$SRC/tests/py/synth_check.py" "$tmp/a" "$tmp/ad" "$tmp/d" "$tmp/h" "$tmp/hi"
"$PY" "$SRC/tests/py/synth_check.py" --same-voxels "$tmp/a" "$tmp/ac"
"$PY" "$SRC/tests/py/synth_check.py" --same-voxels "$tmp/h" "$tmp/hc"
"$PY" "$SRC/tests/py/synth_check.py" --same-physics "$tmp/h" "$tmp/hi"
