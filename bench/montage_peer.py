#!/usr/bin/env python3
"""Peer for bench_montage: scikit-image's phase_cross_correlation on the
strips of tile pairs.

usage: montage_peer.py STRIPS.npy PAIRS.txt [STRIP_PX]

STRIPS.npy: uint8 (2 n, H, W); strip 2k is tile a's, 2k + 1 tile b's, each
in the top-left h x w corner. PAIRS.txt: per pair "h w lag0_y lag0_x
true_y true_x": the nominal and true offset of b's strip origin in a's.
Each pair: phase_cross_correlation(a, b, upsample_factor=10) gives the
shift that registers b with a, known only modulo the strip size; the
candidate nearest the nominal offset is taken. Prints the error against
the truth (median, max, share within 1 px) and the time per pair, and,
given STRIP_PX (the mean pixels of both strips of a pair, as bench_montage
counts them), Mpx/s per core in those pixels.
"""
import sys
import time

import numpy as np
from skimage.registration import phase_cross_correlation


def main():
    stack = np.load(sys.argv[1])
    meta = np.loadtxt(sys.argv[2], dtype=np.int64, ndmin=2)
    n = meta.shape[0]
    errs = np.zeros(n)
    t0 = time.perf_counter()
    for k in range(n):
        h, w, l0y, l0x, ty, tx = meta[k]
        a = stack[2 * k, :h, :w].astype(np.float64)
        b = stack[2 * k + 1, :h, :w].astype(np.float64)
        shift, _, _ = phase_cross_correlation(a, b, upsample_factor=10)
        sy, sx = shift
        # shift registers b with a: b's content sits at +shift in a
        sy += h * np.round((l0y - sy) / h)
        sx += w * np.round((l0x - sx) / w)
        errs[k] = np.hypot(sy - ty, sx - tx)
    dt = time.perf_counter() - t0
    speed = ""
    if len(sys.argv) > 3:
        speed = " = %.2f Mpx/s per core (pixels of both strips)" % (
            float(sys.argv[3]) * n / dt / 1e6)
    print("skimage phase_cross_correlation(upsample_factor=10): error vs "
          "truth median %.3f px, max %.3f px, %.1f %% within 1 px; "
          "%.3f ms/pair%s" % (np.median(errs), errs.max(),
                              100.0 * np.mean(errs <= 1.0), 1e3 * dt / n,
                              speed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
