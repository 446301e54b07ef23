#!/bin/bash
# cseg_numpy.sh - cross-check the compressed_segmentation codec with an
# independent numpy implementation (tests/py/cseg_ref.py).
#
# cseg_fixture writes label volumes (random, slabs, spheres, Voronoi; uint32
# and uint64; odd sizes, odd blocks, several channels) with our encodings;
# the numpy decoder must read ours voxel for voxel, the numpy encoder must
# produce the same bytes, and our decoder must read the numpy bytes.
# Env: CNX_SUPPORT (dir of cseg_fixture), CNX_PYTHON, CNX_SOURCE (optional).
# Exit status non-zero on any mismatch.
set -euo pipefail

support=${CNX_SUPPORT:?CNX_SUPPORT must name build/tests/support}
python=${CNX_PYTHON:-/usr/bin/python3}
source_dir=${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}
fixture="$support/cseg_fixture"
ref="$source_dir/tests/py/cseg_ref.py"

if [ ! -x "$fixture" ]; then
    echo "cseg_numpy: $fixture not built" >&2
    exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/cseg_numpy.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$fixture" write "$work"
"$python" "$ref" check "$work" --decoder "$fixture"
