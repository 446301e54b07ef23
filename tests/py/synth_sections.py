"""Section distortions of cnx-synth, rebuilt with numpy from docs/synth.md
("Section distortions") alone: no cnx code. Checkers import it.

    section_map(entry, px, py, shape=None) -> (tx, ty)   U_z, vectorised
    distort_section(true_section, entry, shape) -> S_z   uint8 (H, W)
    load(path) -> the tiles/sections.json document, with a by-z index

entry is one element of "sections" in tiles/sections.json; shape is the
document's "shape" ([W, H, Z]) or its first two values. Arrays are (y, x)
as numpy reads images. The arithmetic follows the documented order, so the
results match cnx-synth's to the last bit in all but rare ties of the
rounding (checkers compare with a tolerance of one gray level).

    python3 tests/py/synth_sections.py check DATASET_DIR

checks every tile of a cnx-synth dataset against g * S_z + o (the tile's
true gain and offset) within the noise bound docs/synth.md gives, S_z
rebuilt here from the image layer and tiles/sections.json; and that
missing sections have no tiles.
"""
import json
import os
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        doc = json.loads(f.read().decode("utf-8"))
    if doc.get("format") != "cnx.synth-sections/1":
        raise ValueError("%s: not a cnx.synth-sections/1 document" % path)
    doc["by_z"] = {s["z"]: s for s in doc["sections"]}
    return doc


def _basis(t):
    s = 1.0 - t
    t2 = t * t
    t3 = t2 * t
    return (s * s * s / 6.0,
            (3.0 * t3 - 6.0 * t2 + 4.0) / 6.0,
            (-3.0 * t3 + 3.0 * t2 + 3.0 * t + 1.0) / 6.0,
            t3 / 6.0)


def _axis(v, origin, spacing, grid):
    u = (v - origin) / spacing
    f = np.clip(np.floor(u), 1.0, float(grid - 3))
    return f.astype(np.int64), _basis(u - f)


def section_map(entry, px, py, shape=None):
    """U_z(px, py): true section coordinates of section pixel coordinates.

    The centre is ((W - 1) / 2, (H - 1) / 2); shape ([W, H, ...]) gives it,
    else entry must carry "centre"."""
    px = np.asarray(px, dtype=np.float64)
    py = np.asarray(py, dtype=np.float64)
    if shape is not None:
        cx, cy = (shape[0] - 1) / 2.0, (shape[1] - 1) / 2.0
    else:
        cx, cy = entry["centre"]
    s = float(entry["sin"])
    c = np.sqrt(1.0 - s * s)
    ex, ey = px - cx, py - cy
    rx = c * ex - s * ey
    ry = s * ex + c * ey
    w = entry["warp"]
    g = int(w["grid"])
    dx = np.asarray(w["dx"], dtype=np.float64).reshape(g, g)  # [j, i]
    dy = np.asarray(w["dy"], dtype=np.float64).reshape(g, g)
    i, bx = _axis(px, w["origin"][0], w["spacing"][0], g)
    j, by = _axis(py, w["origin"][1], w["spacing"][1], g)
    wx = np.zeros(np.broadcast(px, py).shape)
    wy = np.zeros_like(wx)
    for a in range(4):  # columns outside, rows inside, as documented
        qx = np.zeros_like(wx)
        qy = np.zeros_like(wx)
        for b in range(4):
            qx = qx + by[b] * dx[j - 1 + b, i - 1 + a]
            qy = qy + by[b] * dy[j - 1 + b, i - 1 + a]
        wx = wx + bx[a] * qx
        wy = wy + bx[a] * qy
    tx = ((cx + rx) + entry["translation"][0]) + wx
    ty = ((cy + ry) + entry["translation"][1]) + wy
    return tx, ty


def _reflect(i, n):
    if n == 1:
        return np.zeros_like(i)
    period = 2 * (n - 1)
    m = np.mod(i, period)
    return np.where(m >= n, period - m, m)


def distort_section(true_section, entry, shape=None):
    """S_z from the true section I_z ((H, W) uint8): I_z sampled at U_z
    bilinearly with mirror padding, rounded half up, then the drift
    clamp(round(gain * v + offset), 0, 255) in thousandths."""
    img = np.asarray(true_section)
    h, w = img.shape
    if shape is None:
        shape = (w, h)
    py, px = np.mgrid[0:h, 0:w].astype(np.float64)
    ux, uy = section_map(entry, px, py, shape)
    x0, y0 = np.floor(ux), np.floor(uy)
    fx, fy = ux - x0, uy - y0
    x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
    ix0, ix1 = _reflect(x0, w), _reflect(x0 + 1, w)
    iy0, iy1 = _reflect(y0, h), _reflect(y0 + 1, h)
    f = img.astype(np.float64)
    top = f[iy0, ix0] + fx * (f[iy0, ix1] - f[iy0, ix0])
    bottom = f[iy1, ix0] + fx * (f[iy1, ix1] - f[iy1, ix0])
    v = top + fy * (bottom - top)
    r = np.floor(v + 0.5).astype(np.int64)
    gm = int(round(entry["gain"] * 1000))
    om = int(round(entry["offset"] * 1000))
    n = r * gm + om + 500
    out = np.where(n < 0, 0, n // 1000)
    return np.clip(out, 0, 255).astype(np.uint8)


def _check_dataset(root):
    """Every tile against g * S_z + o; missing sections without tiles."""
    from PIL import Image
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from layer_ref import read_layer  # noqa: E402

    doc = load(os.path.join(root, "tiles", "sections.json"))
    with open(os.path.join(root, "tiles", "truth.json")) as f:
        truth = json.load(f)
    with open(os.path.join(root, "tiles", "tiles.json")) as f:
        tileset = json.load(f)
    _, image = read_layer(os.path.join(root, "image"))
    W, H, Z = doc["shape"]
    assert image.shape == (Z, H, W), (image.shape, doc["shape"])
    assert [s["z"] for s in doc["sections"]] == list(range(Z)), "sections.json: z"
    missing = {s["z"] for s in doc["sections"] if s["missing"]}
    present = [s["z"] for s in tileset["sections"]]
    assert sorted(present) == [z for z in range(Z) if z not in missing], \
        "tile set sections %r, missing %r" % (present, sorted(missing))
    assert [s["z"] for s in truth["sections"]] == present, "truth.json: sections"
    worst, checked, changed, exact_bad, exact_n = 0.0, 0, 0, 0, 0
    files = {t["id"]: t["file"] for s in tileset["sections"] for t in s["tiles"]}
    for sec in truth["sections"]:
        z = sec["z"]
        entry = doc["by_z"][z]
        sz = distort_section(image[z], entry, doc["shape"])
        changed += int(np.count_nonzero(sz != image[z]))
        for t in sec["tiles"]:
            px = np.asarray(Image.open(os.path.join(root, "tiles", files[t["id"]])))
            th, tw = px.shape
            # In thousandths, exactly: gain is a multiple of 0.001.
            gm = int(round(t["gain"] * 1000))
            want = gm * sz[t["y"]:t["y"] + th, t["x"]:t["x"] + tw].astype(np.int64) \
                + 1000 * int(t["offset"])
            ok = (want >= 3000) & (want <= 252000)  # nothing clamps
            err = np.abs(1000 * px.astype(np.int64) - want)[ok] / 1000.0
            # Exactly as cut: floor((p * gm + 500) / 1000) + o + e, e in -2..2,
            # so an S_z off by one level shows wherever e is +-2.
            base = (gm * sz[t["y"]:t["y"] + th, t["x"]:t["x"] + tw].astype(np.int64)
                    + 500) // 1000 + int(t["offset"])
            inside = (base >= 2) & (base <= 253)
            exact_bad += int(np.count_nonzero(np.abs(px.astype(np.int64) - base)[inside] > 2))
            exact_n += int(np.count_nonzero(inside))
            if err.size:
                worst = max(worst, float(err.max()))
                if err.max() > 2.5:
                    raise AssertionError("%s: differs from g*S_z+o by %.2f (%d pixels > 2.5)"
                                         % (t["id"], err.max(), int((err > 2.5).sum())))
            checked += 1
    assert exact_bad == 0, "%d of %d pixels outside floor(g*S_z+0.5)+o+(-2..2)" % (
        exact_bad, exact_n)
    if doc["distort"] == "none":
        assert changed == 0, "distort none, yet S_z differs from I_z in %d pixels" % changed
        assert all(s["sin"] == 0 and s["gain"] == 1 and s["offset"] == 0 and
                   s["translation"] == [0, 0] and not any(s["warp"]["dx"]) and
                   not any(s["warp"]["dy"]) for s in doc["sections"]), "none: not identity"
    else:
        assert changed > 0, "distorted, yet S_z equals I_z"
    print("synth_sections: %s: %d tiles in %d sections within %.2f of g*S_z+o, "
          "%d pixels exactly round(g*S_z)+o+noise (distort %s, missing %s, %d pixels "
          "of S_z differ from I_z)"
          % (root, checked, len(present), worst, exact_n, doc["distort"],
             sorted(missing), changed))


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "check":
        sys.exit(__doc__)
    try:
        for d in sys.argv[2:]:
            _check_dataset(d)
    except AssertionError as exc:
        print("synth_sections: FAILED: %s" % exc)
        sys.exit(1)
