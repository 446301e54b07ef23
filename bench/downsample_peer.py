#!/usr/bin/env python3
"""Peer of bench_downsample: the same 2x2x2 downsampling in Python.

average: skimage.transform.downscale_local_mean (float64 means; edge blocks
         are padded with 0 and divided by the full block size, unlike cnx,
         which averages only the voxels that exist), then rounded half up
         (floor(mean + 0.5)) and cast back to the input type.
mode:    whole-array numpy: blocks as rows of 8, sorted, each value's count
         in its row by comparison, argmax (the first maximum of a sorted row
         is the lowest of the most frequent ids). Edge blocks are padded by
         repeating a voxel of the block, which can change counts.

Timed as bench_downsample times its kernel (median of RUNS). With --ours,
our output (raw, same type) is compared voxel by voxel.

usage: downsample_peer.py RAW X Y Z [--ours FILE] [--dtype uint8|...]
                          [--mode average|mode] [--runs N]
Prints "key value" lines: mvxs (input voxels / s / 1e6), differ (output
voxels where peer != ours; -1 without --ours), voxels (output voxels).
"""

import argparse
import sys
import time

import numpy as np


def average(vol):
    from skimage.transform import downscale_local_mean
    return downscale_local_mean(vol, (2, 2, 2))


def round_half_up(mean, dtype):
    if dtype.kind == "f":
        return mean.astype(dtype)
    return np.floor(mean + 0.5).astype(dtype)


def mode(vol):
    sz, sy, sx = vol.shape
    pad = ((0, sz % 2), (0, sy % 2), (0, sx % 2))
    if any(p[1] for p in pad):
        vol = np.pad(vol, pad, mode="edge")
    gz, gy, gx = vol.shape[0] // 2, vol.shape[1] // 2, vol.shape[2] // 2
    blocks = vol.reshape(gz, 2, gy, 2, gx, 2).transpose(0, 2, 4, 1, 3, 5)
    blocks = np.sort(blocks.reshape(-1, 8), axis=1)
    counts = np.zeros(blocks.shape, dtype=np.uint8)
    for i in range(8):
        counts[:, i] = (blocks == blocks[:, i:i + 1]).sum(axis=1)
    pick = np.argmax(counts, axis=1)
    out = blocks[np.arange(blocks.shape[0]), pick]
    return out.reshape(gz, gy, gx)


def median_time(fn, runs):
    times, result = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], result


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw")
    ap.add_argument("size", nargs=3, type=int, metavar="N")
    ap.add_argument("--ours")
    ap.add_argument("--dtype", default="uint8")
    ap.add_argument("--mode", choices=("average", "mode"), default="average")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args(argv[1:])
    dtype = np.dtype(a.dtype).newbyteorder("<")
    x, y, z = a.size
    vol = np.fromfile(a.raw, dtype=dtype).reshape(z, y, x)
    if a.mode == "average":
        t, mean = median_time(lambda: average(vol), a.runs)
        peer = round_half_up(mean, dtype)
    else:
        t, peer = median_time(lambda: mode(vol), a.runs)
    differ = -1
    if a.ours:
        ours = np.fromfile(a.ours, dtype=dtype).reshape(peer.shape)
        differ = int(np.count_nonzero(ours != peer))
    print("mvxs %.2f" % (vol.size / t / 1e6))
    print("differ %d" % differ)
    print("voxels %d" % peer.size)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
