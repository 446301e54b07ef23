"""Checks a montage run from its files, with numpy and Pillow only (no cnx
code), against the truth a tile set was made with.

    montage_check.py --tiles DIR/tiles.json --truth truth.json \
        --layer STITCHED_LAYER [--image IMAGE_LAYER [--sections FILE]] \
        [--report FILE] [--max-position 1] [--max-median-residual 1] \
        [--max-step 0.05]

--tiles is the tile set the run read (its files relative to its directory);
--truth gives each tile's true top-left corner, gain and offset
(cnx.tileset-truth/1, as cnx-synth writes it); --layer is the stitched
image layer, whose montage/<scale>/<section> reports hold the solved
positions, gains and pair residuals.

- position: per section, the solved corners minus the true ones, less
  their mean (the montage fixes a translation of its own): every tile
  within --max-position px;
- residual: the median over all used pairs of |(solved b - solved a) -
  measured (dx, dy)|, recomputed from the reports, below
  --max-median-residual px;
- intensity steps: for every pair of tiles that truly overlap, the mean of
  each tile over the true overlap, before (raw pixels) and after
  normalisation (gain * pixel + offset from the report); the step is the
  difference over the section's mean intensity; the largest after must be
  below --max-step;
- with --image: the stitched section against the true section (shifted by
  the rounded mean translation), Pearson correlation over the pixels tiles
  cover, at least 0.95 in every section. With --sections (cnx-synth's
  tiles/sections.json) the tiles were cut from the section as the
  microscope recorded it, S_z = drift(I_z(U_z(p))), not from I_z: S_z is
  rebuilt from the image and that file with numpy (tests/py/
  synth_sections.py, written from docs/synth.md "Section distortions")
  and the stitched section is compared with it. Sections it marks missing
  must be absent from the tile set, and their montage reports (if the
  stage wrote any: a section inside the range is written black) empty.
Prints one line per check; exit 1 on a failure.
"""
import argparse
import json
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "py"))
from layer_ref import read_layer  # noqa: E402
import synth_sections  # noqa: E402  numpy only: S_z from sections.json

ap = argparse.ArgumentParser()
ap.add_argument("--tiles", required=True)
ap.add_argument("--truth", required=True)
ap.add_argument("--layer", required=True)
ap.add_argument("--image")
ap.add_argument("--sections")
ap.add_argument("--report")
ap.add_argument("--max-position", type=float, default=1.0)
ap.add_argument("--max-median-residual", type=float, default=1.0)
ap.add_argument("--max-step", type=float, default=0.05)
a = ap.parse_args()
failed = 0


def check(what, ok):
    global failed
    print(("ok: " if ok else "FAILED: ") + what)
    failed += not ok


tileset = json.load(open(a.tiles))
base = os.path.dirname(os.path.abspath(a.tiles))
truth = {t["id"]: t for s in json.load(open(a.truth))["sections"] for t in s["tiles"]}
info = json.load(open(os.path.join(a.layer, "info")))
scale = info["scales"][0]
rdir = os.path.join(a.layer, "montage", scale["key"])
reports = {}
for name in sorted(os.listdir(rdir)):
    r = json.load(open(os.path.join(rdir, name)))
    assert r["format"] == "cnx.montage/1", name
    reports[r["z"]] = r
stitched = None
if a.image:
    _, stitched = read_layer(a.layer)
    _, image = read_layer(a.image)
secdoc = synth_sections.load(a.sections) if a.sections else None
missing = set()
if secdoc is not None:
    missing = {e["z"] for e in secdoc["sections"] if e["missing"]}

pos_err, residuals, steps_before, steps_after, corr = [], [], [], [], []
sections = sorted(tileset["sections"], key=lambda s: s["z"])
extra = sorted(set(reports) - {s["z"] for s in sections})
check("one montage report per section (%d)%s" % (
          len(sections), ", empty ones for missing sections %r" % extra if extra else ""),
      all(s["z"] in reports for s in sections) and
      all(z in missing and not reports[z]["tiles"] for z in extra))
if secdoc is not None:
    check("sections marked missing (%r) have no tiles" % sorted(missing),
          not missing & {s["z"] for s in sections})
for sec in sections:
    z = sec["z"]
    rep = reports.get(z)
    if rep is None:
        continue
    solved = {t["id"]: t for t in rep["tiles"]}
    ids = [t["id"] for t in sec["tiles"]]
    d = np.array([[solved[i]["x"] - truth[i]["x"], solved[i]["y"] - truth[i]["y"]]
                  for i in ids])
    shift = d.mean(axis=0)
    pos_err.extend(np.hypot(*(d - shift).T).tolist())
    for p in rep["pairs"]:
        if not p["used"]:
            continue
        sa, sb = solved[p["a"]], solved[p["b"]]
        r = np.hypot(sb["x"] - sa["x"] - p["dx"], sb["y"] - sa["y"] - p["dy"])
        residuals.append(r)
    # Intensity steps over the true overlaps.
    pix = {t["id"]: np.asarray(Image.open(os.path.join(base, t["file"])),
                               dtype=np.float64) for t in sec["tiles"]}
    mean_all = np.mean([v.mean() for v in pix.values()])
    for i, ta in enumerate(sec["tiles"]):
        for tb in sec["tiles"][i + 1:]:
            A, B = truth[ta["id"]], truth[tb["id"]]
            x0, y0 = max(A["x"], B["x"]), max(A["y"], B["y"])
            x1 = min(A["x"] + ta["width"], B["x"] + tb["width"])
            y1 = min(A["y"] + ta["height"], B["y"] + tb["height"])
            if x1 - x0 < 8 or y1 - y0 < 8:
                continue
            va = pix[ta["id"]][y0 - A["y"]:y1 - A["y"], x0 - A["x"]:x1 - A["x"]]
            vb = pix[tb["id"]][y0 - B["y"]:y1 - B["y"], x0 - B["x"]:x1 - B["x"]]
            ga, gb = solved[ta["id"]], solved[tb["id"]]
            steps_before.append(abs(va.mean() - vb.mean()) / mean_all)
            ca = ga["gain"] * va.mean() + ga["offset"]
            cb = gb["gain"] * vb.mean() + gb["offset"]
            steps_after.append(abs(ca - cb) / mean_all)
    if stitched is not None:
        k = z - scale["voxel_offset"][2]
        ox, oy = scale["voxel_offset"][0], scale["voxel_offset"][1]
        sx, sy = int(round(shift[0])), int(round(shift[1]))
        h, w = image.shape[1], image.shape[2]
        # true section pixel (x, y) lies at stitched (x + sx, y + sy)
        st = stitched[k, sy - oy:sy - oy + h, sx - ox:sx - ox + w].astype(np.float64)
        if secdoc is not None:  # what the microscope recorded: S_z
            im = synth_sections.distort_section(image[z], secdoc["by_z"][z],
                                                secdoc["shape"]).astype(np.float64)
        else:
            im = image[z].astype(np.float64)
        if st.shape == im.shape:
            m = st > 0
            corr.append(np.corrcoef(st[m], im[m])[0, 1])
        else:
            corr.append(0.0)

pos_err = np.array(pos_err)
residuals = np.array(residuals) if residuals else np.array([np.inf])
figures = {
    "sections": len(sections),
    "tiles": int(pos_err.size),
    "position_error_median": float(np.median(pos_err)),
    "position_error_max": float(pos_err.max()),
    "pairs_used": int(len(residuals)),
    "residual_median": float(np.median(residuals)),
    "residual_max": float(residuals.max()),
    "step_before_median": float(np.median(steps_before)),
    "step_before_max": float(np.max(steps_before)),
    "step_after_median": float(np.median(steps_after)),
    "step_after_max": float(np.max(steps_after)),
}
check("every tile within %.2f px of its true position (after the mean "
      "translation): median %.3f, max %.3f px over %d tiles"
      % (a.max_position, figures["position_error_median"],
         figures["position_error_max"], figures["tiles"]),
      figures["position_error_max"] <= a.max_position)
check("median pair residual %.3f px < %.2f (max %.3f, %d pairs used)"
      % (figures["residual_median"], a.max_median_residual,
         figures["residual_max"], figures["pairs_used"]),
      figures["residual_median"] < a.max_median_residual)
check("intensity steps across seams: before %.1f%% median / %.1f%% max of the "
      "mean, after %.2f%% / %.2f%% (< %.0f%%)"
      % (100 * figures["step_before_median"], 100 * figures["step_before_max"],
         100 * figures["step_after_median"], 100 * figures["step_after_max"],
         100 * a.max_step),
      figures["step_after_max"] < a.max_step)
if corr:
    figures["correlation_min"] = float(np.min(corr))
    figures["correlation_median"] = float(np.median(corr))
    check("stitched sections against the %s sections: Pearson r median %.4f, "
          "min %.4f (>= 0.95)" % ("recorded (S_z)" if secdoc is not None else "true",
                                   figures["correlation_median"],
                                   figures["correlation_min"]),
          figures["correlation_min"] >= 0.95)
if a.report:
    json.dump(figures, open(a.report, "w"), indent=1, sort_keys=True)
sys.exit(1 if failed else 0)
