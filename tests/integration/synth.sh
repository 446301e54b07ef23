#!/usr/bin/env bash
# cnx-synth end to end: the same seed writes the same bytes into two
# directories (sha256 of every file), another seed differs, a re-run is a
# no-op, a directory holding another dataset is refused and left unchanged,
# bad arguments exit 2 with one line, and tests/py/synth_check.py reads the
# result with numpy/scikit-image and checks it against docs/synth.md.
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

# Truncated edge chunks on every axis, 2x2 tiles per section.
shape=160,144,64
"$SYNTH" --out "$tmp/a" --shape "$shape" --seed 5 --quiet >"$tmp/a.out"
"$SYNTH" --out "file://$tmp/b" --shape "$shape" --seed 5 --quiet >/dev/null
"$SYNTH" --out "$tmp/c" --shape "$shape" --seed 6 --quiet >/dev/null
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

# Re-running into the same directory is a no-op success.
"$SYNTH" --out "$tmp/a" --shape "$shape" --seed 5 --quiet >/dev/null ||
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
[ ! -e "$tmp/u" ] || fail "a usage error created the output directory"
"$SYNTH" --help | grep -q "usage: cnx-synth" || fail "--help"
echo "usage errors: exit 2 with one line each"

# A second, anisotropic dataset for the nm coordinates.
"$SYNTH" --out "$tmp/d" --shape 128,96,40 --seed 3 --resolution 4,4,40 --quiet >/dev/null

"$PY" "$SRC/tests/py/synth_check.py" "$tmp/a" "$tmp/d"
