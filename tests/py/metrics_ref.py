#!/usr/bin/env python3
"""Reference segmentation scores with scikit-image, for test_metrics.c.

    metrics_ref.py DIR

For every DIR/<case>.gt (and its DIR/<case>.seg), both raw little-endian
uint64 volumes of the same length, prints one line

    <case> vi_split vi_merge are precision recall voxels

with the floats in repr (round-trip) form, in sorted case order.

The CREMI convention (cnx/metrics.h): only voxels with gt != 0 count, log
base 2, split = H(seg | gt), merge = H(gt | seg), seg label 0 an ordinary
label. skimage.metrics.variation_of_information(image0, image1) returns
[H(image1 | image0), H(image0 | image1)] in bits; with image0 = gt that is
[split, merge]. Its ignore_labels masks only image0 but still puts the
ignored voxels' labels into the table, so we apply the mask ourselves
before calling it (and check that its own ignore_labels=(0,) agrees).
Labels are made dense with np.unique first: skimage indexes a sparse
matrix by label value, which a uint64 label near 2^64 would overflow;
relabelling leaves every score unchanged.

adapted_rand_error(image_true, image_test) returns (are, precision,
recall) with precision = S / sum a_i(a_i - 1) over the gt rows and recall
= S / sum b_j(b_j - 1) over the seg columns (its code, not its docstring:
scikit-image issue #6485); cnx returns the same numbers under the same
names.
"""
import math
import os
import sys
import warnings

import numpy as np
from skimage.metrics import adapted_rand_error, variation_of_information


def dense(labels):
    """Labels renumbered 0..k-1 in sorted order (a bijection)."""
    _, inverse = np.unique(labels, return_inverse=True)
    return inverse.astype(np.int64)


def scores(gt, seg):
    mask = gt != 0
    if not mask.any():
        raise ValueError("no gt voxel is non-zero")
    g = dense(gt[mask]) + 1  # 1..k: nothing for skimage to ignore
    s = dense(seg[mask])     # 0 is an ordinary label here
    split, merge = variation_of_information(g, s, ignore_labels=())
    are, prec, rec = adapted_rand_error(g, s, ignore_labels=())

    # skimage's own masking of gt 0 must agree with ours (gt 0 kept as 0).
    g_all = dense(gt) + (0 if (gt == 0).any() else 1)  # 0 stays 0
    s_all = dense(seg)
    split2, merge2 = variation_of_information(g_all, s_all, ignore_labels=(0,))
    are2, _, _ = adapted_rand_error(g_all, s_all, ignore_labels=(0,))
    for x, y in ((split, split2), (merge, merge2), (are, are2)):
        if not math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12):
            raise AssertionError("skimage masking disagrees: %r %r" % (x, y))
    return split, merge, are, prec, rec, int(mask.sum())


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    root = argv[1]
    warnings.simplefilter("error")  # a nan or divide warning is a failure
    cases = sorted(f[:-3] for f in os.listdir(root) if f.endswith(".gt"))
    if not cases:
        sys.exit("metrics_ref: no *.gt files in %s" % root)
    for case in cases:
        gt = np.fromfile(os.path.join(root, case + ".gt"), dtype="<u8")
        seg = np.fromfile(os.path.join(root, case + ".seg"), dtype="<u8")
        if gt.shape != seg.shape:
            sys.exit("metrics_ref: %s: gt and seg lengths differ" % case)
        vals = scores(gt, seg)
        print(case, " ".join(repr(float(v)) for v in vals[:5]), vals[5])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
