"""Check a cnx-synth dataset with independent readers.

    python3 tests/py/synth_check.py DATASET_DIR...
    python3 tests/py/synth_check.py --same-voxels DIR_A DIR_B
    python3 tests/py/synth_check.py --same-physics DIR_ANISO DIR_ISO

Reads every layer straight from its files with numpy, following the format
spec rather than our code (raw chunks: little-endian, x fastest, edge
chunks truncated, chunk size from the layer's info, which must be the one
synth.json asks for; compressed_segmentation: the independent decoder in
tests/py/cseg_ref.py), the PNG tiles with scikit-image, and checks what
docs/synth.md promises. Classic style: every voxel labelled 1..N, each
object one 6-connected component and mostly not convex, dark membranes, a
boundary map high on membranes, synapse partners where gt-synapses.json
says, cleft and PSD maps at the synapses, and each tile equal to gain *
section + offset within the noise at its true position, the section being
S_z as tests/py/synth_sections.py rebuilds it from tiles/sections.json
(the image's section itself for --distort none). Hard style (see
check_hard): the same labelling rules, radii in nm measured with scipy's
distance transform at the dataset's resolution, radius changing along
objects, non-convex objects, and a boundary map with gaps, false membranes,
thin membranes and, in anisotropic data, a noise level per section, all
within the ranges docs/synth.md gives. --same-voxels: two datasets written
with different --chunk hold identical voxels in every layer.
--same-physics: two hard datasets of one seed and one physical box at
different resolutions have the same physical statistics (object count,
volume and radius in nm), which a geometry in voxels would not. Prints one
line per check group and exits non-zero on the first failure.
"""
import json
import os
import sys

import numpy as np
from scipy import ndimage
from scipy.spatial import ConvexHull
from skimage import io

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import synth_sections  # noqa: E402  S_z from tiles/sections.json, numpy only
try:
    import cseg_ref  # independent compressed_segmentation codec
    cseg_ref.decode  # (data, dtype, (sx, sy, sz), block, channels)
except (ImportError, AttributeError) as exc:  # fail loudly: gt needs it
    sys.exit("synth_check: no usable tests/py/cseg_ref.py (%s); the gt "
             "layer needs the independent decoder" % exc)


class CheckError(Exception):
    pass


def check(cond, what):
    if not cond:
        raise CheckError(what)


def load_json(path):
    with open(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))


def read_layer(layer, want_type, want_dtype, shape, resolution, chunk=(128, 128, 128)):
    """The whole first scale as a (z, y, x) array, from the chunk files."""
    info = load_json(os.path.join(layer, "info"))
    check(info.get("type") == want_type, "%s: type %r" % (layer, info.get("type")))
    check(info.get("data_type") == want_dtype, "%s: data_type" % layer)
    check(info.get("num_channels") == 1, "%s: num_channels" % layer)
    check(len(info["scales"]) == 1, "%s: one scale" % layer)
    s = info["scales"][0]
    check(list(s["size"]) == list(shape), "%s: size %r" % (layer, s["size"]))
    check([float(r) for r in s["resolution"]] == [float(r) for r in resolution],
          "%s: resolution %r" % (layer, s["resolution"]))
    check(list(s.get("voxel_offset", [0, 0, 0])) == [0, 0, 0], "%s: offset" % layer)
    check([list(c) for c in s["chunk_sizes"]] == [list(chunk)],
          "%s: chunk_sizes %r, want %r" % (layer, s["chunk_sizes"], list(chunk)))
    cx, cy, cz = chunk
    seg = want_type == "segmentation"
    check(s["encoding"] == ("compressed_segmentation" if seg else "raw"),
          "%s: encoding %r" % (layer, s["encoding"]))
    if seg:
        check(list(s["compressed_segmentation_block_size"]) == [8, 8, 8],
              "%s: block size" % layer)
    dt = np.dtype(want_dtype).newbyteorder("<")
    sx, sy, sz = shape
    vol = np.zeros((sz, sy, sx), dtype=dt)
    names = set()
    for z0 in range(0, sz, cz):
        for y0 in range(0, sy, cy):
            for x0 in range(0, sx, cx):
                x1, y1, z1 = min(x0 + cx, sx), min(y0 + cy, sy), min(z0 + cz, sz)
                name = "%d-%d_%d-%d_%d-%d" % (x0, x1, y0, y1, z0, z1)
                names.add(name)
                with open(os.path.join(layer, s["key"], name), "rb") as f:
                    data = f.read()
                if seg:
                    block = cseg_ref.decode(
                        data, np.uint64, (x1 - x0, y1 - y0, z1 - z0), (8, 8, 8), 1)
                    block = np.asarray(block).reshape(z1 - z0, y1 - y0, x1 - x0)
                else:
                    check(len(data) == (x1 - x0) * (y1 - y0) * (z1 - z0) * dt.itemsize,
                          "%s/%s: %d bytes" % (layer, name, len(data)))
                    block = np.frombuffer(data, dtype=dt).reshape(
                        z1 - z0, y1 - y0, x1 - x0)
                vol[z0:z1, y0:y1, x0:x1] = block
    extra = set(os.listdir(os.path.join(layer, s["key"]))) - names
    check(not extra, "%s: unexpected files %r" % (layer, sorted(extra)[:3]))
    return vol


def borders(gt, axes):
    """Voxels with a neighbour of another label along one of axes (z=0)."""
    m = np.zeros(gt.shape, dtype=bool)
    for ax in axes:
        d = np.diff(gt, axis=ax) != 0
        lo = [slice(None)] * 3
        hi = [slice(None)] * 3
        lo[ax] = slice(0, -1)
        hi[ax] = slice(1, None)
        m[tuple(lo)] |= d
        m[tuple(hi)] |= d
    return m


def check_labels(gt):
    """Every voxel labelled 1..N, each object one 6-connected component."""
    ids = np.unique(gt)
    n = int(ids[-1])
    check(ids[0] >= 1, "gt: label 0 present")
    check(len(ids) == n and n >= 10, "gt: labels are not 1..N (N=%d, %d distinct)" % (n, len(ids)))
    six = ndimage.generate_binary_structure(3, 1)
    for i, sl in enumerate(ndimage.find_objects(gt.astype(np.int64))):
        if sl is None:
            continue
        _, ncomp = ndimage.label(gt[sl] == i + 1, structure=six)
        check(ncomp == 1, "gt: object %d has %d components" % (i + 1, ncomp))
    return n


def check_gt(gt):
    n = check_labels(gt)
    sparse = 0
    for i, sl in enumerate(ndimage.find_objects(gt.astype(np.int64))):
        if sl is not None:
            obj = gt[sl] == i + 1
            if obj.sum() * 4 < obj.size:
                sparse += 1
    check(sparse * 5 >= n, "gt: only %d of %d objects are thin/branched" % (sparse, n))
    # Touching: pairs of distinct labels across x faces.
    a, b = gt[:, :, :-1].ravel(), gt[:, :, 1:].ravel()
    d = a != b
    pairs = np.unique(np.stack([np.minimum(a[d], b[d]), np.maximum(a[d], b[d])]), axis=1)
    check(pairs.shape[1] >= 2 * n, "gt: only %d touching pairs" % pairs.shape[1])
    print("gt: %d objects, one component each, %d thin/branched, %d touching pairs"
          % (n, sparse, pairs.shape[1]))
    return n


def check_maps(gt, image, boundary):
    mem = borders(gt, (0, 1, 2))
    far = ~ndimage.binary_dilation(mem, structure=ndimage.generate_binary_structure(3, 1))
    im_on, im_off = image[mem].mean(), image[~mem].mean()
    check(im_on + 40 < im_off, "image: membranes %.1f not darker than interiors %.1f"
          % (im_on, im_off))
    b_on, b_far = boundary[mem].mean(), boundary[far].mean()
    check(b_on > 128 and b_far < 32, "boundary: %.1f on membranes, %.1f away" % (b_on, b_far))
    print("image: membranes %.1f, interiors %.1f; boundary: %.1f on membranes, %.1f away"
          % (im_on, im_off, b_on, b_far))


def check_synapses(doc, gt, cleft, psd, resolution):
    check(doc.get("format") == "cnx.synapses/1", "synapses: format")
    check([float(r) for r in doc["resolution"]] == [float(r) for r in resolution],
          "synapses: resolution")
    syn = doc["synapses"]
    check(len(syn) >= 1, "synapses: none")
    sz, sy, sx = gt.shape
    prev = None
    for k, s in enumerate(syn):
        what = "synapse %d" % s["id"]
        check(s["id"] == k + 1, what + ": ids not 1..n in order")
        for key in ("site", "pre_site", "post_site"):
            v = s[key]
            check(0 <= v[0] < sx and 0 <= v[1] < sy and 0 <= v[2] < sz, what + ": " + key)
            check(all(abs(s[key + "_nm"][i] - v[i] * resolution[i]) < 1e-6 for i in range(3)),
                  what + ": " + key + "_nm")
        site, pre, post = s["site"], s["pre_site"], s["post_site"]
        check(gt[pre[2], pre[1], pre[0]] == s["pre_id"], what + ": pre_site not in pre_id")
        check(gt[post[2], post[1], post[0]] == s["post_id"], what + ": post_site not in post_id")
        check(gt[site[2], site[1], site[0]] in (s["pre_id"], s["post_id"]), what + ": site")
        check(cleft[site[2], site[1], site[0]] > 128, what + ": cleft low at site")
        key = (site[2], site[1], site[0])
        check(prev is None or prev < key, what + ": not in (z, y, x) order")
        prev = key
        # PSD: high on the post side of the site, low on the pre side.
        z0, z1 = max(site[2] - 3, 0), min(site[2] + 4, sz)
        y0, y1 = max(site[1] - 3, 0), min(site[1] + 4, sy)
        x0, x1 = max(site[0] - 3, 0), min(site[0] + 4, sx)
        zz, yy, xx = np.mgrid[z0:z1, y0:y1, x0:x1]
        ball = (zz - site[2]) ** 2 + (yy - site[1]) ** 2 + (xx - site[0]) ** 2 <= 9
        lab = gt[z0:z1, y0:y1, x0:x1]
        p = psd[z0:z1, y0:y1, x0:x1]
        on_post = p[ball & (lab == s["post_id"])].mean()
        on_pre = p[ball & (lab == s["pre_id"])].mean()
        check(on_post > 150 and on_pre < 100,
              what + ": psd %.0f post side, %.0f pre side" % (on_post, on_pre))
    sites = np.array([s["site"] for s in syn], dtype=np.int64)
    if len(sites) > 1:
        d2 = ((sites[:, None, :] - sites[None, :, :]) ** 2).sum(-1)
        np.fill_diagonal(d2, 1 << 40)
        check(d2.min() >= 24 * 24, "synapses: sites closer than 24 voxels")
    print("synapses: %d, partners and maps agree" % len(syn))


def grid_pos(i, n, extent, side):
    return 0 if n <= 1 else (i * (extent - side) + (n - 1) // 2) // (n - 1)


def check_tiles(root, image, resolution):
    ts = load_json(os.path.join(root, "tiles", "tiles.json"))
    truth = load_json(os.path.join(root, "tiles", "truth.json"))
    # Tiles are cut from S_z, the section as the microscope recorded it
    # (tests/py/synth_sections.py rebuilds it from tiles/sections.json).
    secdoc = synth_sections.load(os.path.join(root, "tiles", "sections.json"))
    check(secdoc["shape"] == [image.shape[2], image.shape[1], image.shape[0]],
          "sections.json: shape")
    missing = {e["z"] for e in secdoc["sections"] if e["missing"]}
    check(ts.get("format") == "cnx.tileset/1" and ts.get("dtype") == "uint8",
          "tiles.json: format or dtype")
    check(sorted(ts) == ["dtype", "format", "resolution", "sections"], "tiles.json: keys")
    check([float(r) for r in ts["resolution"]] == [float(r) for r in resolution],
          "tiles.json: resolution")
    check(truth.get("format") == "cnx.tileset-truth/1", "truth.json: format")
    sz, sy, sx = image.shape
    present = [z for z in range(sz) if z not in missing]
    check([s["z"] for s in ts["sections"]] == present, "tiles.json: sections")
    check([s["z"] for s in truth["sections"]] == present, "truth.json: sections")
    ntiles = 0
    worst = 0
    for sec, tsec in zip(ts["sections"], truth["sections"]):
        z = sec["z"]
        tiles, ttiles = sec["tiles"], tsec["tiles"]
        check(len(tiles) == len(ttiles), "z %d: tile counts differ" % z)
        w, h = tiles[0]["width"], tiles[0]["height"]
        rows = 1 + max(int(t["id"].split("-r")[1][:2]) for t in tiles)
        cols = len(tiles) // rows
        check(rows * cols == len(tiles), "z %d: not a full grid" % z)
        covered = np.zeros((sy, sx), dtype=bool)
        section = synth_sections.distort_section(image[z], secdoc["by_z"][z], secdoc["shape"])
        if secdoc["distort"] == "none":
            check(np.array_equal(section, image[z]), "z %d: distort none, S_z != I_z" % z)
        for k, (t, tt) in enumerate(zip(tiles, ttiles)):
            r, c = divmod(k, cols)
            tid = "z%05d-r%02d-c%02d" % (z, r, c)
            check(t["id"] == tid and tt["id"] == tid, "z %d: tile %d id %r" % (z, k, t["id"]))
            check(t["file"] == "z%05d/r%02d-c%02d.png" % (z, r, c), tid + ": file")
            check(sorted(t) == ["file", "height", "id", "width", "x", "y"], tid + ": keys")
            x, y, gain, off = tt["x"], tt["y"], tt["gain"], tt["offset"]
            check(0 <= x <= sx - w and 0 <= y <= sy - h, tid + ": true position outside")
            check(abs(t["x"] - x) <= 20 and abs(t["y"] - y) <= 20, tid + ": nominal error")
            check(abs(x - grid_pos(c, cols, sx, w)) <= 3 and
                  abs(y - grid_pos(r, rows, sy, h)) <= 3, tid + ": jitter")
            check(0.85 <= gain <= 1.15 and -15 <= off <= 15, tid + ": gain/offset")
            px = io.imread(os.path.join(root, "tiles", t["file"]))
            check(px.dtype == np.uint8 and px.shape == (h, w), tid + ": PNG %r %s" % (px.shape, px.dtype))
            want = gain * section[y:y + h, x:x + w].astype(np.float64) + off
            ok = (want >= 3) & (want <= 252)  # not clamped
            err = np.abs(px.astype(np.float64) - want)[ok]
            if err.size:
                worst = max(worst, err.max())
                check(err.max() <= 3.0 and err.mean() < 1.5,
                      tid + ": differs from gain*section+offset by %.2f (mean %.2f)"
                      % (err.max(), err.mean()))
            covered[y:y + h, x:x + w] = True
            ntiles += 1
        check(covered.all(), "z %d: tiles do not cover the section" % z)
        # Neighbours overlap by at least 15% at their true positions.
        pos = [(t["x"], t["y"]) for t in ttiles]
        for k in range(len(pos)):
            r, c = divmod(k, cols)
            if c + 1 < cols:
                check(pos[k][0] + w - pos[k + 1][0] >= 0.15 * w, "z %d: x overlap" % z)
            if r + 1 < rows:
                check(pos[k][1] + h - pos[k + cols][1] >= 0.15 * h, "z %d: y overlap" % z)
    pngs = sum(len([f for f in files if f.endswith(".png")])
               for _, _, files in os.walk(os.path.join(root, "tiles")))
    check(pngs == ntiles, "tiles: %d files for %d tiles" % (pngs, ntiles))
    print("tiles: %d in %d sections (distort %s, missing %s), worst pixel error %.2f"
          % (ntiles, len(present), secdoc["distort"], sorted(missing), worst))


# ---- hard style ----------------------------------------------------------
#
# The ranges below are those docs/synth.md documents for the hard style at
# 8x8x30 nm (and, where it says so, 8x8x8 nm); each check would fail on a
# dataset without the property (a clean map, constant radii, convex cells,
# geometry in voxels).

def chords(gt, res):
    """Mean chord length (nm) along x, y, z: the mean length of the runs of
    one label along lines parallel to each axis. Objects whose geometry is
    physical have the same chords at any resolution."""
    out = []
    for ax, r in ((2, res[0]), (1, res[1]), (0, res[2])):
        changes = int(np.count_nonzero(np.diff(gt, axis=ax)))
        lines = gt.size // gt.shape[ax]
        out.append(gt.shape[ax] * r * lines / (lines + changes))
    return out


def anisotropic(res):
    return res[2] >= 1.5 * min(res[0], res[1])


def section_noise(b, sel):
    """Per section: the noise level of volume b on the voxels sel, from
    differences of x neighbours (robust: 1.4826 MAD / sqrt 2), which cancel
    the smooth parts."""
    pair = sel[:, :, 1:] & sel[:, :, :-1]
    dif = b[:, :, 1:].astype(np.int32) - b[:, :, :-1].astype(np.int32)
    out = []
    for z in range(b.shape[0]):
        if pair[z].sum() >= 500:
            out.append(np.median(np.abs(dif[z][pair[z]])) * 1.4826 / np.sqrt(2))
    return np.array(out)


def check_hard_geometry(gt, res):
    """Radii in nm, their change along objects, non-convex objects."""
    rz, ry, rx = res[2], res[1], res[0]
    # Inscribed radius: the distance (nm) to the nearest border voxel.
    b3 = borders(gt, (0, 1, 2))
    dist = ndimage.distance_transform_edt(~b3, sampling=(rz, ry, rx))
    n = int(gt.max())
    maxr = ndimage.maximum(dist, labels=gt, index=np.arange(1, n + 1)) + 0.5 * min(res)
    check(maxr.min() <= 60.0 and np.percentile(maxr, 90) >= 120.0,
          "radius: inscribed radii %.0f..%.0f nm (p90 %.0f), want thin (<= 60 nm) "
          "and thick (>= 120 nm) objects" % (maxr.min(), maxr.max(), np.percentile(maxr, 90)))
    # Cross-section radii in the section plane (x, y) and in z-y planes,
    # each from a 2D distance transform at the resolution of its plane.
    def cross_radii(planes, sampling):
        out = []
        for plane in planes:
            labs = np.unique(plane)
            inner = ~borders(plane[None], (1, 2))[0]
            d = ndimage.distance_transform_edt(inner, sampling=sampling)
            out.append(ndimage.maximum(d, labels=plane, index=labs))
        return np.concatenate(out) + 0.5 * min(sampling)
    rxy = cross_radii([gt[z] for z in range(0, gt.shape[0], 4)], (ry, rx))
    rzy = cross_radii([gt[:, :, x] for x in range(0, gt.shape[2], 8)], (rz, ry))
    for name, r in (("xy", rxy), ("zy", rzy)):
        lo, hi = np.percentile(r, [10, 90])
        check(lo <= 50.0 and hi >= 100.0,
              "radius: %s cross-sections p10 %.0f, p90 %.0f nm, want <= 50 and >= 100"
              % (name, lo, hi))
    # Along z-running objects: the cross-section radius of each section.
    ratios = []
    fills = []
    for i, sl in enumerate(ndimage.find_objects(gt.astype(np.int64))):
        if sl is None:
            continue
        m = gt[sl] == i + 1
        zs = np.nonzero(m.any(axis=(1, 2)))[0]
        if len(zs) >= 16:
            radii = []
            for z in zs[2:-2]:
                sec = m[z]
                if ndimage.label(sec)[1] != 1:
                    continue
                radii.append(ndimage.distance_transform_edt(np.pad(sec, 1), sampling=(ry, rx)).max())
            if len(radii) >= 10 and np.median(radii) <= 150.0:
                ratios.append(np.percentile(radii, 90) / np.percentile(radii, 10))
        if m.sum() >= 2000:
            # Convex hull of the object's outer voxels, in nm.
            shell = m & ~ndimage.binary_erosion(m)
            pts = np.argwhere(shell) * np.array([rz, ry, rx])
            try:
                hull = ConvexHull(pts).volume
            except Exception:  # flat objects: no 3D hull
                continue
            fills.append(m.sum() * rx * ry * rz / hull)
    ratios = np.array(ratios)
    fills = np.array(fills)
    check(len(ratios) >= 5, "radius: only %d z-running neurites to measure" % len(ratios))
    varying = float(np.mean(ratios >= 1.4))
    check(varying >= 0.4, "radius: only %.0f%% of %d z-running neurites change radius by "
          "1.4x or more along their length" % (100 * varying, len(ratios)))
    check(len(fills) >= 10, "shape: only %d objects of 2000 voxels or more" % len(fills))
    check(np.median(fills) <= 0.75 and np.mean(fills >= 0.9) <= 0.2,
          "shape: convex-hull fill median %.2f, %.0f%% >= 0.9: objects too convex"
          % (np.median(fills), 100 * np.mean(fills >= 0.9)))
    # Chords: a z chord is as long in nm as an x chord (longer by the share
    # of neurites running along z), not longer by the voxel ratio.
    cx, cy, cz = chords(gt, res)
    check(0.8 <= cz / cx <= 2.0 and 0.8 <= cy / cx <= 1.25,
          "geometry: mean chords x %.0f, y %.0f, z %.0f nm: not isotropic in nm" % (cx, cy, cz))
    print("geometry: %d objects, inscribed radius %.0f..%.0f nm; cross-section radius "
          "p10..p90 xy %.0f..%.0f nm, zy %.0f..%.0f nm; %d z-running neurites, %.0f%% "
          "change radius >= 1.4x; convex-hull fill median %.2f (%d objects); mean "
          "chords x %.0f, y %.0f, z %.0f nm"
          % (n, maxr.min(), maxr.max(), np.percentile(rxy, 10), np.percentile(rxy, 90),
             np.percentile(rzy, 10), np.percentile(rzy, 90), len(ratios), 100 * varying,
             np.median(fills), len(fills), cx, cy, cz))


def check_hard_maps(gt, image, boundary, res):
    """Membranes, gaps, false membranes, thickness, sections."""
    rz, ry, rx = res[2], res[1], res[0]
    b = boundary
    bxy = borders(gt, (1, 2))
    b3 = borders(gt, (0, 1, 2))
    dist = ndimage.distance_transform_edt(~b3, sampling=(rz, ry, rx))
    far = dist >= 40.0
    on, away = b[bxy].mean(), b[far].mean()
    check(on >= 150 and away <= 60, "boundary: %.1f on membranes, %.1f away" % (on, away))
    gaps = float(np.mean(b[bxy] < 80))
    check(0.01 <= gaps <= 0.06,
          "boundary: %.2f%% of membrane voxels below 80 (gaps), want 1..6%%" % (100 * gaps))
    false = float(np.mean(b[far] >= 128))
    check(0.003 <= false <= 0.05,
          "boundary: %.2f%% of voxels 40 nm from any membrane at 128 or more (false "
          "membranes), want 0.3..5%%" % (100 * false))
    # Thickness in the section plane: the two voxels flanking a face are
    # high, the voxels two further out (16 nm at 8 nm) are not.
    dxy = np.stack([ndimage.distance_transform_edt(~bxy[z]) for z in range(gt.shape[0])])
    high0 = float(np.mean(b[bxy] > 128))
    ring2 = (dxy == 2) & ~b3
    high2 = float(np.mean(b[ring2] > 128))
    check(high0 >= 0.8 and high2 <= 0.1,
          "boundary: %.0f%% of face voxels and %.0f%% of voxels 2 further above 128; "
          "want a membrane about 2 voxels thick" % (100 * high0, 100 * high2))
    # Sections: the image's noise level (away from membranes and dark
    # mitochondria) and the boundary's contrast (the median of the voxels
    # just outside the face voxels, below saturation) per section.
    noise = section_noise(image, far & (image > 120))
    ring = (dxy == 1) & ~b3
    contrast = np.array([np.median(b[z][ring[z]]) for z in range(gt.shape[0])
                         if ring[z].sum() >= 300])
    n_spread = noise.max() / max(noise.min(), 1e-9)
    c_spread = contrast.max() / max(contrast.min(), 1e-9)
    if anisotropic(res):
        check(n_spread >= 1.5 and c_spread >= 1.35,
              "sections: image noise %.1f..%.1f, boundary contrast %.0f..%.0f; want a "
              "level of each per section" % (noise.min(), noise.max(), contrast.min(),
                                             contrast.max()))
    else:
        check(n_spread <= 1.3 and c_spread <= 1.32,
              "sections: image noise %.1f..%.1f, boundary contrast %.0f..%.0f in an "
              "isotropic volume" % (noise.min(), noise.max(), contrast.min(), contrast.max()))
    im_on, im_off = image[bxy].mean(), image[far].mean()
    check(im_on + 40 < im_off, "image: membranes %.1f not darker than interiors %.1f"
          % (im_on, im_off))
    print("maps: boundary %.0f on membranes, %.0f away; gaps %.1f%% of membrane voxels; "
          "false membranes %.2f%% of inner voxels; face voxels %.0f%% high, 2 further "
          "%.0f%%; per section image noise %.1f..%.1f, boundary contrast %.0f..%.0f; "
          "image membranes %.0f, interiors %.0f"
          % (on, away, 100 * gaps, 100 * false, 100 * high0, 100 * high2, noise.min(),
             noise.max(), contrast.min(), contrast.max(), im_on, im_off))


def check_hard_synapses(doc, gt, cleft, psd, res):
    check(doc.get("format") == "cnx.synapses/1", "synapses: format")
    syn = doc["synapses"]
    check(len(syn) >= 1, "synapses: none")
    sz, sy, sx = gt.shape
    w = np.array(res, dtype=np.float64)
    prev = None
    for k, s in enumerate(syn):
        what = "synapse %d" % s["id"]
        check(s["id"] == k + 1, what + ": ids not 1..n in order")
        check("radius" not in s and 32 <= s["radius_nm"] <= 48, what + ": radius_nm")
        for key in ("site", "pre_site", "post_site"):
            v = s[key]
            check(0 <= v[0] < sx and 0 <= v[1] < sy and 0 <= v[2] < sz, what + ": " + key)
            check(all(abs(s[key + "_nm"][i] - v[i] * res[i]) < 1e-6 for i in range(3)),
                  what + ": " + key + "_nm")
        site, pre, post = s["site"], s["pre_site"], s["post_site"]
        check(gt[pre[2], pre[1], pre[0]] == s["pre_id"], what + ": pre_site not in pre_id")
        check(gt[post[2], post[1], post[0]] == s["post_id"], what + ": post_site not in post_id")
        check(gt[site[2], site[1], site[0]] in (s["pre_id"], s["post_id"]), what + ": site")
        # A cleft one voxel wide is blurred below 128 at the site itself.
        around = cleft[max(site[2] - 1, 0):site[2] + 2, max(site[1] - 1, 0):site[1] + 2,
                       max(site[0] - 1, 0):site[0] + 2]
        check(cleft[site[2], site[1], site[0]] > 80 and around.max() > 128,
              what + ": cleft low at site")
        key = (site[2], site[1], site[0])
        check(prev is None or prev < key, what + ": not in (z, y, x) order")
        prev = key
        # PSD: high on the post-synaptic voxels near the site (within 24 nm,
        # or the next section where sections are thicker), much lower on
        # the pre-synaptic voxels near it (within twice that: thin
        # pre-synaptic slivers next to the PSD are blurred up).
        def near_ball(radius):
            r = [int(radius // res[i]) for i in range(3)]
            z0, z1 = max(site[2] - r[2], 0), min(site[2] + r[2] + 1, sz)
            y0, y1 = max(site[1] - r[1], 0), min(site[1] + r[1] + 1, sy)
            x0, x1 = max(site[0] - r[0], 0), min(site[0] + r[0] + 1, sx)
            zz, yy, xx = np.mgrid[z0:z1, y0:y1, x0:x1]
            ball = (((zz - site[2]) * res[2]) ** 2 + ((yy - site[1]) * res[1]) ** 2 +
                    ((xx - site[0]) * res[0]) ** 2) <= radius ** 2
            box = (slice(z0, z1), slice(y0, y1), slice(x0, x1))
            return ball, gt[box], psd[box]
        near = max(24.0, max(res))
        ball, lab, p = near_ball(near)
        on_post = p[ball & (lab == s["post_id"])].mean()
        ball, lab, p = near_ball(2 * near)
        on_pre = p[ball & (lab == s["pre_id"])].mean()
        check(on_post > 120 and on_pre < on_post - 60,
              what + ": psd %.0f post side, %.0f pre side" % (on_post, on_pre))
    sites = np.array([s["site"] for s in syn], dtype=np.float64) * w
    if len(sites) > 1:
        d2 = ((sites[:, None, :] - sites[None, :, :]) ** 2).sum(-1)
        np.fill_diagonal(d2, np.inf)
        check(d2.min() >= 192.0 ** 2 - 1e-6, "synapses: sites closer than 192 nm")
    print("synapses: %d, partners and maps agree, radius %d..%d nm" %
          (len(syn), min(s["radius_nm"] for s in syn), max(s["radius_nm"] for s in syn)))


def check_hard(root, meta, v):
    res = [float(r) for r in meta["resolution"]]
    gt = v["gt"]
    n = check_labels(gt)
    print("gt: %d objects, every voxel labelled, one component each" % n)
    check_hard_geometry(gt, res)
    check_hard_maps(gt, v["image"], v["boundary"], res)
    check_hard_synapses(load_json(os.path.join(root, "gt-synapses.json")), gt,
                        v["cleft"], v["psd"], res)


def check_same_voxels(a, b):
    """Datasets a and b differ at most in chunking: identical voxels."""
    ma, va = read_dataset(a)
    mb, vb = read_dataset(b)
    for key in ("seed", "shape", "resolution"):
        check(ma[key] == mb[key], "same voxels: %s differs" % key)
    check(ma.get("style", "classic") == mb.get("style", "classic"), "same voxels: style")
    for name, _, _ in LAYERS:
        check(np.array_equal(va[name], vb[name]),
              "same voxels: layer %s differs between %s and %s" % (name, a, b))
    print("same voxels: %s (chunk %r) and %s (chunk %r), every layer identical"
          % (a, ma.get("chunk", [128, 128, 128]), b, mb.get("chunk", [128, 128, 128])))


def physical_stats(root):
    meta, v = read_dataset(root)
    check(meta.get("style") == "hard", "%s: not the hard style" % root)
    gt = v["gt"]
    res = [float(r) for r in meta["resolution"]]
    voxel = res[0] * res[1] * res[2]
    sizes = np.bincount(gt.ravel().astype(np.int64))[1:] * voxel
    box = [meta["shape"][i] * res[i] for i in range(3)]
    return box, int(gt.max()), float(np.median(sizes)), chords(gt, res)


def check_same_physics(a, b):
    """One seed and physical box at two resolutions: the same mean chord
    lengths in nm along every axis (within 1.45x) and object counts within
    1.8x, the scatter of two draws. Objects made in voxels would differ by
    the resolution ratio (3.75x along z from 8 to 30 nm sections)."""
    box_a, n_a, vol_a, ch_a = physical_stats(a)
    box_b, n_b, vol_b, ch_b = physical_stats(b)
    check(all(abs(box_a[i] - box_b[i]) < 1e-6 for i in range(3)),
          "same physics: boxes %r and %r nm differ" % (box_a, box_b))
    check(max(n_a, n_b) <= 1.8 * min(n_a, n_b), "same physics: %d and %d objects" % (n_a, n_b))
    for i, axis in enumerate("xyz"):
        check(max(ch_a[i], ch_b[i]) <= 1.45 * min(ch_a[i], ch_b[i]),
              "same physics: mean %s chords %.0f and %.0f nm" % (axis, ch_a[i], ch_b[i]))
    print("same physics: %d / %d objects, median volume %.4f / %.4f um^3, mean chords "
          "x %.0f / %.0f, y %.0f / %.0f, z %.0f / %.0f nm"
          % (n_a, n_b, vol_a / 1e9, vol_b / 1e9, ch_a[0], ch_b[0], ch_a[1], ch_b[1],
             ch_a[2], ch_b[2]))


LAYERS = (("gt", "segmentation", "uint64"), ("image", "image", "uint8"),
          ("boundary", "image", "uint8"), ("cleft", "image", "uint8"),
          ("psd", "image", "uint8"))


def read_dataset(root):
    """synth.json and every layer, as (meta, {name: (z, y, x) array})."""
    meta = load_json(os.path.join(root, "synth.json"))
    check(meta.get("format") == "cnx.synth/1", "synth.json: format")
    check(meta.get("style", "classic") in ("classic", "hard"), "synth.json: style")
    chunk = meta.get("chunk", [128, 128, 128])
    shape, res = meta["shape"], meta["resolution"]
    vols = {}
    for name, kind, dtype in LAYERS:
        vols[name] = read_layer(os.path.join(root, name), kind, dtype, shape, res, chunk)
    return meta, vols


def check_dataset(root):
    meta, v = read_dataset(root)
    style = meta.get("style", "classic")
    print("%s: %s, seed %d, resolution %r, style %s, chunk %r"
          % (root, "x".join(map(str, meta["shape"])), meta["seed"], meta["resolution"],
             style, meta.get("chunk", [128, 128, 128])))
    if style == "hard":
        check_hard(root, meta, v)
    else:
        check_gt(v["gt"])
        check_maps(v["gt"], v["image"], v["boundary"])
        check_synapses(load_json(os.path.join(root, "gt-synapses.json")), v["gt"],
                       v["cleft"], v["psd"], meta["resolution"])
    check_tiles(root, v["image"], meta["resolution"])


def main(args):
    if not args:
        sys.exit(__doc__)
    try:
        if args[0] in ("--same-voxels", "--same-physics"):
            if len(args) != 3:
                sys.exit(__doc__)
            if args[0] == "--same-voxels":
                check_same_voxels(args[1], args[2])
            else:
                check_same_physics(args[1], args[2])
            print("synth_check: passed")
            return 0
        for root in args:
            check_dataset(root)
    except CheckError as exc:
        print("synth_check: FAILED: %s" % exc)
        return 1
    print("synth_check: %d dataset(s) passed" % len(args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
