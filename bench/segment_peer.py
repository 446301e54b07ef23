#!/usr/bin/env python3
"""Peer of bench_segment: the usual scikit-image watershed pipeline.

On a boundary map (uint8 .npy, high = membrane, shape (z, y, x)) at a
resolution (nm per voxel, given x, y, z like the kernel's), with its
lengths in nm as the kernel's parameters are (kernel version 2):
b = skimage.filters.gaussian(map / 255, SIGMA_NM / resolution per axis)
(skipped when SIGMA_NM is 0), seeds = skimage.feature.peak_local_max(-b,
footprint = a box of half side h = round(MD_NM / resolution) voxels per
axis, min_distance = the smallest h (at least 1), exclude_border=False)
numbered 1..n as markers, then skimage.segmentation.watershed(b, markers)
(face connectivity). At an isotropic resolution this is exactly
gaussian(sigma) + peak_local_max(min_distance=h) in voxels, the peer of
kernel version 1's benchmark. The same pipeline, tuned per section, is the ISBI peer
of bench/isbi_eval.py. With --invert the input is a raw EM image (dark
membranes) and the map is 1 - image / 255 (bench_segment's raw-image path).
The whole pipeline is timed in CPU seconds of the process
(time.process_time, as bench_segment times its own); median of RUNS.

usage: segment_peer.py NPY [--runs N] [--resolution X,Y,Z]
                           [--sigma-nm S] [--min-distance-nm MD]
                           [--invert] [--out LABELS]
Prints "key value" lines: seconds (median), labels (segments), and writes
the last run's labels as raw little-endian uint32 (x fastest) to LABELS.
"""

import argparse
import sys
import time

import numpy as np


def resolution(text):
    """X,Y,Z in nm (each > 0) as (z, y, x), the array's axis order."""
    try:
        xyz = [float(v) for v in text.split(",")]
    except ValueError:
        xyz = []
    if len(xyz) != 3 or not all(v > 0 for v in xyz):
        raise argparse.ArgumentTypeError("want three positive numbers X,Y,Z")
    return tuple(reversed(xyz))


def segment(vol, res_zyx, sigma_nm, md_nm, invert=False):
    from skimage.feature import peak_local_max
    from skimage.filters import gaussian
    from skimage.segmentation import watershed
    b = vol.astype(np.float32) / 255.0
    if invert:
        b = 1.0 - b
    if sigma_nm > 0:
        b = gaussian(b, [sigma_nm / r for r in res_zyx])
    half = [max(0, int(round(md_nm / r))) for r in res_zyx]
    footprint = np.ones([2 * h + 1 for h in half], dtype=bool)
    peaks = peak_local_max(-b, min_distance=max(1, min(half)),
                           footprint=footprint, exclude_border=False)
    markers = np.zeros(vol.shape, np.int32)
    markers[tuple(peaks.T)] = np.arange(1, len(peaks) + 1)
    return watershed(b, markers)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("npy")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--resolution", type=resolution, default=(8.0, 8.0, 8.0),
                    help="nm per voxel, X,Y,Z (default 8,8,8)")
    ap.add_argument("--sigma-nm", type=float, default=4.0)
    ap.add_argument("--min-distance-nm", type=float, default=96.0)
    ap.add_argument("--invert", action="store_true",
                    help="raw EM image (dark membranes): map = 1 - image")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv[1:])
    vol = np.load(a.npy)
    times, labels = [], None
    for _ in range(a.runs):
        t0 = time.process_time()
        labels = segment(vol, a.resolution, a.sigma_nm, a.min_distance_nm,
                         a.invert)
        times.append(time.process_time() - t0)
    times.sort()
    print("seconds %.6f" % times[len(times) // 2])
    print("labels %d" % len(np.unique(labels)))
    if a.out:
        labels.astype("<u4").tofile(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
