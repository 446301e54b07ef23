#!/usr/bin/env python3
"""Vectorised numpy compressed_segmentation codec: the peer of bench_cseg.

Encodes and decodes a single-channel chunk with whole-array numpy
operations (blocks as rows of a 2-D array, one pass per bit width), as a
careful Python user of the format would, and times both the same way as
bench_cseg (median of RUNS). Table de-duplication and the output layout
need the blocks in order, so that part is a loop over blocks.

usage: cseg_peer.py RAW CSEG X Y Z BX BY BZ [RUNS] [uint32|uint64]
  RAW   raw little-endian labels (x fastest), CSEG our encoding of them.
Prints "key value" lines: encode_mvxs, decode_mvxs, bytes_equal (our bytes
equal the peer's), decode_equal (the peer decodes ours exactly).
"""

import sys
import time

import numpy as np

WIDTHS = np.array([0, 1, 2, 4, 8, 16, 32])


def to_blocks(vol, block):
    """(z, y, x) volume -> (blocks, voxels per block), edge-padded."""
    bx, by, bz = block
    sz, sy, sx = vol.shape
    gz, gy, gx = -(-sz // bz), -(-sy // by), -(-sx // bx)
    pad = ((0, gz * bz - sz), (0, gy * by - sy), (0, gx * bx - sx))
    # Edge padding repeats a label of the same block, adding none.
    full = np.pad(vol, pad, mode="edge") if any(p[1] for p in pad) else vol
    blocks = full.reshape(gz, bz, gy, by, gx, bx).transpose(0, 2, 4, 1, 3, 5)
    return blocks.reshape(gz * gy * gx, bz * by * bx), (gx, gy, gz)


def inside_mask(size, block, grid):
    """(blocks, voxels) mask of voxels inside the chunk."""
    sx, sy, sz = size
    bx, by, bz = block
    gx, gy, gz = grid
    z = (np.arange(gz)[:, None] * bz + np.arange(bz)[None, :]) < sz
    y = (np.arange(gy)[:, None] * by + np.arange(by)[None, :]) < sy
    x = (np.arange(gx)[:, None] * bx + np.arange(bx)[None, :]) < sx
    m = (z[:, None, None, :, None, None] & y[None, :, None, None, :, None] &
         x[None, None, :, None, None, :])
    return m.reshape(gz * gy * gx, bz * by * bx)


def encode(vol, block):
    size = vol.shape[::-1]
    wpl = vol.dtype.itemsize // 4
    blocks, grid = to_blocks(vol, block)
    nb, bvox = blocks.shape
    order = np.argsort(blocks, axis=1, kind="stable")
    srt = np.take_along_axis(blocks, order, axis=1)
    new = np.ones(srt.shape, dtype=bool)
    new[:, 1:] = srt[:, 1:] != srt[:, :-1]
    rank = np.cumsum(new, axis=1, dtype=np.uint32) - 1
    index = np.empty_like(rank)
    np.put_along_axis(index, order, rank, axis=1)
    if not inside_mask(size, block, grid).all():
        index[~inside_mask(size, block, grid)] = 0
    count = new.sum(axis=1)
    need = np.ceil(np.log2(np.maximum(count, 1))).astype(np.int64)
    bits = WIDTHS[np.searchsorted(WIDTHS, need)]
    bits[count == 1] = 0
    nvw = (bits * bvox + 31) // 32
    packed = [None] * nb
    for b in np.unique(bits):
        sel = np.nonzero(bits == b)[0]
        if b == 0:
            continue
        per = 32 // b
        n = -(-bvox // per) * per
        idx = np.zeros((len(sel), n), dtype=np.uint64)
        idx[:, :bvox] = index[sel]
        shifts = (np.arange(per, dtype=np.uint64) * np.uint64(b))
        words = (idx.reshape(len(sel), -1, per) << shifts).sum(axis=2)
        words = words.astype(np.uint32)
        for k, i in enumerate(sel):
            packed[i] = words[k]
    values = srt[new]
    starts = np.concatenate(([0], np.cumsum(count)))
    if wpl == 2:
        twords = np.empty(2 * len(values), dtype=np.uint32)
        twords[0::2] = (values & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        twords[1::2] = (values >> np.uint64(32)).astype(np.uint32)
    else:
        twords = values.astype(np.uint32)
    header = np.zeros(2 * nb, dtype=np.uint32)
    pieces = [np.array([1], dtype=np.uint32), header]
    pos = 2 * nb
    seen = {}
    for i in range(nb):
        header[2 * i + 1] = pos
        if bits[i]:
            pieces.append(packed[i])
            pos += int(nvw[i])
        table = twords[starts[i] * wpl:starts[i + 1] * wpl]
        key = table.tobytes()
        toff = seen.get(key)
        if toff is None:
            toff = pos
            seen[key] = pos
            pieces.append(table)
            pos += len(table)
        header[2 * i] = toff | int(bits[i]) << 24
    return np.concatenate(pieces).astype("<u4").tobytes()


def decode(data, size, block, dtype):
    words = np.frombuffer(data, dtype="<u4")
    wpl = np.dtype(dtype).itemsize // 4
    sx, sy, sz = size
    bx, by, bz = block
    gx, gy, gz = -(-sx // bx), -(-sy // by), -(-sz // bz)
    nb, bvox = gx * gy * gz, bx * by * bz
    base = int(words[0])
    header = words[base:base + 2 * nb].reshape(nb, 2).astype(np.int64)
    toff = (header[:, 0] & 0xFFFFFF) + base
    bits = header[:, 0] >> 24
    voff = header[:, 1] + base
    out = np.empty((nb, bvox), dtype=dtype)
    wide = words.astype(np.uint64) if wpl == 2 else words
    for b in np.unique(bits):
        sel = np.nonzero(bits == b)[0]
        if b == 0:
            idx = np.zeros((len(sel), 1), dtype=np.int64)
        else:
            per = 32 // b
            nvw = (b * bvox + 31) // 32
            w = words[voff[sel][:, None] + np.arange(nvw)[None, :]]
            shifts = np.arange(per, dtype=np.uint32) * np.uint32(b)
            idx = (w[:, :, None] >> shifts) & np.uint32((1 << b) - 1)
            idx = idx.reshape(len(sel), -1)[:, :bvox].astype(np.int64)
        pos = toff[sel][:, None] + idx * wpl
        if wpl == 2:
            val = wide[pos] | (wide[pos + 1] << np.uint64(32))
        else:
            val = words[pos]
        out[sel] = val.astype(dtype)
    vol = out.reshape(gz, gy, gx, bz, by, bx).transpose(0, 3, 1, 4, 2, 5)
    vol = vol.reshape(gz * bz, gy * by, gx * bx)
    return np.ascontiguousarray(vol[:sz, :sy, :sx])


def median_time(fn, runs):
    times = []
    result = None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], result


def main(argv):
    if len(argv) < 9:
        sys.stderr.write(__doc__)
        return 2
    raw_path, cseg_path = argv[1], argv[2]
    size = tuple(int(v) for v in argv[3:6])
    block = tuple(int(v) for v in argv[6:9])
    runs = int(argv[9]) if len(argv) > 9 else 5
    dtype = np.dtype(argv[10] if len(argv) > 10 else "uint64")
    dtype = dtype.newbyteorder("<")
    vol = np.fromfile(raw_path, dtype=dtype).reshape(size[::-1])
    with open(cseg_path, "rb") as f:
        ours = f.read()
    nvox = vol.size
    t_enc, mine = median_time(lambda: encode(vol, block), runs)
    t_dec, back = median_time(lambda: decode(ours, size, block, dtype), runs)
    print("encode_mvxs %.2f" % (nvox / t_enc / 1e6))
    print("decode_mvxs %.2f" % (nvox / t_dec / 1e6))
    print("bytes_equal %d" % (1 if mine == ours else 0))
    print("decode_equal %d" % (1 if np.array_equal(back, vol) else 0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
