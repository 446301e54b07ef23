#!/bin/bash
# sharded_write.sh - cross-check the shard encoder (cnx_shard_encode,
# cnx/sharded.h) with an independent Python reader (tests/py/sharded_ref.py
# read, written from the specification).
#
# The Python writer makes its sharded sets (both hashes, raw and gzip
# minishard indexes and data, one to 512 shards, empty chunks); for each,
# sharded_tool write encodes the same chunks afresh with cnx's encoder, one
# file a non-empty shard; the Python reader must find every chunk byte for
# byte, no chunk never written, no empty shard file, every chunk in its own
# shard and minishard, ids increasing, no overlaps, gzip mtime 0; cnx's own
# reader must read them too; and a second encoding must be byte-identical.
# Env: CNX_SUPPORT (dir of sharded_tool), CNX_PYTHON, CNX_SOURCE (optional).
set -euo pipefail

support=${CNX_SUPPORT:?CNX_SUPPORT must name build/tests/support}
python=${CNX_PYTHON:-/usr/bin/python3}
source_dir=${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}
tool="$support/sharded_tool"
ref="$source_dir/tests/py/sharded_ref.py"

if [ ! -x "$tool" ]; then
    echo "sharded_write: $tool not built" >&2
    exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/sharded_write.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$python" "$ref" write "$work/ref" 23 >/dev/null
sets=0
for set in "$work"/ref/sets/*/; do
    name=$(basename "$set")
    for copy in a b; do
        out="$work/$copy/$name"
        mkdir -p "$out"
        cp -r "$set"/info "$set"/chunks.txt "$set"/missing.txt \
            "$set"/expect "$out"/
        "$tool" write "$out"
    done
    "$python" "$ref" read "$work/a/$name"
    "$tool" check "$work/a/$name"
    if ! diff -r "$work/a/$name" "$work/b/$name" >/dev/null; then
        echo "sharded_write: $name: two encodings differ" >&2
        exit 1
    fi
    sets=$((sets + 1))
done
[ "$sets" -ge 6 ] || { echo "sharded_write: only $sets sets" >&2; exit 1; }

# The reader must be able to fail: a chunk's bytes changed after encoding.
victim="$work/a/identity-raw"
first=$(head -n 1 "$victim/chunks.txt")
printf 'x' >>"$victim/expect/$first"
if "$python" "$ref" read "$victim" 2>/dev/null; then
    echo "sharded_write: the reader missed a changed chunk" >&2
    exit 1
fi
echo "sharded_write: ok ($sets sets)"
