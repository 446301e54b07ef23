#!/usr/bin/env python3
"""Scores segmentations of cnx-synth datasets against their gt, beside
scikit-image's 3D watershed on the same boundary map (the peer).

    aniso_eval.py score --data DIR [--seg LAYER]... [--peer JSON]
    aniso_eval.py tune-peer --data DIR

score: for each --seg (a layer path under DIR, e.g. segmentation/v1) VI
split, VI merge and ARE against DIR/gt (CREMI convention: gt 0 ignored,
log2; tests/py/metrics_ref.py over scikit-image's variation_of_information);
with --peer, the peer on DIR/boundary with those parameters too. Prints
one line per method and, with --json FILE, writes the figures.

tune-peer: grid search of the peer's parameters on DIR (the tuning
volume), printing the best as JSON for score --peer.

The peer is the scikit-image pipeline a user of the field would write for
an anisotropic boundary map: the Euclidean distance transform of the
interior (boundary < t) with sampling = the layer's resolution (z, y, x in
nm), its maxima at least min_distance_nm apart (peak_local_max with a
footprint of that half side in nm per axis), and a watershed of the
boundary map from them (skimage.segmentation.watershed, 3D connectivity).
Only numpy, scipy and scikit-image; no cnx code.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "py"))
import metrics_ref  # noqa: E402
from layer_ref import read_layer  # noqa: E402

PEER_GRID = [{"threshold": t, "min_distance_nm": d}
             for t in (0.3, 0.5, 0.7) for d in (40, 80, 160)]


def load(path):
    """(resolution as (z, y, x) nm, the volume indexed [z, y, x])."""
    info, vol = read_layer(path)
    return tuple(reversed(info["scales"][0]["resolution"])), vol


def peer(boundary, res, params):
    """boundary: uint8 indexed [z, y, x]; res: (z, y, x) nm."""
    from scipy import ndimage
    from skimage.feature import peak_local_max
    from skimage.segmentation import watershed
    b = np.asarray(boundary, dtype=np.float32) / 255.0
    interior = b < params["threshold"]
    dist = ndimage.distance_transform_edt(interior, sampling=res)
    half = [max(0, int(round(params["min_distance_nm"] / r))) for r in res]
    footprint = np.ones([2 * h + 1 for h in half], dtype=bool)
    peaks = peak_local_max(dist, footprint=footprint, labels=interior,
                           exclude_border=False)
    markers = np.zeros(b.shape, np.int64)
    markers[tuple(peaks.T)] = np.arange(1, len(peaks) + 1)
    return watershed(b, markers)


def score(gt, seg):
    split, merge, are, _, _, _ = metrics_ref.scores(gt.ravel(), seg.ravel())
    return split, merge, are


def row(name, s, secs):
    print("%-34s %8.3f %8.3f %8.3f %8.3f %7.1f" %
          (name, s[0], s[1], s[0] + s[1], s[2], secs))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=("score", "tune-peer"))
    ap.add_argument("--data", required=True)
    ap.add_argument("--seg", action="append", default=[])
    ap.add_argument("--peer", default="")
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv[1:])
    res, gt = load(os.path.join(a.data, "gt"))
    out = {}
    if a.cmd == "tune-peer":
        _, bnd = load(os.path.join(a.data, "boundary"))
        best = None
        for p in PEER_GRID:
            s = score(gt, peer(bnd, res, p))
            print("peer %s: VI split %.3f merge %.3f" % (json.dumps(p), s[0],
                                                          s[1]))
            if best is None or s[0] + s[1] < best[0]:
                best = (s[0] + s[1], p)
        print(json.dumps(best[1]))
        return 0
    print("%-34s %8s %8s %8s %8s %7s" % ("method", "VIsplit", "VImerge",
                                         "VIsum", "ARE", "sec"))
    for layer in a.seg:
        _, seg = load(os.path.join(a.data, layer))
        s = score(gt, seg)
        row(layer, s, 0.0)
        out[layer] = {"vi_split": s[0], "vi_merge": s[1], "are": s[2]}
    if a.peer:
        p = json.loads(a.peer)
        _, bnd = load(os.path.join(a.data, "boundary"))
        t0 = time.perf_counter()
        seg = peer(bnd, res, p)
        secs = time.perf_counter() - t0
        s = score(gt, seg)
        row("peer (scikit-image watershed)", s, secs)
        out["peer"] = {"vi_split": s[0], "vi_merge": s[1], "are": s[2],
                       "seconds": secs, "params": p}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
