"""Reads a Neuroglancer precomputed volume with numpy alone (no cnx code):
the shared reader of the acceptance checks. Chunks are named
<x0>-<x1>_<y0>-<y1>_<z0>-<z1> in voxels (voxel_offset included), edge chunks
truncated; raw chunks are little-endian arrays (channel, z, y, x);
compressed_segmentation chunks are decoded by cseg_ref.py, written from the
format description. A layer is a directory or an http(s):// URL (a web
server, or an S3 bucket read path-style and unsigned:
http://ENDPOINT/BUCKET/prefix/layer), read with urllib.

    info, vol = read_layer(path)          # vol: (z, y, x) for one channel
    info, vol = read_layer(path, scale=1, channels=True)  # (c, z, y, x)
"""
import json
import os
import urllib.parse
import urllib.request

import numpy as np

import cseg_ref


def read_object(base, name):
    """The bytes of object `name` (a relative path) of the layer at base."""
    if base.startswith(("http://", "https://")):
        url = base.rstrip("/") + "/" + urllib.parse.quote(name, safe="/")
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.read()
    with open(os.path.join(base, name), "rb") as f:
        return f.read()


def read_layer(path, scale=0, channels=False):
    """Scale `scale` of the layer at path as an array; missing chunks fail."""
    info = json.loads(read_object(path, "info"))
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
                data = read_object(path, s["key"] + "/" + name)
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
