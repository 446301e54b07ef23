#!/usr/bin/env python3
"""Scores predicted synapses against cnx-synth's ground truth, with numpy
and scipy only (no cnx code): CREMI synaptic-partner matching, detection
matching and partner accuracy.

    syn_check.py --gt DATASET/gt-synapses.json --gt-seg LAYER_DIR
                 --pred FILE_OR_DIR [--json]
                 [--min-precision P] [--min-recall R] [--min-partner A]

--pred is one synapse table (JSON lines, docs/synapses.md) or a directory
whose files, at any depth, are all tables (every file is read; one that is
not a table is an error, never skipped). --gt-seg is the ground-truth
segmentation (Neuroglancer precomputed, raw or compressed_segmentation,
read with tests/py/cseg_ref.py); only the chunks under predicted partner
sites are decoded. Predicted voxel coordinates are converted to nm with the
resolution of gt-synapses.json (the layer frame, voxel offset 0).

Figures (one line each):
- partners (CREMI): a predicted pair matches a true pair when the gt ids at
  the predicted pre_site and post_site equal the true (pre_id, post_id) and
  both sites lie within 400 nm of the true pre_site_nm / post_site_nm; cost
  (d_pre + d_post) / 2; optimal one-to-one matching (Hungarian,
  scipy.optimize.linear_sum_assignment); precision, recall, F1.
- detection: predicted site_nm to true site_nm within 400 nm, Hungarian on
  the distance; precision, recall, F1, mean matched distance.
- partner accuracy over the detection-matched synapses: (ids) predicted
  (pre_id, post_id) equal the true ones - meaningful when the prediction
  used the gt segmentation; (gt lookup) the gt ids at the predicted
  pre_site / post_site equal the true ones - meaningful with any
  segmentation. --min-partner applies to the gt lookup.

Exit status 0 (the caller decides thresholds) unless a --min-* bound is
missed (1); 2 for unreadable or malformed input, including the same
predicted id twice.
"""
import argparse
import json
import os
import sys

import numpy as np
from scipy.optimize import linear_sum_assignment

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "py"))
import cseg_ref  # noqa: E402

MAX_NM = 400.0
TABLE_KEYS = {"id", "post_id", "post_site", "pre_id", "pre_site", "score",
              "site", "site_nm", "size"}
REQUIRED = {"id", "post_id", "post_site", "pre_id", "pre_site", "site",
            "site_nm"}


def die(msg):
    print("syn_check: " + msg, file=sys.stderr)
    sys.exit(2)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def ivec3(v):
    return isinstance(v, list) and len(v) == 3 and all(is_int(c) for c in v)


def nvec3(v):
    return isinstance(v, list) and len(v) == 3 and all(
        isinstance(c, (int, float)) and not isinstance(c, bool) for c in v)


def read_table(path):
    out = []
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        die("%s: not UTF-8 text" % path)
    if text and not text.endswith("\n"):
        die("%s: no newline at the end" % path)
    for n, line in enumerate(text.split("\n")[:-1] if text else [], 1):
        where = "%s: line %d" % (path, n)
        try:
            o = json.loads(line)
        except ValueError as e:
            die("%s: %s" % (where, e))
        if not isinstance(o, dict):
            die("%s: not a JSON object" % where)
        keys = set(o)
        if keys - TABLE_KEYS:
            die("%s: unknown keys %s" % (where, sorted(keys - TABLE_KEYS)))
        if REQUIRED - keys:
            die("%s: missing keys %s" % (where, sorted(REQUIRED - keys)))
        if not (is_int(o["id"]) and is_int(o["pre_id"]) and
                is_int(o["post_id"]) and ivec3(o["site"]) and
                ivec3(o["pre_site"]) and ivec3(o["post_site"]) and
                nvec3(o["site_nm"])):
            die("%s: wrong types" % where)
        o["_where"] = where
        out.append(o)
    return out


def read_pred(path):
    """Every table under path; (synapses, number of files)."""
    if os.path.isfile(path):
        files = [path]
    elif os.path.isdir(path):
        files = []
        for root, dirs, names in os.walk(path):
            dirs.sort()
            files += [os.path.join(root, n) for n in sorted(names)]
    else:
        die("%s: no such file or directory" % path)
    pred = []
    for f in files:
        pred += read_table(f)
    seen = {}
    for s in pred:
        if s["id"] in seen:
            die("duplicate id %d (%s and %s)" % (s["id"], seen[s["id"]],
                                                 s["_where"]))
        seen[s["id"]] = s["_where"]
    # By id, so that the figures do not depend on how tables are split.
    pred.sort(key=lambda s: s["id"])
    return pred, len(files)


class Layer:
    """Voxel lookups in the first scale of a precomputed layer, decoding
    (and caching) only the chunks that are asked for."""

    def __init__(self, path):
        self.path = path
        try:
            info = json.load(open(os.path.join(path, "info")))
        except (OSError, ValueError) as e:
            die("%s/info: %s" % (path, e))
        sc = info["scales"][0]
        self.dtype = np.dtype(info["data_type"]).newbyteorder("<")
        self.size = sc["size"]
        self.offset = sc.get("voxel_offset", [0, 0, 0])
        self.chunk = sc["chunk_sizes"][0]
        self.key = sc["key"]
        self.encoding = sc["encoding"]
        self.block = sc.get("compressed_segmentation_block_size")
        self.cache = {}

    def _chunk(self, g):
        if g in self.cache:
            return self.cache[g]
        lo = [self.offset[i] + g[i] * self.chunk[i] for i in range(3)]
        hi = [min(lo[i] + self.chunk[i], self.offset[i] + self.size[i])
              for i in range(3)]
        ext = [hi[i] - lo[i] for i in range(3)]
        name = "%d-%d_%d-%d_%d-%d" % (lo[0], hi[0], lo[1], hi[1], lo[2], hi[2])
        try:
            data = open(os.path.join(self.path, self.key, name), "rb").read()
        except OSError as e:
            die("%s: %s" % (self.path, e))
        if self.encoding == "compressed_segmentation":
            blk = cseg_ref.decode(data, self.dtype, ext, self.block)[0]
        elif self.encoding == "raw":
            blk = np.frombuffer(data, dtype=self.dtype).reshape(
                ext[2], ext[1], ext[0])
        else:
            die("%s: encoding %s not supported" % (self.path, self.encoding))
        self.cache[g] = blk
        return blk

    def at(self, p):
        """The label at voxel p (x, y, z); 0 outside the layer."""
        q = [p[i] - self.offset[i] for i in range(3)]
        if any(q[i] < 0 or q[i] >= self.size[i] for i in range(3)):
            return 0
        g = tuple(q[i] // self.chunk[i] for i in range(3))
        r = [q[i] - g[i] * self.chunk[i] for i in range(3)]
        return int(self._chunk(g)[r[2], r[1], r[0]])


def hungarian(cost, valid):
    """Optimal one-to-one matching over the valid entries: [(i, j)]."""
    if cost.size == 0 or not valid.any():
        return []
    big = 1e12
    c = np.where(valid, cost, big)
    rows, cols = linear_sum_assignment(c)
    return [(i, j) for i, j in zip(rows, cols) if valid[i, j]]


def prf(tp, npred, ntrue):
    p = tp / npred if npred else 0.0
    r = tp / ntrue if ntrue else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return p, r, f


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gt", required=True)
    ap.add_argument("--gt-seg", required=True)
    ap.add_argument("--pred", required=True)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--min-precision", type=float)
    ap.add_argument("--min-recall", type=float)
    ap.add_argument("--min-partner", type=float)
    a = ap.parse_args()

    try:
        gt = json.load(open(a.gt))
    except (OSError, ValueError) as e:
        die("%s: %s" % (a.gt, e))
    if gt.get("format") != "cnx.synapses/1":
        die("%s: not a cnx.synapses/1 document" % a.gt)
    res = np.array(gt["resolution"], dtype=np.float64)
    true = gt["synapses"]
    pred, nfiles = read_pred(a.pred)
    seg = Layer(a.gt_seg)

    nt, npd = len(true), len(pred)
    t_pre = np.array([t["pre_site_nm"] for t in true], np.float64).reshape(-1, 3)
    t_post = np.array([t["post_site_nm"] for t in true],
                      np.float64).reshape(-1, 3)
    t_site = np.array([t["site_nm"] for t in true], np.float64).reshape(-1, 3)
    t_ids = [(t["pre_id"], t["post_id"]) for t in true]
    p_pre = np.array([s["pre_site"] for s in pred],
                     np.float64).reshape(-1, 3) * res
    p_post = np.array([s["post_site"] for s in pred],
                      np.float64).reshape(-1, 3) * res
    p_site = np.array([s["site_nm"] for s in pred], np.float64).reshape(-1, 3)
    p_ids = [(s["pre_id"], s["post_id"]) for s in pred]
    p_gt = [(seg.at(s["pre_site"]), seg.at(s["post_site"])) for s in pred]

    def dist(a_, b_):
        if len(a_) == 0 or len(b_) == 0:
            return np.zeros((len(a_), len(b_)))
        return np.sqrt(((a_[:, None, :] - b_[None, :, :]) ** 2).sum(-1))

    # CREMI partners.
    d_pre, d_post = dist(p_pre, t_pre), dist(p_post, t_post)
    same = np.array([[p_gt[i] == t_ids[j] for j in range(nt)]
                     for i in range(npd)], dtype=bool).reshape(npd, nt)
    valid = same & (d_pre <= MAX_NM) & (d_post <= MAX_NM)
    pairs = hungarian(0.5 * (d_pre + d_post), valid)
    cp, cr, cf = prf(len(pairs), npd, nt)

    # Detection.
    d_site = dist(p_site, t_site)
    det = hungarian(d_site, d_site <= MAX_NM)
    dp, dr, df = prf(len(det), npd, nt)
    mean_d = float(np.mean([d_site[i, j] for i, j in det])) if det else 0.0
    acc_ids = sum(p_ids[i] == t_ids[j] for i, j in det)
    acc_gt = sum(p_gt[i] == t_ids[j] for i, j in det)
    ai = acc_ids / len(det) if det else 0.0
    ag = acc_gt / len(det) if det else 0.0

    fig = {
        "files": nfiles, "predicted": npd, "true": nt,
        "partners_tp": len(pairs), "partners_precision": cp,
        "partners_recall": cr, "partners_f1": cf,
        "detection_tp": len(det), "detection_precision": dp,
        "detection_recall": dr, "detection_f1": df,
        "detection_mean_nm": mean_d,
        "partner_accuracy_ids": ai, "partner_accuracy_gt": ag,
    }
    if a.json:
        print(json.dumps(fig, sort_keys=True))
    else:
        print("predicted: %d synapses from %d file(s); true: %d" %
              (npd, nfiles, nt))
        print("partners (CREMI, %g nm): tp %d, precision %.4f, recall %.4f, "
              "F1 %.4f" % (MAX_NM, len(pairs), cp, cr, cf))
        print("detection (site, %g nm): tp %d, precision %.4f, recall %.4f, "
              "F1 %.4f, mean distance %.1f nm" % (MAX_NM, len(det), dp, dr,
                                                  df, mean_d))
        print("partner accuracy (predicted ids): %d/%d = %.4f" %
              (acc_ids, len(det), ai))
        print("partner accuracy (gt ids at predicted sites): %d/%d = %.4f" %
              (acc_gt, len(det), ag))
    bad = []
    if a.min_precision is not None and cp < a.min_precision:
        bad.append("partner precision %.4f < %g" % (cp, a.min_precision))
    if a.min_recall is not None and cr < a.min_recall:
        bad.append("partner recall %.4f < %g" % (cr, a.min_recall))
    if a.min_partner is not None and ag < a.min_partner:
        bad.append("partner accuracy %.4f < %g" % (ag, a.min_partner))
    for b in bad:
        print("FAILED: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
