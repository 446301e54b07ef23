#!/usr/bin/env python3
"""Peer of bench_segment: the usual scikit-image watershed pipeline.

On a boundary map (uint8 .npy, high = membrane, shape (z, y, x)):
b = skimage.filters.gaussian(map / 255, SIGMA) (skipped when SIGMA is 0),
seeds = skimage.feature.peak_local_max(-b, min_distance=MD,
exclude_border=False) numbered 1..n as markers, then
skimage.segmentation.watershed(b, markers) (face connectivity). The same
pipeline, tuned per section, is the ISBI peer of bench/isbi_eval.py.
The whole pipeline is timed; median of RUNS.

usage: segment_peer.py NPY [--runs N] [--sigma S] [--min-distance MD]
                           [--out LABELS]
Prints "key value" lines: seconds (median), labels (segments), and writes
the last run's labels as raw little-endian uint32 (x fastest) to LABELS.
"""

import argparse
import sys
import time

import numpy as np


def segment(vol, sigma, md):
    from skimage.feature import peak_local_max
    from skimage.filters import gaussian
    from skimage.segmentation import watershed
    b = vol.astype(np.float32) / 255.0
    if sigma > 0:
        b = gaussian(b, sigma)
    peaks = peak_local_max(-b, min_distance=md, exclude_border=False)
    markers = np.zeros(vol.shape, np.int32)
    markers[tuple(peaks.T)] = np.arange(1, len(peaks) + 1)
    return watershed(b, markers)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("npy")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sigma", type=float, default=0.5)
    ap.add_argument("--min-distance", type=int, default=12)
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv[1:])
    vol = np.load(a.npy)
    times, labels = [], None
    for _ in range(a.runs):
        t0 = time.perf_counter()
        labels = segment(vol, a.sigma, a.min_distance)
        times.append(time.perf_counter() - t0)
    times.sort()
    print("seconds %.6f" % times[len(times) // 2])
    print("labels %d" % len(np.unique(labels)))
    if a.out:
        labels.astype("<u4").tofile(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
