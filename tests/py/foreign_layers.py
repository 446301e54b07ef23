#!/usr/bin/env python3
"""Writes, from a cnx-synth dataset and with no cnx code, the layers other
tools write and cnx must read as inputs:

  boundary_jpeg/  the boundary map as jpeg chunks (Pillow, quality 90), its
                  info with a second, downsampled scale marked "hidden" and
                  members cnx does not use ("jpeg_quality", a top-level
                  "x_note"); volume.bin + boxes.txt hold what Pillow decodes
                  (x fastest), for sharded_tool volume
  boundary_jdec/  that decoded image as a raw layer (the same grid): what
                  the jpeg layer must read as
  boundary_png/   the boundary map as png chunks (lossless), volume.bin +
                  boxes.txt likewise
  boundary_sh/    the boundary map sharded (murmurhash3_x86_128, gzip data
                  and minishard indexes, several shards and minishards),
                  written with sharded_ref.py's shard writer
  gt_sh/          the gt segmentation sharded, compressed_segmentation
                  chunks from cseg_ref.py's encoder, identity hash, raw
                  encodings

    foreign_layers.py DATASET     (writes into DATASET, beside its layers)

Chunks are named and cut as the precomputed format says (edge chunks
truncated); a jpeg or png chunk is one gray image x wide and y*z high, the
z sections one under the other.
"""
import io
import json
import os
import random
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cseg_ref  # noqa: E402
import layer_ref  # noqa: E402
import sharded_ref  # noqa: E402


def boxes(size, chunk):
    for z0 in range(0, size[2], chunk[2]):
        for y0 in range(0, size[1], chunk[1]):
            for x0 in range(0, size[0], chunk[0]):
                hi = [min(a + c, s) for a, c, s in zip((x0, y0, z0), chunk, size)]
                yield (x0, y0, z0), tuple(hi)


def name(lo, hi):
    return "%d-%d_%d-%d_%d-%d" % (lo[0], hi[0], lo[1], hi[1], lo[2], hi[2])


def image_bytes(block, fmt):
    """block (z, y, x) uint8 as one x by y*z gray image."""
    z, y, x = block.shape
    img = Image.fromarray(np.ascontiguousarray(block).reshape(z * y, x), "L")
    out = io.BytesIO()
    if fmt == "jpeg":
        img.save(out, "JPEG", quality=90)
    else:
        img.save(out, "PNG")
    return out.getvalue()


def decode_image(data, shape):
    arr = np.array(Image.open(io.BytesIO(data)))
    assert arr.dtype == np.uint8 and arr.shape == (shape[0] * shape[1], shape[2])
    return arr.reshape(shape)


def write_boxes(root, size, rng):
    """boxes.txt for sharded_tool volume: whole, a chunk, unaligned boxes."""
    lines = ["0 0 0 %d %d %d 0" % tuple(size)]
    for _ in range(12):
        lo = [rng.randrange(s) for s in size]
        hi = [rng.randrange(a + 1, s + 1) for a, s in zip(lo, size)]
        lines.append("%d %d %d %d %d %d 0" % tuple(lo + hi))
    with open(os.path.join(root, "boxes.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def image_layer(ds, src_info, vol, fmt, rng):
    """vol (z, y, x) uint8 into <ds>/boundary_<fmt> (png) or boundary_jpeg
    + boundary_jdec (jpeg); returns the array the layer must read as."""
    sc = dict(src_info["scales"][0])
    size, chunk = sc["size"], sc["chunk_sizes"][0]
    root = os.path.join(ds, "boundary_" + fmt)
    os.makedirs(os.path.join(root, sc["key"]))
    decoded = np.zeros_like(vol)
    for lo, hi in boxes(size, chunk):
        block = vol[lo[2]:hi[2], lo[1]:hi[1], lo[0]:hi[0]]
        data = image_bytes(block, fmt)
        decoded[lo[2]:hi[2], lo[1]:hi[1], lo[0]:hi[0]] = decode_image(data, block.shape)
        with open(os.path.join(root, sc["key"], name(lo, hi)), "wb") as f:
            f.write(data)
    info = json.loads(json.dumps(src_info))
    info["scales"][0]["encoding"] = fmt
    if fmt == "jpeg":
        info["scales"][0]["jpeg_quality"] = 90
        # A second, coarser scale others may keep for their own viewer,
        # marked hidden: legal, and not ours to refuse.
        half = vol[::2, ::2, ::2]
        s2 = json.loads(json.dumps(info["scales"][0]))
        s2["key"] = "half"
        s2["size"] = [half.shape[2], half.shape[1], half.shape[0]]
        s2["resolution"] = [r * 2 for r in sc["resolution"]]
        s2["hidden"] = True
        os.makedirs(os.path.join(root, "half"))
        for lo, hi in boxes(s2["size"], chunk):
            block = half[lo[2]:hi[2], lo[1]:hi[1], lo[0]:hi[0]]
            with open(os.path.join(root, "half", name(lo, hi)), "wb") as f:
                f.write(image_bytes(block, "jpeg"))
        info["scales"].append(s2)
        info["x_note"] = {"written_by": "foreign_layers.py", "version": 1}
    with open(os.path.join(root, "info"), "w") as f:
        json.dump(info, f, indent=1)
    with open(os.path.join(root, "volume.bin"), "wb") as f:
        f.write(decoded.tobytes())
    write_boxes(root, size, rng)
    if fmt == "jpeg":
        # The decoded voxels as a raw layer on the same grid.
        droot = os.path.join(ds, "boundary_jdec")
        os.makedirs(os.path.join(droot, sc["key"]))
        for lo, hi in boxes(size, chunk):
            block = decoded[lo[2]:hi[2], lo[1]:hi[1], lo[0]:hi[0]]
            with open(os.path.join(droot, sc["key"], name(lo, hi)), "wb") as f:
                f.write(np.ascontiguousarray(block).tobytes())
        with open(os.path.join(droot, "info"), "w") as f:
            json.dump(src_info, f)
    return decoded


def sharded_layer(ds, dst, src_info, chunk_bytes, spec, rng):
    """Every chunk (chunk_bytes(lo, hi) -> its encoded bytes) into shards."""
    sc = src_info["scales"][0]
    size, chunk = sc["size"], sc["chunk_sizes"][0]
    grid = [(s + c - 1) // c for s, c in zip(size, chunk)]
    root = os.path.join(ds, dst)
    os.makedirs(os.path.join(root, sc["key"]))
    chunks = {sharded_ref.morton([a // c for a, c in zip(lo, chunk)], grid): chunk_bytes(lo, hi)
              for lo, hi in boxes(size, chunk)}
    n = sharded_ref.write_shards(os.path.join(root, sc["key"]), spec, chunks, rng)
    info = json.loads(json.dumps(src_info))
    info["scales"][0]["sharding"] = spec
    with open(os.path.join(root, "info"), "w") as f:
        json.dump(info, f)
    return n


def main():
    ds = sys.argv[1]
    rng = random.Random(17)
    binfo, bvol = layer_ref.read_layer(os.path.join(ds, "boundary"))
    assert binfo["data_type"] == "uint8" and binfo["scales"][0]["encoding"] == "raw"
    image_layer(ds, binfo, bvol, "jpeg", rng)
    png = image_layer(ds, binfo, bvol, "png", rng)
    assert np.array_equal(png, bvol), "png is lossless"

    def raw_chunk(lo, hi):
        return np.ascontiguousarray(bvol[lo[2]:hi[2], lo[1]:hi[1], lo[0]:hi[0]]).tobytes()
    n = sharded_layer(ds, "boundary_sh", binfo, raw_chunk,
                      sharded_ref.full_spec("murmurhash3_x86_128", 2, 2, 0, "gzip", "gzip"), rng)
    print("boundary_sh: %d shards" % n)

    ginfo, gvol = layer_ref.read_layer(os.path.join(ds, "gt"))
    gsc = ginfo["scales"][0]
    assert gsc["encoding"] == "compressed_segmentation"
    dt = np.dtype(ginfo["data_type"])

    def cseg_chunk(lo, hi):
        block = gvol[lo[2]:hi[2], lo[1]:hi[1], lo[0]:hi[0]].astype(dt)[None]
        return cseg_ref.encode(block, tuple(gsc["compressed_segmentation_block_size"]))
    n = sharded_layer(ds, "gt_sh", ginfo, cseg_chunk,
                      sharded_ref.full_spec("identity", 1, 1, 1, "raw", "raw"), rng)
    print("gt_sh: %d shards" % n)


if __name__ == "__main__":
    main()
