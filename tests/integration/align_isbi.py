"""Section alignment on real EM: the ISBI 2012 stack distorted per section
with known transforms (numpy/scipy only, no cnx code), then checked against
what align_tool found.

    align_isbi.py distort --data DIR --out DIR [--seed N] [--sections N]
    align_isbi.py check --truth DIR/truth.json --transforms T.json
                        [--aligned DIR] [--max-error 1] [--json OUT]

distort: section z of the stack is resampled as the microscope would have
recorded it: section pixel p shows the true point
U_z(p) = c + R_z (p - c) + t_z + w_z(p) (bilinear, mirror padding), with
R_z a rotation of sin uniform in [-0.01, 0.01], t_z uniform in [-12, 12] px
per axis and w_z a smooth warp (a 5 x 5 grid of displacements uniform in
[-1.5, 1.5] px, cubic spline interpolation over the section); written as
OUT/zNNNNN.png with the parameters in OUT/truth.json.

check: the aligned point q of section z shows section point q + d_z(q)
(transforms.json, d bilinear between the nodes), i.e. the true point
U_z(q + d_z(q)). One global rigid transform G (least squares) is fitted
to q -> U_z(q + d_z(q)) over every ok section and every node at least
--margin px inside; every node of every section must lie within
--max-error px of G(q) (and the median within --max-median); with
--aligned, the rendered sections must correlate with the true sections
mapped by G (Pearson r >= --min-pearson, pixels with data inside the
margin). Prints one line per check; exit 1 on a failure.
"""
import argparse
import json
import os
import sys

import numpy as np
from PIL import Image
from scipy import ndimage

WARP_GRID = 5


def load_stack(data, n):
    names = sorted(f for f in os.listdir(os.path.join(data, "image"))
                   if f.endswith(".png"))[:n]
    return np.stack([np.asarray(Image.open(os.path.join(data, "image", f))
                                .convert("L"), dtype=np.float64)
                     for f in names])


def warp_field(entry, shape):
    """w_z on the full section grid (2, H, W), cubic spline of the coarse
    control grid spread over the section."""
    h, w = shape
    out = []
    for key in ("wx", "wy"):
        coarse = np.asarray(entry[key], dtype=np.float64).reshape(
            WARP_GRID, WARP_GRID)
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
        cy = yy * (WARP_GRID - 1) / (h - 1)
        cx = xx * (WARP_GRID - 1) / (w - 1)
        out.append(ndimage.map_coordinates(coarse, [cy, cx], order=3,
                                           mode="nearest"))
    return np.stack(out)


def section_map(entry, px, py, field):
    """U_z at section points (px, py) (arrays): the true point."""
    h, w = field.shape[1:]
    c = np.array([(w - 1) / 2.0, (h - 1) / 2.0])
    s = entry["sin"]
    co = np.sqrt(1 - s * s)
    dx, dy = px - c[0], py - c[1]
    wx = ndimage.map_coordinates(field[0], [py, px], order=1, mode="nearest")
    wy = ndimage.map_coordinates(field[1], [py, px], order=1, mode="nearest")
    tx = c[0] + co * dx - s * dy + entry["t"][0] + wx
    ty = c[1] + s * dx + co * dy + entry["t"][1] + wy
    return tx, ty


def distort(a):
    stack = load_stack(a.data, a.sections)
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    truth = {"format": "align-isbi-truth/1", "shape": list(stack.shape),
             "sections": []}
    h, w = stack.shape[1:]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    for z in range(stack.shape[0]):
        e = {"z": z, "sin": float(rng.uniform(-0.01, 0.01)),
             "t": [float(v) for v in rng.uniform(-12, 12, 2)],
             "wx": [float(v) for v in rng.uniform(-1.5, 1.5,
                                                    WARP_GRID ** 2)],
             "wy": [float(v) for v in rng.uniform(-1.5, 1.5,
                                                    WARP_GRID ** 2)]}
        field = warp_field(e, (h, w))
        tx, ty = section_map(e, xx, yy, field)
        img = ndimage.map_coordinates(stack[z], [ty, tx], order=1,
                                      mode="mirror")
        img = np.clip(np.rint(img), 1, 255).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(a.out, "z%05d.png" % z))
        truth["sections"].append(e)
    json.dump(truth, open(os.path.join(a.out, "truth.json"), "w"))
    print("distorted %d sections of %dx%d into %s" % (stack.shape[0], w, h,
                                                      a.out))


def fit_rigid(src, dst):
    """Least-squares rotation + translation taking src (n, 2) to dst."""
    ms, md = src.mean(0), dst.mean(0)
    u, _, vt = np.linalg.svd((src - ms).T @ (dst - md))
    r = (u @ vt).T
    if np.linalg.det(r) < 0:
        vt[-1] *= -1
        r = (u @ vt).T
    return r, md - r @ ms


def check(a):
    truth = json.load(open(a.truth))
    tr = json.load(open(a.transforms))
    nz, h, w = truth["shape"]
    g = tr["grid"]
    nx, ny = g["shape"]
    gx = g["origin"][0] + g["step"] * np.arange(nx)
    gy = g["origin"][1] + g["step"] * np.arange(ny)
    qx, qy = np.meshgrid(gx, gy)
    inside = ((qx >= a.margin) & (qx <= w - 1 - a.margin) &
              (qy >= a.margin) & (qy <= h - 1 - a.margin)).ravel()
    failed = 0

    def report(what, ok):
        nonlocal failed
        print(("ok: " if ok else "FAILED: ") + what)
        failed += not ok

    src, dst, zs = [], [], []
    statuses = {}
    for s in tr["sections"]:
        statuses[s["status"]] = statuses.get(s["status"], 0) + 1
        if s["status"] != "ok":
            continue
        e = truth["sections"][s["z"]]
        field = warp_field(e, (h, w))
        px = qx.ravel() + np.asarray(s["dx"])
        py = qy.ravel() + np.asarray(s["dy"])
        tx, ty = section_map(e, px, py, field)
        sel = inside
        src.append(np.stack([qx.ravel()[sel], qy.ravel()[sel]], 1))
        dst.append(np.stack([tx[sel], ty[sel]], 1))
        zs.append(np.full(sel.sum(), s["z"]))
    report("sections aligned: %s" % statuses, statuses.get("ok", 0) == nz)
    if not src:
        report("accuracy: no section was aligned", False)
        return 1
    src, dst, zs = np.concatenate(src), np.concatenate(dst), np.concatenate(zs)
    r, t = fit_rigid(src, dst)
    err = np.linalg.norm(dst - (src @ r.T + t), axis=1)
    worst = [(float(err[zs == z].max()), int(z)) for z in np.unique(zs)]
    worst.sort(reverse=True)
    before = []
    for s in tr["sections"]:
        e = truth["sections"][s["z"]]
        field = warp_field(e, (h, w))
        tx, ty = section_map(e, qx.ravel(), qy.ravel(), field)
        before.append(np.stack([tx - qx.ravel(), ty - qy.ravel()], 1)[inside])
    before = np.stack(before)
    jump_before = np.linalg.norm(np.diff(before, axis=0), axis=2)
    out = {"nodes": int(err.size), "median_error": float(np.median(err)),
           "max_error": float(err.max()),
           "rigid_angle_deg": float(np.degrees(np.arctan2(r[1, 0], r[0, 0]))),
           "rigid_shift": [float(v) for v in t],
           "worst_sections": worst[:5],
           "jump_before_median": float(np.median(jump_before)),
           "jump_before_max": float(jump_before.max())}
    print("before: adjacent sections' true offsets differ by %.2f px median,"
          " %.2f px max" % (out["jump_before_median"], out["jump_before_max"]))
    report("every node within %.2f px of one global rigid transform "
           "(max %.3f px, median %.3f px over %d nodes; worst sections %s)"
           % (a.max_error, out["max_error"], out["median_error"], err.size,
              ", ".join("z%d %.3f" % (z, e) for e, z in worst[:3])),
           out["max_error"] <= a.max_error)
    report("median error %.3f px <= %.2f" % (out["median_error"],
                                             a.max_median),
           out["median_error"] <= a.max_median)
    if a.aligned:
        stack = load_stack(a.data, nz) if a.data else None
        rs = []
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
        gxy = np.stack([xx.ravel(), yy.ravel()], 1) @ r.T + t
        m = ((xx >= a.margin) & (xx <= w - 1 - a.margin) &
             (yy >= a.margin) & (yy <= h - 1 - a.margin)).ravel()
        for z in range(nz):
            al = np.asarray(Image.open(os.path.join(
                a.aligned, "z%05d.png" % z)), dtype=np.float64).ravel()
            tru = ndimage.map_coordinates(stack[z], [gxy[:, 1], gxy[:, 0]],
                                          order=1, mode="mirror")
            sel = m & (al > 0)
            rs.append(float(np.corrcoef(al[sel], tru[sel])[0, 1]))
        out["pearson_min"] = min(rs)
        out["pearson_median"] = float(np.median(rs))
        report("aligned vs true sections: Pearson r min %.4f, median %.4f "
               "(>= %.2f)" % (min(rs), np.median(rs), a.min_pearson),
               min(rs) >= a.min_pearson)
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)
    return 1 if failed else 0


ap = argparse.ArgumentParser()
sub = ap.add_subparsers(dest="cmd", required=True)
d = sub.add_parser("distort")
d.add_argument("--data", required=True)
d.add_argument("--out", required=True)
d.add_argument("--seed", type=int, default=1)
d.add_argument("--sections", type=int, default=30)
c = sub.add_parser("check")
c.add_argument("--truth", required=True)
c.add_argument("--transforms", required=True)
c.add_argument("--aligned")
c.add_argument("--data", help="the ISBI directory (for --aligned)")
c.add_argument("--margin", type=float, default=32)
c.add_argument("--max-error", type=float, default=1.0)
c.add_argument("--max-median", type=float, default=0.25)
c.add_argument("--min-pearson", type=float, default=0.95)
c.add_argument("--json")
a = ap.parse_args()
if a.cmd == "distort":
    distort(a)
    sys.exit(0)
sys.exit(check(a))
