#!/usr/bin/env python3
"""Each PNG given (a viewer panel's screenshot) must show something: not
blank, not one colour. Pillow + numpy only.

    python3 png_check.py [--min-std 4] [--min-colors 16] PANEL.png...

A panel fails when the standard deviation of its luminance is below
--min-std (grey levels, 0..255) or it has fewer than --min-colors distinct
RGB colours. One line per panel; exit 1 when any fails or none is given.
"""
import argparse
import sys

import numpy as np
from PIL import Image


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min-std", type=float, default=4.0)
    ap.add_argument("--min-colors", type=int, default=16)
    ap.add_argument("png", nargs="*")
    a = ap.parse_args()
    if not a.png:
        print("png_check: no panel screenshots", file=sys.stderr)
        return 1
    bad = 0
    for path in a.png:
        try:
            rgb = np.asarray(Image.open(path).convert("RGB"), dtype=np.float64)
        except OSError as e:
            print("png_check: %s: %s" % (path, e), file=sys.stderr)
            bad += 1
            continue
        lum = rgb @ np.array([0.299, 0.587, 0.114])
        colors = len(np.unique(rgb.reshape(-1, 3).astype(np.uint8), axis=0))
        ok = lum.std() >= a.min_std and colors >= a.min_colors
        bad += not ok
        print("%s %s: %dx%d, luminance mean %.1f std %.1f, %d colours" % (
            "ok" if ok else "BLANK OR UNIFORM", path, rgb.shape[1], rgb.shape[0],
            lum.mean(), lum.std(), colors))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
