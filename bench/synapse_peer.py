#!/usr/bin/env python3
"""Peer of bench_synapse: the usual numpy/scipy synful-style pipeline.

On cleft, psd (uint8) and seg (uint64) .npy volumes of shape (z, y, x):
components = scipy.ndimage.label(cleft >= CT, 26-connectivity); for each
component (scipy.ndimage.find_objects), small ones dropped; site = argmax
of scipy.ndimage.distance_transform_edt of the component mask padded by
one voxel; neighbourhood = the voxels within R of the component
(distance_transform_edt of its complement in the box grown by R); post =
the most frequent non-zero seg label (np.unique counts) among the
neighbourhood's psd >= PT voxels, pre = the most frequent other label
among the rest. The whole pipeline is timed; median of RUNS.

usage: synapse_peer.py CLEFT PSD SEG [--runs N] [--cleft-threshold CT]
                       [--psd-threshold PT] [--radius R] [--min-size M]
Prints "key value" lines: seconds (median), synapses, and one line
"site x y z pre post" per synapse of the last run (for comparison).
"""

import argparse
import sys
import time

import numpy as np
from scipy import ndimage


def mode(labels, skip):
    labels = labels[(labels != 0) & (labels != skip)]
    if labels.size == 0:
        return 0
    v, c = np.unique(labels, return_counts=True)
    return int(v[np.argmax(c)])  # first maximum: the lower id


def detect(cleft, psd, seg, ct, pt, r, min_size):
    lab, n = ndimage.label(cleft >= ct, structure=np.ones((3, 3, 3), bool))
    out = []
    shape = lab.shape
    for k, sl in enumerate(ndimage.find_objects(lab), 1):
        if sl is None:
            continue
        box = [(s.start, s.stop) for s in sl]
        m = lab[sl] == k
        if m.sum() < min_size:
            continue
        dt = ndimage.distance_transform_edt(np.pad(m, 1))[1:-1, 1:-1, 1:-1]
        dt[~m] = -1
        z, y, x = np.unravel_index(np.argmax(dt), dt.shape)
        site = (box[0][0] + z, box[1][0] + y, box[2][0] + x)
        g = tuple(slice(max(a - r, 0), min(b + r, s))
                  for (a, b), s in zip(box, shape))
        near = ndimage.distance_transform_edt(lab[g] != k) <= r
        sg, pg = seg[g][near], psd[g][near] >= pt
        post = mode(sg[pg], 0)
        pre = mode(sg[~pg], post)
        out.append((site[2], site[1], site[0], pre, post))
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cleft")
    ap.add_argument("psd")
    ap.add_argument("seg")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cleft-threshold", type=int, default=128)
    ap.add_argument("--psd-threshold", type=int, default=128)
    ap.add_argument("--radius", type=int, default=4)
    ap.add_argument("--min-size", type=int, default=20)
    a = ap.parse_args(argv[1:])
    cleft, psd, seg = np.load(a.cleft), np.load(a.psd), np.load(a.seg)
    times, syn = [], []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        syn = detect(cleft, psd, seg, a.cleft_threshold, a.psd_threshold,
                     a.radius, a.min_size)
        times.append(time.perf_counter() - t0)
    times.sort()
    print("seconds %.6f" % times[len(times) // 2])
    print("synapses %d" % len(syn))
    for s in syn:
        print("site %d %d %d %d %d" % s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
