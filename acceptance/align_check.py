#!/usr/bin/env python3
"""Checks a section-alignment run from its files, with numpy and scipy only
(no cnx code), against the truth of the cnx-synth dataset it was made from.

    align_check.py --dataset DIR --stitched LAYER --aligned LAYER
        [--max-error 1.0] [--max-median-error 0.25] [--max-median-jump 0.5]
        [--min-pearson 0.95] [--max-intensity-step 0.05] [--margin 32]
        [--block B --overlap O] [--json OUT]
        [--segmentation SEG_LAYER [--max-vi-split X] [--max-vi-merge Y]
         [--gt-out FILE]]
        [--assume-undistorted]

--dataset is the cnx-synth output: the true image layer `image`, the gt
layer `gt`, tiles/truth.json (true tile corners) and tiles/sections.json
(per section z the map U_z from section pixel coordinates to true volume
coordinates, evaluated with tests/py/synth_sections.py `section_map`, and
whether the section is `missing`). --assume-undistorted takes U_z = identity
and no missing section for a dataset without sections.json (old cnx-synth).

--stitched is the montage's layer (stitched/v1): its montage/<scale>/<box>
reports give each tile's solved corner. Section z's stitched pixel P shows
section point p = P - s_z, s_z the mean over the section's tiles of
(solved - true) corner.

--aligned is the alignment's layer (aligned/v1), same voxel grid, and its
side objects align_transforms/<scale>/<chunk box> (cnx.align/1, one per
chunk; chunks span whole sections in x, y): per section a node grid of
displacements d; the aligned pixel q shows the stitched section at
q + d(q), d bilinear between the nodes (constant beyond the outer ones).

So an aligned grid node q of section z shows the true point
T_z(q) = U_z(q + d(q) - s_z). Checks (one line each; exit 1 on a failure):

a. accuracy: one global rigid transform G (rotation + translation, least
   squares) fitted to q -> T_z(q) over all nodes of all "ok" sections whose
   section point p lies at least --margin px inside the section; error
   |T_z(q) - G(q)|: max <= --max-error, median <= --max-median-error;
b. adjacent jump: |T_{z+1}(q) - T_z(q)| over the nodes valid in both of two
   adjacent ok sections, median <= --max-median-jump; with --block and
   --overlap, the pairs where consecutive solve blocks hand over (sections
   s_k + O//2 - 1 and s_k + O//2, s_k = k (B - O), k >= 1) against the
   others: seam median <= 1.5 x interior median + 0.05;
c. Pearson r per ok section between the aligned pixels with data (!= 0,
   at least --margin from the layer edge, G(q) at least --margin inside
   the true section) and the true image sampled bilinearly at G(q):
   min >= --min-pearson;
d. intensity steps: for adjacent ok sections, the means over the pixels
   with data in both (inside the margin), |m_{z+1} - m_z| / mean of all
   aligned data <= --max-intensity-step for every pair; the same figure is
   printed for the stitched layer (before);
e. status: every section has a transform; the sections the dataset marks
   missing are "failed" or "empty", never "ok"; failed / empty listed.
Before figures (stitched layer, reported): the jump between adjacent
stitched sections, |v_{z+1}(P) - v_z(P)| with v_z(P) = U_z(P - s_z) - P.

With --segmentation (uint64, the aligned grid or a sub-box of it): gt is
carried into the aligned frame (voxel (q, z) of an ok section -> nearest gt
voxel of section z at U_z(q + d(q) - s_z), 0 outside the volume) and the
segmentation scored on the voxels inside the margin where the aligned image
has data and the carried gt is non-zero: variation of information (CREMI:
log2, split = H(seg|gt), merge = H(gt|seg)) and adapted Rand error, computed
here with numpy and compared with tests/py/metrics_ref.py (scikit-image)
when scikit-image is importable. --gt-out writes the carried gt (uint64
raw, z y x, the segmentation's box) for other tools.
"""
import argparse
import json
import math
import os
import re
import sys

import numpy as np
from scipy import ndimage

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "py"))
from layer_ref import read_layer  # noqa: E402


def parse_box(name):
    """'x0-x1_y0-y1_z0-z1' (numbers may be negative) -> three (lo, hi)."""
    parts = name.split("_")
    out = []
    for p in parts:
        mm = re.match(r"^(-?\d+)-(-?\d+)$", p)
        if len(parts) != 3 or not mm:
            raise ValueError("not a box name: %r" % name)
        out.append((int(mm.group(1)), int(mm.group(2))))
    return tuple(out)


def rigid_fit(q, t):
    """Least-squares rotation R and translation c with R q + c ~ t (N x 2)."""
    qm, tm = q.mean(axis=0), t.mean(axis=0)
    a, b = q - qm, t - tm
    s_cos = np.sum(a[:, 0] * b[:, 0] + a[:, 1] * b[:, 1])
    s_sin = np.sum(a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0])
    th = math.atan2(s_sin, s_cos)
    R = np.array([[math.cos(th), -math.sin(th)], [math.sin(th), math.cos(th)]])
    c = tm - R @ qm
    return R, c, th


def bilinear_field(grid, vals, qx, qy):
    """Node values (ny, nx) interpolated at points qx, qy; constant beyond
    the outer nodes."""
    x0, y0, s = grid["x0"], grid["y0"], grid["step"]
    nx, ny = grid["nx"], grid["ny"]
    fx = np.clip((qx - x0) / s, 0.0, nx - 1)
    fy = np.clip((qy - y0) / s, 0.0, ny - 1)
    ix = np.minimum(np.floor(fx).astype(np.int64), max(nx - 2, 0))
    iy = np.minimum(np.floor(fy).astype(np.int64), max(ny - 2, 0))
    wx, wy = fx - ix, fy - iy
    ix1, iy1 = np.minimum(ix + 1, nx - 1), np.minimum(iy + 1, ny - 1)
    v00, v10 = vals[iy, ix], vals[iy, ix1]
    v01, v11 = vals[iy1, ix], vals[iy1, ix1]
    return ((1 - wy) * ((1 - wx) * v00 + wx * v10)
            + wy * ((1 - wx) * v01 + wx * v11))


def entropy_terms(a, b):
    """VI split H(b|a), merge H(a|b) in bits and adapted Rand error
    (scikit-image's definition) for label arrays a (gt), b (seg)."""
    _, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    n = a.size
    pair = ai.astype(np.int64) * (bi.max() + 1) + bi
    _, cnt = np.unique(pair, return_counts=True)
    ca = np.bincount(ai).astype(np.float64)
    cb = np.bincount(bi).astype(np.float64)
    cnt = cnt.astype(np.float64)
    h_ab = -np.sum(cnt / n * np.log2(cnt / n))
    h_a = -np.sum(ca / n * np.log2(ca / n))
    h_b = -np.sum(cb / n * np.log2(cb / n))
    split, merge = h_ab - h_a, h_ab - h_b
    s_pairs = np.sum(cnt * (cnt - 1))
    s_a, s_b = np.sum(ca * (ca - 1)), np.sum(cb * (cb - 1))
    prec = s_pairs / s_a if s_a else 1.0
    rec = s_pairs / s_b if s_b else 1.0
    are = 1.0 - 2 * prec * rec / (prec + rec) if prec + rec else 1.0
    return max(split, 0.0), max(merge, 0.0), are, prec, rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--stitched", required=True)
    ap.add_argument("--aligned", required=True)
    ap.add_argument("--transforms",
                    help="the layer holding align_transforms/ (the "
                         "workflows' alignment/v1; default: --aligned)")
    ap.add_argument("--max-error", type=float, default=1.0)
    ap.add_argument("--max-median-error", type=float, default=0.25)
    ap.add_argument("--max-median-jump", type=float, default=0.5)
    ap.add_argument("--min-pearson", type=float, default=0.95)
    ap.add_argument("--max-intensity-step", type=float, default=0.05)
    ap.add_argument("--margin", type=float, default=32)
    ap.add_argument("--control",
                    help="cnx.align/1 transforms of the same kernel on the "
                         "undistorted true image (align_tool over the "
                         "dataset's image layer)")
    ap.add_argument("--control-max-error", type=float, default=1.0)
    ap.add_argument("--accuracy-report-only", action="store_true",
                    help="print the accuracy against the truth and the "
                         "correlation with the true image instead of "
                         "checking them (the demo: its seed and size are "
                         "not the acceptance test's)")
    ap.add_argument("--control-max-median", type=float, default=0.25)
    ap.add_argument("--block", type=int)
    ap.add_argument("--overlap", type=int)
    ap.add_argument("--json")
    ap.add_argument("--segmentation")
    ap.add_argument("--max-vi-split", type=float)
    ap.add_argument("--max-vi-merge", type=float)
    ap.add_argument("--gt-out")
    ap.add_argument("--assume-undistorted", action="store_true")
    a = ap.parse_args()
    if (a.block is None) != (a.overlap is None):
        ap.error("--block and --overlap go together")

    failed = [0]
    fig = {}

    def check(what, ok):
        print(("ok: " if ok else "FAILED: ") + what)
        failed[0] += not ok

    def accuracy(what, ok):
        """A check of the accuracy against the truth, or with
        --accuracy-report-only a figure (the target lines say met or
        MISSED)."""
        if a.accuracy_report_only:
            print("  " + what)
        else:
            check(what, ok)

    # ---- the dataset's truth ------------------------------------------
    _, image = read_layer(os.path.join(a.dataset, "image"))
    depth, H, W = image.shape
    truth = json.load(open(os.path.join(a.dataset, "tiles", "truth.json")))
    true_xy = {t["id"]: (t["x"], t["y"]) for s in truth["sections"]
               for t in s["tiles"]}
    sec_path = os.path.join(a.dataset, "tiles", "sections.json")
    entries, missing = {}, set()
    if os.path.exists(sec_path):
        import synth_sections  # tests/py: the distortion reference
        doc = synth_sections.load(sec_path)
        shape = doc.get("shape", [W, H, depth])
        for k, e in enumerate(doc["sections"]):
            z = e.get("z", k)
            entries[z] = e
            if e.get("missing"):
                missing.add(z)

        def U(z, px, py):
            r = synth_sections.section_map(entries[z], np.asarray(px, float),
                                           np.asarray(py, float), shape)
            return np.asarray(r[0], float), np.asarray(r[1], float)
    elif a.assume_undistorted:
        print("note: no tiles/sections.json; U_z = identity, no missing "
              "section (--assume-undistorted)")

        def U(z, px, py):
            return np.asarray(px, float), np.asarray(py, float)
    else:
        sys.exit("align_check: %s missing (old dataset? see "
                 "--assume-undistorted)" % sec_path)

    # ---- stitched layer: per-section montage shift s_z ----------------
    sinfo, stitched = read_layer(a.stitched)
    sscale = sinfo["scales"][0]
    sox, soy, soz = sscale.get("voxel_offset", [0, 0, 0])
    rdir = os.path.join(a.stitched, "montage", sscale["key"])
    shift = {}
    for name in sorted(os.listdir(rdir)):
        r = json.load(open(os.path.join(rdir, name)))
        assert r["format"] == "cnx.montage/1", name
        d = [(t["x"] - true_xy[t["id"]][0], t["y"] - true_xy[t["id"]][1])
             for t in r["tiles"] if t.get("placed", True) and t["id"] in true_xy]
        if d:
            shift[r["z"]] = np.mean(np.array(d, float), axis=0)

    # ---- aligned layer and its transforms -----------------------------
    ainfo, aligned = read_layer(a.aligned)
    ascale = ainfo["scales"][0]
    aox, aoy, aoz = ascale.get("voxel_offset", [0, 0, 0])
    asx, asy, asz = ascale["size"]
    ssx, ssy, ssz = sscale["size"]
    check("aligned layer inside the stitched layer's voxel box, same z "
          "(offset %s, size %s)" % ([aox, aoy, aoz], ascale["size"]),
          aox >= sox and aoy >= soy and aox + asx <= sox + ssx and
          aoy + asy <= soy + ssy and aoz == soz and asz == ssz and
          aligned.dtype == np.uint8)
    tscale = ascale
    if a.transforms:
        tscale = json.load(open(os.path.join(a.transforms,
                                             "info")))["scales"][0]
    tdir = os.path.join(a.transforms or a.aligned, "align_transforms",
                        tscale["key"])
    tox, toy = tscale.get("voxel_offset", [0, 0, 0])[:2]
    tsx, tsy = tscale["size"][:2]
    secs, grid, bad_objects = {}, None, []
    cz = ascale["chunk_sizes"][0][2]
    for name in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []:
        (bx0, bx1), (by0, by1), (bz0, bz1) = parse_box(name)
        doc = json.load(open(os.path.join(tdir, name)))
        g = doc["grid"]
        gg = {"x0": float(g["origin"][0]), "y0": float(g["origin"][1]),
              "step": float(g["step"]), "nx": int(g["shape"][0]),
              "ny": int(g["shape"][1])}
        ok = (doc.get("format") == "cnx.align/1" and
              (bx0, bx1, by0, by1) == (tox, tox + tsx, toy, toy + tsy) and
              (bz0 - aoz) % cz == 0 and bz1 == min(bz0 + cz, aoz + asz) and
              sorted(s["z"] for s in doc["sections"]) == list(range(bz0, bz1)))
        if grid is None:
            grid = gg
        ok = ok and gg == grid
        if not ok:
            bad_objects.append(name)
        for s in doc["sections"]:
            secs[s["z"]] = s
    zs = list(range(aoz, aoz + asz))
    check("one cnx.align/1 transform object per chunk, every section once, "
          "one grid (%d sections%s)" % (len(secs), "; bad: " +
                                         ", ".join(bad_objects)
                                         if bad_objects else ""),
          grid is not None and not bad_objects and sorted(secs) == zs)
    if grid is None or sorted(secs) != zs:
        print("FAILED: cannot go on without the transforms")
        return 1
    nx, ny, step = grid["nx"], grid["ny"], grid["step"]
    gi, gj = np.meshgrid(np.arange(nx), np.arange(ny))  # (ny, nx)
    qx = grid["x0"] + gi * step
    qy = grid["y0"] + gj * step
    fig["grid"] = {"origin": [grid["x0"], grid["y0"]], "step": step,
                   "shape": [nx, ny]}

    # ---- e. statuses ---------------------------------------------------
    status = {z: secs[z]["status"] for z in zs}
    ok_z = [z for z in zs if status[z] == "ok"]
    not_ok = {z: status[z] for z in zs if status[z] != "ok"}
    no_shift = [z for z in ok_z if z not in shift]
    fig["sections"] = len(zs)
    fig["sections_ok"] = len(ok_z)
    fig["sections_failed"] = sorted(z for z in not_ok if not_ok[z] == "failed")
    fig["sections_empty"] = sorted(z for z in not_ok if not_ok[z] == "empty")
    fig["sections_missing"] = sorted(missing)
    check("statuses known: %d ok, failed %s, empty %s"
          % (len(ok_z), fig["sections_failed"], fig["sections_empty"]),
          all(s in ("ok", "failed", "empty") for s in status.values()))
    wrong = sorted(z for z in missing if status.get(z) == "ok")
    check("sections missing in the dataset %s are failed or empty (not ok: %s)"
          % (sorted(missing), wrong or "none"), not wrong)
    check("every ok section has a montage report with placed tiles%s"
          % (" (none for %s)" % no_shift if no_shift else ""), not no_shift)
    ok_z = [z for z in ok_z if z in shift]

    # ---- a. accuracy at the nodes -------------------------------------
    m = a.margin
    T, Q, V, Z = {}, [], [], []
    for z in ok_z:
        s = secs[z]
        dx = np.asarray(s["dx"], float).reshape(ny, nx)
        dy = np.asarray(s["dy"], float).reshape(ny, nx)
        px, py = qx + dx - shift[z][0], qy + dy - shift[z][1]
        inside = ((px >= m) & (px <= W - 1 - m) & (py >= m) & (py <= H - 1 - m))
        ux, uy = U(z, px, py)
        T[z] = (ux, uy, inside)
        Q.append(np.stack([qx[inside], qy[inside]], 1))
        V.append(np.stack([ux[inside], uy[inside]], 1))
        Z.append(np.full(int(inside.sum()), z))
    Q = np.concatenate(Q) if Q else np.zeros((0, 2))
    V = np.concatenate(V) if V else np.zeros((0, 2))
    Z = np.concatenate(Z) if Z else np.zeros(0, int)
    if len(Q) < 3:
        check("accuracy: at least 3 nodes inside the margin (%d)" % len(Q),
              False)
        return finish(a, fig, failed[0])
    R, c, theta = rigid_fit(Q, V)

    def G(x, y):
        return R[0, 0] * x + R[0, 1] * y + c[0], R[1, 0] * x + R[1, 1] * y + c[1]

    gx, gy = G(Q[:, 0], Q[:, 1])
    err = np.hypot(V[:, 0] - gx, V[:, 1] - gy)
    per_sec = {int(z): float(err[Z == z].max()) for z in ok_z if (Z == z).any()}
    worst = sorted(per_sec.items(), key=lambda kv: -kv[1])[:5]
    fig["G"] = {"rotation_deg": math.degrees(theta),
                "translation": [float(c[0]), float(c[1])]}
    fig["error_median"] = float(np.median(err))
    fig["error_max"] = float(err.max())
    fig["error_p99"] = float(np.percentile(err, 99))
    fig["error_nodes"] = int(err.size)
    fig["error_section_max"] = per_sec
    print("  G: rotation %.4f deg, translation (%.3f, %.3f); worst sections "
          "(z: max error px): %s" % (fig["G"]["rotation_deg"], c[0], c[1],
                                      ", ".join("%d: %.3f" % kv for kv in worst)))
    accuracy("accuracy vs truth (one global rigid G): median %.3f px <= %.2f, max "
          "%.3f px <= %.2f (p99 %.3f, %d nodes of %d ok sections)"
          % (fig["error_median"], a.max_median_error, fig["error_max"],
             a.max_error, fig["error_p99"], err.size, len(per_sec)),
          fig["error_median"] <= a.max_median_error and
          fig["error_max"] <= a.max_error)

    # ---- a2. against the control: the tissue's own drift removed -------
    # The same kernel on the undistorted true stack (--control, its
    # cnx.align/1 document) places the content of true point V at the
    # control-aligned point qc with qc + dc(qc) = V, i.e. qc ~ V - dc(V):
    # how far the stack drifts because the tissue's structures move from
    # section to section, which no image-based alignment can tell from a
    # distortion. Fitting one rigid transform from our q to qc measures
    # how well the distortions themselves were removed.
    if a.control:
        cdoc = json.load(open(a.control))
        cg = cdoc["grid"]
        cnx_, cny_ = cg["shape"]
        csec = {s_["z"]: s_ for s_ in cdoc["sections"]}
        QC, QQ, ZC = [], [], []
        for z in ok_z:
            if z not in csec or csec[z]["status"] != "ok":
                continue
            ux, uy, inside = T[z]
            fx = (ux[inside] - cg["origin"][0]) / cg["step"]
            fy = (uy[inside] - cg["origin"][1]) / cg["step"]
            cdx = np.asarray(csec[z]["dx"], float).reshape(cny_, cnx_)
            cdy = np.asarray(csec[z]["dy"], float).reshape(cny_, cnx_)
            ex = ndimage.map_coordinates(cdx, [fy, fx], order=1, mode="nearest")
            ey = ndimage.map_coordinates(cdy, [fy, fx], order=1, mode="nearest")
            QC.append(np.stack([ux[inside] - ex, uy[inside] - ey], 1))
            QQ.append(np.stack([qx[inside], qy[inside]], 1))
            ZC.append(np.full(int(inside.sum()), z))
        if QC:
            QC, QQ, ZC = np.concatenate(QC), np.concatenate(QQ), np.concatenate(ZC)
            Rc, cc, _ = rigid_fit(QQ, QC)
            ec = np.hypot(QC[:, 0] - (Rc[0, 0] * QQ[:, 0] + Rc[0, 1] * QQ[:, 1] + cc[0]),
                          QC[:, 1] - (Rc[1, 0] * QQ[:, 0] + Rc[1, 1] * QQ[:, 1] + cc[1]))
            fig["control_error_median"] = float(np.median(ec))
            fig["control_error_max"] = float(ec.max())
            fig["control_error_p99"] = float(np.percentile(ec, 99))
            accuracy("accuracy against the control (the same kernel on the "
                  "undistorted true stack: the tissue's own drift removed): "
                  "median %.3f px <= %.2f, max %.3f px <= %.2f (p99 %.3f, %d "
                  "nodes)" % (fig["control_error_median"],
                              a.control_max_median, fig["control_error_max"],
                              a.control_max_error, fig["control_error_p99"],
                              ec.size),
                  fig["control_error_median"] <= a.control_max_median and
                  fig["control_error_max"] <= a.control_max_error)

    # ---- b. adjacent jumps -------------------------------------------
    seams = set()
    if a.block is not None:
        k = 1
        while True:
            sk = k * (a.block - a.overlap)
            h = aoz + sk + a.overlap // 2
            if sk >= asz or a.block - a.overlap <= 0:
                break
            seams.add(h)  # pair (h - 1, h)
            k += 1
    jumps, jumps_seam, jumps_int, pair_med = [], [], [], {}
    for z in ok_z:
        if z + 1 not in T:
            continue
        ax, ay, ia = T[z]
        bx, by, ib = T[z + 1]
        both = ia & ib
        if not both.any():
            continue
        j = np.hypot(bx[both] - ax[both], by[both] - ay[both])
        pair_med[z] = float(np.median(j))
        jumps.append(j)
        (jumps_seam if z + 1 in seams else jumps_int).append(j)
    if jumps:
        allj = np.concatenate(jumps)
        fig["jump_median"] = float(np.median(allj))
        fig["jump_max"] = float(allj.max())
        fig["jump_pairs"] = len(jumps)
        check("adjacent-section jump |T_z+1 - T_z|: median %.3f px <= %.2f "
              "(max %.3f, %d pairs)" % (fig["jump_median"], a.max_median_jump,
                                        fig["jump_max"], len(jumps)),
              fig["jump_median"] <= a.max_median_jump)
        if seams:
            if jumps_seam and jumps_int:
                ms = float(np.median(np.concatenate(jumps_seam)))
                mi = float(np.median(np.concatenate(jumps_int)))
                fig["jump_seam_median"], fig["jump_interior_median"] = ms, mi
                check("block seams (handover pairs ending at %s): median jump "
                      "%.3f px vs %.3f elsewhere (<= 1.5 x + 0.05)"
                      % (sorted(seams), ms, mi), ms <= 1.5 * mi + 0.05)
            else:
                print("  block seams %s: no ok pair at a seam or elsewhere"
                      % sorted(seams))
    else:
        check("adjacent-section jump: no pair of adjacent ok sections", False)

    # ---- c. Pearson per section ---------------------------------------
    yy, xx = np.mgrid[aoy:aoy + asy, aox:aox + asx].astype(np.float64)
    layer_in = ((xx >= aox + m) & (xx <= aox + asx - 1 - m) &
                (yy >= aoy + m) & (yy <= aoy + asy - 1 - m))
    GX, GY = G(xx, yy)
    g_in = (GX >= m) & (GX <= W - 1 - m) & (GY >= m) & (GY <= H - 1 - m)
    corr = {}
    for z in ok_z:
        A = aligned[z - aoz]
        sel = (A != 0) & layer_in & g_in
        if sel.sum() < 16 or not (0 <= z < depth):
            corr[z] = 0.0
            continue
        t = ndimage.map_coordinates(image[z].astype(np.float64),
                                    [GY[sel], GX[sel]], order=1)
        av = A[sel].astype(np.float64)
        corr[z] = float(np.corrcoef(av, t)[0, 1]) if av.std() and t.std() else 0.0
    if corr:
        cv = np.array(list(corr.values()))
        fig["pearson_min"], fig["pearson_median"] = float(cv.min()), float(np.median(cv))
        fig["pearson_section"] = {int(k): v for k, v in corr.items()}
        worst = sorted(corr.items(), key=lambda kv: kv[1])[:3]
        accuracy("aligned vs true image at G(q): Pearson r median %.4f, min %.4f "
              ">= %.2f (lowest z: %s)" % (fig["pearson_median"],
                                          fig["pearson_min"], a.min_pearson,
                                          ", ".join("%d %.4f" % kv for kv in worst)),
              fig["pearson_min"] >= a.min_pearson)

    # ---- d. intensity steps ------------------------------------------
    def steps(vol, zlist):
        data = vol != 0
        allmean = float(vol[data].mean()) if data.any() else 1.0
        out = {}
        for z in zlist:
            if z + 1 not in zlist:
                continue
            A, B = vol[z - aoz], vol[z + 1 - aoz]
            sel = (A != 0) & (B != 0) & layer_in
            if sel.sum() < 16:
                continue
            out[z] = abs(float(B[sel].mean()) - float(A[sel].mean())) / allmean
        return out

    st_after = steps(aligned, set(ok_z))
    # The stitched sections over the aligned layer's box (same coordinates).
    st_before = steps(stitched[:, aoy - soy:aoy - soy + asy,
                               aox - sox:aox - sox + asx], set(ok_z))
    st_all = steps(aligned, set(zs))
    if st_after:
        za = max(st_after, key=st_after.get)
        fig["step_after_max"] = st_after[za]
        fig["step_after_median"] = float(np.median(list(st_after.values())))
        fig["step_all_sections_max"] = max(st_all.values()) if st_all else 0.0
        if st_before:
            fig["step_before_max"] = max(st_before.values())
            fig["step_before_median"] = float(np.median(list(st_before.values())))
        print("  before (stitched): intensity step median %.2f%%, max %.2f%% of "
              "the mean" % (100 * fig.get("step_before_median", 0),
                            100 * fig.get("step_before_max", 0)))
        check("intensity steps between adjacent ok sections: median %.2f%%, "
              "max %.2f%% (z %d/%d) <= %.1f%% (all sections incl. failed: max "
              "%.2f%%)" % (100 * fig["step_after_median"],
                           100 * fig["step_after_max"], za, za + 1,
                           100 * a.max_intensity_step,
                           100 * fig["step_all_sections_max"]),
              fig["step_after_max"] <= a.max_intensity_step)

    # ---- before: stitched jumps --------------------------------------
    vb = {}
    for z in zs:
        if z not in shift:
            continue
        px, py = qx - shift[z][0], qy - shift[z][1]
        inside = (px >= m) & (px <= W - 1 - m) & (py >= m) & (py <= H - 1 - m)
        ux, uy = U(z, px, py)
        vb[z] = (ux - qx, uy - qy, inside)
    bj = []
    for z in zs:
        if z in vb and z + 1 in vb:
            both = vb[z][2] & vb[z + 1][2]
            bj.append(np.hypot(vb[z + 1][0][both] - vb[z][0][both],
                               vb[z + 1][1][both] - vb[z][1][both]))
    if bj:
        bj = np.concatenate(bj)
        fig["before_jump_median"] = float(np.median(bj))
        fig["before_jump_max"] = float(bj.max())
        print("  before (stitched): adjacent-section jump median %.3f px, max "
              "%.3f px" % (fig["before_jump_median"], fig["before_jump_max"]))

    # ---- part 2: segmentation ----------------------------------------
    if a.segmentation:
        seg_score(a, fig, check, secs, grid, shift, U, aligned,
                  (aox, aoy, aoz), ok_z, W, H, depth)
    return finish(a, fig, failed[0])


def seg_score(a, fig, check, secs, grid, shift, U, aligned, aoff, ok_z, W, H,
              depth):
    aox, aoy, aoz = aoff
    m = a.margin
    sinfo, seg = read_layer(a.segmentation)
    sc = sinfo["scales"][0]
    ox, oy, oz = sc.get("voxel_offset", [0, 0, 0])
    sz, sy, sx = seg.shape
    asz, asy, asx = aligned.shape
    inside_box = (ox >= aox and oy >= aoy and oz >= aoz and
                  ox + sx <= aox + asx and oy + sy <= aoy + asy and
                  oz + sz <= aoz + asz)
    check("segmentation box [%d,%d,%d]+%s inside the aligned layer"
          % (ox, oy, oz, [sx, sy, sz]), inside_box)
    if not inside_box:
        return
    _, gt = read_layer(os.path.join(a.dataset, "gt"))
    nx, ny = grid["nx"], grid["ny"]
    yy, xx = np.mgrid[oy:oy + sy, ox:ox + sx].astype(np.float64)
    layer_in = ((xx >= aox + m) & (xx <= aox + asx - 1 - m) &
                (yy >= aoy + m) & (yy <= aoy + asy - 1 - m))
    carried = np.zeros(seg.shape, np.uint64)
    mask = np.zeros(seg.shape, bool)
    ok = set(ok_z)
    for k in range(sz):
        z = oz + k
        if z not in ok or not (0 <= z < depth):
            continue
        s = secs[z]
        dx = np.asarray(s["dx"], float).reshape(ny, nx)
        dy = np.asarray(s["dy"], float).reshape(ny, nx)
        px = xx + bilinear_field(grid, dx, xx, yy) - shift[z][0]
        py = yy + bilinear_field(grid, dy, xx, yy) - shift[z][1]
        ux, uy = U(z, px, py)
        ix, iy = np.rint(ux).astype(np.int64), np.rint(uy).astype(np.int64)
        inv = (ix >= 0) & (ix < W) & (iy >= 0) & (iy < H)
        g = np.zeros(ix.shape, np.uint64)
        g[inv] = gt[z][iy[inv], ix[inv]]
        carried[k] = g
        A = aligned[z - aoz, oy - aoy:oy - aoy + sy, ox - aox:ox - aox + sx]
        mask[k] = (A != 0) & layer_in
    if a.gt_out:
        carried.astype("<u8").tofile(a.gt_out)
    sel = mask & (carried != 0)
    n = int(sel.sum())
    if n == 0:
        check("segmentation: voxels to score", False)
        return
    g, s = carried[sel], seg[sel]
    split, merge, are, prec, rec = entropy_terms(g, s)
    fig.update(vi_split=split, vi_merge=merge, are=are,
               are_precision=prec, are_recall=rec, vi_voxels=n)
    try:
        import metrics_ref  # scikit-image
        rs, rm, ra, _, _, _ = metrics_ref.scores(g, s)
        agree = (abs(rs - split) < 1e-9 and abs(rm - merge) < 1e-9 and
                 abs(ra - are) < 1e-9)
        check("VI / ARE agree with tests/py/metrics_ref.py (scikit-image): "
              "%.6f %.6f %.6f" % (rs, rm, ra), agree)
    except ImportError:
        print("  (scikit-image not importable: VI not cross-checked)")
    what = ("segmentation vs carried gt (%d voxels, %d ok sections): VI split "
            "%.4f, merge %.4f, ARE %.4f" % (n, len([z for z in range(oz, oz + sz)
                                                   if z in ok]),
                                           split, merge, are))
    if a.max_vi_split is None and a.max_vi_merge is None:
        print("  " + what)
    else:
        lim_s = a.max_vi_split if a.max_vi_split is not None else math.inf
        lim_m = a.max_vi_merge if a.max_vi_merge is not None else math.inf
        check(what + " (<= %s / %s)" % (a.max_vi_split, a.max_vi_merge),
              split <= lim_s and merge <= lim_m)


# The targets: printed met or MISSED (with the figure) beside the
# checks, which use the bounds given on the command line (by default the
# same numbers; the acceptance test and the demo pass regression bounds
# where a target is missed, docs/align.md "Quality").
TARGETS = (
    ("accuracy median (one global rigid)", "error_median", "<=", 0.25, "px"),
    ("accuracy max (one global rigid)", "error_max", "<=", 1.0, "px"),
    ("adjacent-section jump median", "jump_median", "<=", 0.5, "px"),
    ("Pearson r, worst section", "pearson_min", ">=", 0.95, ""),
    ("intensity step, worst adjacent pair", "step_after_max", "<=", 0.05, ""),
    ("VI split of the aligned segmentation", "vi_split", "<=", 0.30, "bit"),
    ("VI merge of the aligned segmentation", "vi_merge", "<=", 0.30, "bit"),
)


def finish(a, fig, nfailed):
    for name, key, op, want, unit in TARGETS:
        if key not in fig:
            continue
        got = float(fig[key])
        met = bool(got <= want if op == "<=" else got >= want)
        print("target %s: %s %.4g %s %s %g %s" % (
            "met" if met else "MISSED", name, got, unit, op, want,
            "" if met else "(by %.4g)" % abs(got - want)))
        fig.setdefault("targets", {})[key] = {"value": got, "target": want,
                                              "met": met}
    fig["failed_checks"] = nfailed
    if a.json:
        with open(a.json, "w") as f:
            json.dump(fig, f, indent=1, sort_keys=True)
    return 1 if nfailed else 0


if __name__ == "__main__":
    sys.exit(main())
