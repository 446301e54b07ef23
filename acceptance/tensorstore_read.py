"""TensorStore reads our layers voxel-exact.

    python3 acceptance/tensorstore_read.py LAYER_DIR...

Opens each layer with TensorStore's `neuroglancer_precomputed` driver (a
reader we did not write), reads the whole first scale, and compares it voxel
for voxel with a plain numpy reading of the chunk files written from the
format spec (raw chunks: little-endian, x fastest; compressed_segmentation:
tests/py/cseg_ref.py). Prints one line per layer and a closing
"N passed, N failed"; exits non-zero on any mismatch.
"""
import json
import os
import sys

import numpy as np
import tensorstore as ts

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "py"))
import cseg_ref  # noqa: E402  (independent numpy codec)


def numpy_read(layer):
    info = json.load(open(os.path.join(layer, "info")))
    s = info["scales"][0]
    sx, sy, sz = s["size"]
    ox, oy, oz = s.get("voxel_offset", [0, 0, 0])
    cx, cy, cz = s["chunk_sizes"][0]
    nc = info["num_channels"]
    dt = np.dtype(info["data_type"]).newbyteorder("<")
    vol = np.zeros((nc, sz, sy, sx), dtype=dt)
    for z0 in range(0, sz, cz):
        for y0 in range(0, sy, cy):
            for x0 in range(0, sx, cx):
                x1, y1, z1 = min(x0 + cx, sx), min(y0 + cy, sy), min(z0 + cz, sz)
                name = "%d-%d_%d-%d_%d-%d" % (x0 + ox, x1 + ox, y0 + oy, y1 + oy, z0 + oz, z1 + oz)
                data = open(os.path.join(layer, s["key"], name), "rb").read()
                shape = (nc, z1 - z0, y1 - y0, x1 - x0)
                if s["encoding"] == "raw":
                    block = np.frombuffer(data, dtype=dt).reshape(shape)
                else:
                    block = cseg_ref.decode(
                        data, np.dtype(info["data_type"]),
                        (x1 - x0, y1 - y0, z1 - z0),
                        tuple(s["compressed_segmentation_block_size"]), nc)
                    block = block.astype(dt).reshape(shape)
                vol[:, z0:z1, y0:y1, x0:x1] = block
    return info, vol


def main(layers):
    passed = failed = 0
    for layer in layers:
        layer = os.path.abspath(layer)
        info, ref = numpy_read(layer)
        store = ts.open({"driver": "neuroglancer_precomputed",
                         "kvstore": {"driver": "file", "path": layer + "/"}},
                        read=True).result()
        got = np.asarray(store.read().result())  # x, y, z, channel
        got = np.transpose(got, (3, 2, 1, 0))    # channel, z, y, x
        ok = got.shape == ref.shape and got.dtype == ref.dtype and np.array_equal(got, ref)
        enc = info["scales"][0]["encoding"]
        print("%-60s %-24s %-7s %s %s" % (layer, enc, info["data_type"],
                                          "x".join(map(str, info["scales"][0]["size"])),
                                          "voxel-exact" if ok else "MISMATCH"))
        passed += ok
        failed += not ok
    print("tensorstore: %d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
