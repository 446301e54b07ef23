#!/usr/bin/env python3
"""ISBI 2012 segmented in chunks, against the same kernel on the whole stack.

The chunked result is either the workers' segmentation/v1 layer (--layer,
Neuroglancer precomputed, read by tests/py/layer_ref.py with numpy alone)
or the one-process chunked method's raw output (--chunked, uint64, x
fastest: tests/support/segjoin_tool --chunked). The whole-volume run and
the scores are bench/isbi_eval.py's own (run_ours with OURS through
segment_tool; scores: per section, then the mean over the 30 sections, of
scikit-image's variation_of_information and adapted_rand_error against
the ground-truth components, membrane ignored), so the figures are those
of isbi_eval.py. Chunked segment ids are packed coordinates (up to 2^63);
they are renumbered 1..n before scoring, which changes no score (VI and
Rand depend only on the partition) but keeps scikit-image's contingency
table small.

usage: isbi_chunked.py (--layer DIR | --chunked FILE) [--whole FILE]
                       [--data DIR] [--tool PATH] [--name TEXT]
                       [--max-diff D]
--whole: a whole-volume run made elsewhere (segjoin_tool --whole on the
ingested layer, uint32); it must equal run_ours's labels voxel for voxel
(the same kernel, parameters and resolution), else exit 1.
Exit status 0 if the chunked VI split and VI merge are each no more than
--max-diff (default 0.02) above the whole-volume run's (chunking must
not cost quality; a chunked result that scores better against the
ground truth passes), 1 if not, 2 on a usage or setup error.
"""

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
import isbi_eval  # noqa: E402


def compact(seg):
    """The same partition with ids 1..n (uint32)."""
    inv = np.unique(seg, return_inverse=True)[1]
    return (inv.reshape(seg.shape) + 1).astype(np.uint32)


def read_chunked(a, shape):
    if a.layer:
        from layer_ref import read_layer
        info, seg = read_layer(a.layer)
        res = info["scales"][0]["resolution"]
        want = [float(v) for v in isbi_eval.RESOLUTION.split(",")]
        if [float(v) for v in res] != want:
            sys.exit("isbi_chunked: %s is at %s nm, not %s" %
                     (a.layer, res, isbi_eval.RESOLUTION))
    else:
        seg = np.fromfile(a.chunked, dtype="<u8")
        if seg.size != np.prod(shape):
            sys.exit("isbi_chunked: %s holds %d voxels, not %d" %
                     (a.chunked, seg.size, np.prod(shape)))
        seg = seg.reshape(shape)
    if seg.shape != shape:
        sys.exit("isbi_chunked: the chunked result is %s, the stack %s" %
                 (seg.shape, shape))
    return seg


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shared = os.environ.get("CNX_SHARED", os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--data", default=os.path.join(shared, "data",
                                                   "isbi2012"))
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--layer", help="a segmentation layer (directory)")
    src.add_argument("--chunked", help="raw uint64 labels, x fastest")
    ap.add_argument("--whole", default="")
    ap.add_argument("--tool", default="")
    ap.add_argument("--name", default="chunked")
    ap.add_argument("--max-diff", type=float, default=0.02)
    a = ap.parse_args(argv[1:])
    if not os.path.isdir(os.path.join(a.data, "image")):
        sys.exit("isbi_chunked: no ISBI data under %s" % a.data)
    tool = isbi_eval.find_tool(a.tool)

    images, gts = isbi_eval.load(a.data)
    whole, secs = isbi_eval.run_ours(tool, images, isbi_eval.OURS)
    if a.whole:
        other = np.fromfile(a.whole, dtype="<u4")
        if other.size != whole.size or \
                not np.array_equal(other.reshape(whole.shape), whole):
            print("FAIL: %s differs from segment_tool's whole-stack run"
                  % a.whole)
            return 1
        print("ok: %s equals segment_tool's whole-stack run" % a.whole)
    chunked = compact(read_chunked(a, images.shape))
    w = isbi_eval.scores(whole, gts)
    c = isbi_eval.scores(chunked, gts)

    print("ISBI 2012 training stack, 30 sections of 512x512; means over "
          "sections; VI in bits over interior voxels; ARE = adapted Rand")
    print("%-44s %8s %8s %8s %8s %7s" % ("method", "VIsplit", "VImerge",
                                         "VIsum", "ARE", "sec"))
    isbi_eval.row("whole stack (segment_tool)", w, secs)
    isbi_eval.row(a.name, c, float("nan"))
    d = c - w
    print("%-44s %+8.3f %+8.3f %+8.3f %+8.3f" %
          ("difference (chunked - whole)", d[0], d[1], d[0] + d[1], d[2]))
    print("segments: whole %d, chunked %d (summed over sections)" %
          (sum(len(np.unique(s)) for s in whole),
           sum(len(np.unique(s)) for s in chunked)))
    if c[0] + c[1] > 0.50:
        print("note: chunked VI sum %.3f is over 0.50 by %.3f"
              % (c[0] + c[1], c[0] + c[1] - 0.50))
    if d[0] > a.max_diff or d[1] > a.max_diff:
        print("FAIL: chunked is worse than the whole stack by more than "
              "%.3f VI (split %+.3f, merge %+.3f)" % (a.max_diff, d[0], d[1]))
        return 1
    print("PASS: chunked no more than %.3f VI worse than the whole stack "
          "(split %+.3f, merge %+.3f)" % (a.max_diff, d[0], d[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
