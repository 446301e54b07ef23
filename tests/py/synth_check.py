"""Check a cnx-synth dataset with independent readers.

    python3 tests/py/synth_check.py DATASET_DIR...

Reads every layer straight from its files with numpy, following the format
spec rather than our code (raw chunks: little-endian, x fastest, edge
chunks truncated; compressed_segmentation: the independent decoder in
tests/py/cseg_ref.py), the PNG tiles with scikit-image, and checks what
docs/synth.md promises: every voxel labelled 1..N, each object one
6-connected component and mostly not convex, dark membranes, a boundary map
high on membranes, synapse partners where gt-synapses.json says, cleft and
PSD maps at the synapses, and each tile equal to gain * section + offset
within the noise at its true position. Prints one line per check group and
exits non-zero on the first failure.
"""
import json
import os
import sys

import numpy as np
from scipy import ndimage
from skimage import io

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
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


def read_layer(layer, want_type, want_dtype, shape, resolution):
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
    check([list(c) for c in s["chunk_sizes"]] == [[128, 128, 128]],
          "%s: chunk_sizes %r" % (layer, s["chunk_sizes"]))
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
    for z0 in range(0, sz, 128):
        for y0 in range(0, sy, 128):
            for x0 in range(0, sx, 128):
                x1, y1, z1 = min(x0 + 128, sx), min(y0 + 128, sy), min(z0 + 128, sz)
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


def membranes(gt):
    """Voxels with a 6-neighbour of another label."""
    m = np.zeros(gt.shape, dtype=bool)
    for ax in range(3):
        d = np.diff(gt, axis=ax) != 0
        lo = [slice(None)] * 3
        hi = [slice(None)] * 3
        lo[ax] = slice(0, -1)
        hi[ax] = slice(1, None)
        m[tuple(lo)] |= d
        m[tuple(hi)] |= d
    return m


def check_gt(gt):
    ids = np.unique(gt)
    n = int(ids[-1])
    check(ids[0] >= 1, "gt: label 0 present")
    check(len(ids) == n and n >= 10, "gt: labels are not 1..N (N=%d, %d distinct)" % (n, len(ids)))
    six = ndimage.generate_binary_structure(3, 1)
    sparse = 0
    for i, sl in enumerate(ndimage.find_objects(gt.astype(np.int64))):
        if sl is None:
            continue
        obj = gt[sl] == i + 1
        _, ncomp = ndimage.label(obj, structure=six)
        check(ncomp == 1, "gt: object %d has %d components" % (i + 1, ncomp))
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
    mem = membranes(gt)
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
    check(ts.get("format") == "cnx.tileset/1" and ts.get("dtype") == "uint8",
          "tiles.json: format or dtype")
    check(sorted(ts) == ["dtype", "format", "resolution", "sections"], "tiles.json: keys")
    check([float(r) for r in ts["resolution"]] == [float(r) for r in resolution],
          "tiles.json: resolution")
    check(truth.get("format") == "cnx.tileset-truth/1", "truth.json: format")
    sz, sy, sx = image.shape
    check([s["z"] for s in ts["sections"]] == list(range(sz)), "tiles.json: sections")
    check([s["z"] for s in truth["sections"]] == list(range(sz)), "truth.json: sections")
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
            want = gain * image[z, y:y + h, x:x + w].astype(np.float64) + off
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
    pngs = sum(len(files) for _, _, files in os.walk(os.path.join(root, "tiles"))) - 2
    check(pngs == ntiles, "tiles: %d files for %d tiles" % (pngs, ntiles))
    print("tiles: %d in %d sections, worst pixel error %.2f" % (ntiles, sz, worst))


def check_dataset(root):
    meta = load_json(os.path.join(root, "synth.json"))
    check(meta.get("format") == "cnx.synth/1", "synth.json: format")
    shape, res = meta["shape"], meta["resolution"]
    gt = read_layer(os.path.join(root, "gt"), "segmentation", "uint64", shape, res)
    image = read_layer(os.path.join(root, "image"), "image", "uint8", shape, res)
    boundary = read_layer(os.path.join(root, "boundary"), "image", "uint8", shape, res)
    cleft = read_layer(os.path.join(root, "cleft"), "image", "uint8", shape, res)
    psd = read_layer(os.path.join(root, "psd"), "image", "uint8", shape, res)
    print("%s: %s, seed %d, resolution %r" % (root, "x".join(map(str, shape)), meta["seed"], res))
    check_gt(gt)
    check_maps(gt, image, boundary)
    check_synapses(load_json(os.path.join(root, "gt-synapses.json")), gt, cleft, psd, res)
    check_tiles(root, image, res)


def main(roots):
    if not roots:
        sys.exit(__doc__)
    for root in roots:
        try:
            check_dataset(root)
        except CheckError as exc:
            print("synth_check: FAILED: %s: %s" % (root, exc))
            return 1
    print("synth_check: %d dataset(s) passed" % len(roots))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
