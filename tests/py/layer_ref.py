"""Reads a Neuroglancer precomputed volume with numpy alone (no cnx code):
the shared reader of the acceptance checks. Chunks are named
<x0>-<x1>_<y0>-<y1>_<z0>-<z1> in voxels (voxel_offset included), edge chunks
truncated; raw chunks are little-endian arrays (channel, z, y, x);
compressed_segmentation chunks are decoded by cseg_ref.py, written from the
format description.

    info, vol = read_layer(path)          # vol: (z, y, x) for one channel
    info, vol = read_layer(path, scale=1, channels=True)  # (c, z, y, x)
"""
import json
import os

import numpy as np

import cseg_ref


def read_layer(path, scale=0, channels=False):
    """Scale `scale` of the layer at path as an array; missing chunks fail."""
    with open(os.path.join(path, "info")) as f:
        info = json.load(f)
    s = info["scales"][scale]
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
                name = "%d-%d_%d-%d_%d-%d" % (x0 + ox, x1 + ox, y0 + oy,
                                              y1 + oy, z0 + oz, z1 + oz)
                with open(os.path.join(path, s["key"], name), "rb") as f:
                    data = f.read()
                shape = (nc, z1 - z0, y1 - y0, x1 - x0)
                if s["encoding"] == "raw":
                    block = np.frombuffer(data, dtype=dt).reshape(shape)
                else:
                    block = cseg_ref.decode(
                        data, np.dtype(info["data_type"]),
                        (x1 - x0, y1 - y0, z1 - z0),
                        tuple(s["compressed_segmentation_block_size"]), nc)
                    block = np.asarray(block).astype(dt).reshape(shape)
                vol[:, z0:z1, y0:y1, x0:x1] = block
    return info, (vol if channels else vol[0])
