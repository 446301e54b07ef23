#!/bin/bash
# sharded_ref.sh - cross-check the sharded-format reader (cnx/sharded.h)
# with an independent Python writer (tests/py/sharded_ref.py).
#
# The writer checks its MurmurHash3_x86_128 against SMHasher's published
# verification value, then writes sharded sets (both hashes, raw and gzip
# minishard indexes and data, several shards, minishards of several chunks,
# gaps between chunks), damaged shards and compressed Morton codes of
# non-cube grids; sharded_tool must read every chunk back byte for byte,
# report absent chunks as missing, refuse each damaged shard with its error,
# and compute the same Morton codes. Each set and each damaged shard is
# read a second time through a file:// store and cnx_sharded_store_read
# (pread ranges; a short range is ERANGE, reported as ECORRUPT);
# tests/integration/sharded_store_s3.sh does the same through s3rver.
# Sharded volumes (uint8 raw, one and two channels, truncated and whole
# chunks at the upper bound, chunks left out) are read through
# cnx_layer_read over many boxes and compared with the writer's array.
# Env: CNX_SUPPORT (dir of sharded_tool), CNX_PYTHON, CNX_SOURCE (optional).
set -euo pipefail

support=${CNX_SUPPORT:?CNX_SUPPORT must name build/tests/support}
python=${CNX_PYTHON:-/usr/bin/python3}
source_dir=${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}
tool="$support/sharded_tool"
ref="$source_dir/tests/py/sharded_ref.py"

if [ ! -x "$tool" ]; then
    echo "sharded_ref: $tool not built" >&2
    exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/sharded_ref.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$python" "$ref" write "$work" 17
for set in "$work"/sets/*/; do
    "$tool" check "${set%/}"
    "$tool" check "${set%/}" "file://${set%/}"
done
for case in "$work"/corrupt/*/; do
    "$tool" corrupt "${case%/}"
    "$tool" corrupt "${case%/}" "file://${case%/}"
done
"$tool" morton "$work/morton.txt"
for vol in "$work"/volumes/*/; do
    "$tool" volume "${vol%/}" "file://${vol%/}"
done
echo "sharded_ref: ok"
