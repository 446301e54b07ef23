"""TensorStore reads our layers voxel-exact.

    python3 acceptance/tensorstore_read.py LAYER_DIR|SHARDED=UNSHARDED...

Opens each layer with TensorStore's `neuroglancer_precomputed` driver (a
reader we did not write), reads the whole first scale, and compares it voxel
for voxel with a plain numpy reading of the chunk files written from the
format spec (raw chunks: little-endian, x fastest; compressed_segmentation:
tests/py/cseg_ref.py). SHARDED=UNSHARDED: TensorStore reads the sharded
layer SHARDED (our encoder's), numpy the unsharded UNSHARDED (the same
chunks). Prints one line per layer and a closing
"N passed, N failed"; exits non-zero on any mismatch.
"""
import json
import os
import sys

import numpy as np
import tensorstore as ts

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "py"))
from layer_ref import read_layer  # noqa: E402  (numpy, independent codec)


def numpy_read(layer):
    return read_layer(layer, channels=True)


def main(layers):
    passed = failed = 0
    for arg in layers:
        layer, _, plain = arg.partition("=")
        layer = os.path.abspath(layer)
        info, ref = numpy_read(os.path.abspath(plain or layer))
        with open(os.path.join(layer, "info")) as f:
            info = json.load(f)
        store = ts.open({"driver": "neuroglancer_precomputed",
                         "kvstore": {"driver": "file", "path": layer + "/"}},
                        read=True).result()
        got = np.asarray(store.read().result())  # x, y, z, channel
        got = np.transpose(got, (3, 2, 1, 0))    # channel, z, y, x
        ok = got.shape == ref.shape and got.dtype == ref.dtype and np.array_equal(got, ref)
        enc = info["scales"][0]["encoding"] + \
            (" sharded" if "sharding" in info["scales"][0] else "")
        print("%-60s %-24s %-7s %s %s" % (layer, enc, info["data_type"],
                                          "x".join(map(str, info["scales"][0]["size"])),
                                          "voxel-exact" if ok else "MISMATCH"))
        passed += ok
        failed += not ok
    print("tensorstore: %d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
