#!/usr/bin/env python3
"""Montage on real EM: cut ISBI 2012 sections into tile sets with known
truth, and score montage reports against that truth.

  montage_isbi.py cut --data DIR/isbi2012 --out OUT [--sections N] [--seed S]
      Cuts sections 00..N-1 (512 x 512 uint8) into 3 x 3 tiles of 192 px
      (grid 0, 160, 320: 32 px = 16.7 % overlap) the way cnx-synth cuts its
      own (docs/synth.md "Tile set"): true position = grid + uniform integer
      jitter in -3..3, the outer rows and columns flush with the section
      edge; gain g in 850..1150 / 1000, offset o in -15..15, pixel =
      clamp(floor((p * 1000 g + 500) / 1000) + o + e, 0, 255) with e uniform
      in -2..2; nominal = true + uniform integer error in -20..20. Writes
      OUT/tiles.json (cnx.tileset/1), OUT/truth.json (cnx.tileset-truth/1)
      and OUT/zNNNNN/rRR-cCC.png.
  montage_isbi.py check --tiles OUT --reports REPORTS [--limit-*]
      Reads every REPORTS/zNNNNN.json (cnx.montage/1) with the truth and
      checks, per section: the median residual of used pairs < 1 px; every
      placed tile within 1 px of its true position once the section's mean
      translation is removed; the intensity step across every used pair's
      true overlap, after the solved gain and offset, < 5 % of the mean
      (and reports the step before). Prints the figures; exit 1 on a miss.

Independent of the C code: numpy and PIL only.
"""
import argparse
import json
import os
import sys

import numpy as np
from PIL import Image

SIDE = 192
GRID = (0, 160, 320)
JITTER = 3
NOMINAL_ERROR = 20


def cut(args):
    rng = np.random.default_rng(args.seed)
    os.makedirs(args.out, exist_ok=True)
    sections, truth = [], []
    for z in range(args.sections):
        img = np.asarray(Image.open(os.path.join(args.data, "image",
                                                 "%02d.png" % z)))
        if img.ndim == 3:
            img = img[..., 0]
        img = img.astype(np.int64)
        h, w = img.shape
        assert (h, w) == (512, 512), (h, w)
        os.makedirs(os.path.join(args.out, "z%05d" % z), exist_ok=True)
        tiles, ttiles = [], []
        for r in range(3):
            for c in range(3):
                def pos(i, extent):
                    if i == 0:
                        return 0
                    if i == 2:
                        return extent - SIDE
                    return GRID[i] + int(rng.integers(-JITTER, JITTER + 1))
                tx, ty = pos(c, w), pos(r, h)
                g = int(rng.integers(850, 1151))
                o = int(rng.integers(-15, 16))
                nx = tx + int(rng.integers(-NOMINAL_ERROR, NOMINAL_ERROR + 1))
                ny = ty + int(rng.integers(-NOMINAL_ERROR, NOMINAL_ERROR + 1))
                e = rng.integers(-2, 3, size=(SIDE, SIDE))
                src = img[ty:ty + SIDE, tx:tx + SIDE]
                px = np.clip((src * g + 500) // 1000 + o + e, 0, 255)
                name = "z%05d/r%02d-c%02d.png" % (z, r, c)
                Image.fromarray(px.astype(np.uint8)).save(
                    os.path.join(args.out, name))
                tid = "z%05d-r%02d-c%02d" % (z, r, c)
                tiles.append({"file": name, "height": SIDE, "id": tid,
                              "width": SIDE, "x": nx, "y": ny})
                ttiles.append({"gain": g / 1000.0, "id": tid, "offset": o,
                               "x": tx, "y": ty})
        sections.append({"tiles": tiles, "z": z})
        truth.append({"tiles": ttiles, "z": z})
    with open(os.path.join(args.out, "tiles.json"), "w") as f:
        json.dump({"dtype": "uint8", "format": "cnx.tileset/1",
                   "resolution": [4, 4, 50], "sections": sections}, f,
                  sort_keys=True, separators=(",", ":"))
    with open(os.path.join(args.out, "truth.json"), "w") as f:
        json.dump({"format": "cnx.tileset-truth/1", "sections": truth}, f,
                  sort_keys=True, separators=(",", ":"))
    print("cut %d sections of 3 x 3 tiles of %d px into %s"
          % (args.sections, SIDE, args.out))


def load_tile(base, rec):
    return np.asarray(Image.open(os.path.join(base, rec["file"]))).astype(
        np.float64)


def check(args):
    tiles = json.load(open(os.path.join(args.tiles, "tiles.json")))
    truth = json.load(open(os.path.join(args.tiles, "truth.json")))
    truth = {s["z"]: {t["id"]: t for t in s["tiles"]}
             for s in truth["sections"]}
    ok = True
    worst = {"median": 0.0, "position": 0.0, "step": 0.0}
    before_all, nsec, npairs, nused = [], 0, 0, 0
    for sec in tiles["sections"]:
        z = sec["z"]
        path = os.path.join(args.reports, "z%05d.json" % z)
        if not os.path.exists(path):
            continue
        rep = json.load(open(path))
        assert rep["format"] == "cnx.montage/1" and rep["z"] == z
        nsec += 1
        recs = {t["id"]: t for t in sec["tiles"]}
        tru = truth[z]
        placed = [t for t in rep["tiles"] if t["placed"]]
        ex = np.array([t["x"] - tru[t["id"]]["x"] for t in placed])
        ey = np.array([t["y"] - tru[t["id"]]["y"] for t in placed])
        pos = float(np.max(np.hypot(ex - ex.mean(), ey - ey.mean())))
        used = [p for p in rep["pairs"] if p["used"]]
        med = float(np.median([p["residual"] for p in used])) if used else \
            float("inf")
        sol = {t["id"]: t for t in rep["tiles"]}
        steps, befores = [], []
        for p in used:
            ta, tb = tru[p["a"]], tru[p["b"]]
            ra, rb = recs[p["a"]], recs[p["b"]]
            x0, y0 = max(ta["x"], tb["x"]), max(ta["y"], tb["y"])
            x1 = min(ta["x"] + ra["width"], tb["x"] + rb["width"])
            y1 = min(ta["y"] + ra["height"], tb["y"] + rb["height"])
            if x1 <= x0 or y1 <= y0:
                ok = False
                print("z %d: used pair %s/%s does not truly overlap"
                      % (z, p["a"], p["b"]))
                continue
            a = load_tile(args.tiles, ra)[y0 - ta["y"]:y1 - ta["y"],
                                          x0 - ta["x"]:x1 - ta["x"]]
            b = load_tile(args.tiles, rb)[y0 - tb["y"]:y1 - tb["y"],
                                          x0 - tb["x"]:x1 - tb["x"]]
            ma = (sol[p["a"]]["gain"] * a + sol[p["a"]]["offset"]).mean()
            mb = (sol[p["b"]]["gain"] * b + sol[p["b"]]["offset"]).mean()
            steps.append(abs(ma - mb) / (0.5 * (ma + mb)))
            befores.append(abs(a.mean() - b.mean()) /
                           (0.5 * (a.mean() + b.mean())))
        step = max(steps) if steps else float("inf")
        before_all.extend(befores)
        npairs += len(rep["pairs"])
        nused += len(used)
        print("z %d: %d/%d tiles placed, %d/%d pairs used, median residual "
              "%.3f px (max %.3f), worst position error %.3f px, seam step "
              "%.2f %% (before %.1f %%)"
              % (z, len(placed), len(rep["tiles"]), len(used),
                 len(rep["pairs"]), med, rep["summary"]["max_residual"], pos,
                 100 * step, 100 * max(befores) if befores else 0))
        if len(placed) != len(rep["tiles"]):
            ok = False
            print("z %d: not every tile placed" % z)
        if not (med < 1.0 and pos < 1.0 and step < 0.05):
            ok = False
            print("z %d: FAILED" % z)
        worst["median"] = max(worst["median"], med)
        worst["position"] = max(worst["position"], pos)
        worst["step"] = max(worst["step"], step)
    if nsec == 0:
        print("no reports found in %s" % args.reports)
        return 1
    print("montage ISBI: %d sections, %d pairs, %d used; worst median "
          "residual %.3f px, worst position error %.3f px, worst seam step "
          "%.2f %% (median step before normalisation %.1f %%): %s"
          % (nsec, npairs, nused, worst["median"], worst["position"],
             100 * worst["step"], 100 * float(np.median(before_all)),
             "ok" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cut")
    c.add_argument("--data", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--sections", type=int, default=10)
    c.add_argument("--seed", type=int, default=2012)
    k = sub.add_parser("check")
    k.add_argument("--tiles", required=True)
    k.add_argument("--reports", required=True)
    args = ap.parse_args()
    return cut(args) if args.cmd == "cut" else check(args)


if __name__ == "__main__":
    sys.exit(main())
