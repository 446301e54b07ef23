#!/usr/bin/env python3
"""Independent checks of cnx-ingest outputs (numpy, scikit-image, tifffile).

Nothing here uses cnx code: layers are read straight from their `info` and
chunk files, images with skimage.io, compressed_segmentation chunks with the
separate numpy decoder in cseg_ref.py.

  ingest_check.py image LAYER_DIR FILE...         every voxel equals the files
  ingest_check.py segmentation LAYER_DIR FILE...  components match skimage
  ingest_check.py make-tiff DIR                   a small 16-bit TIFF stack
  ingest_check.py make-tiles SECTION.png... DIR   a tile set cut from sections
  ingest_check.py tiles SRC_DIR STORE_DIR         the recorded tile set
"""
import hashlib
import json
import os
import sys

import numpy as np
import skimage.io
import skimage.measure

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def read_info(layer):
    with open(os.path.join(layer, "info"), "rb") as f:
        return json.load(f)


def chunk_boxes(scale):
    """Yield (x0, x1, y0, y1, z0, z1) of every chunk, edge chunks truncated."""
    size = scale["size"]
    off = scale.get("voxel_offset", [0, 0, 0])
    chunk = scale["chunk_sizes"][0]
    for gz in range(-(-size[2] // chunk[2])):
        for gy in range(-(-size[1] // chunk[1])):
            for gx in range(-(-size[0] // chunk[0])):
                g = (gx, gy, gz)
                lo = [off[i] + g[i] * chunk[i] for i in range(3)]
                hi = [off[i] + min((g[i] + 1) * chunk[i], size[i])
                      for i in range(3)]
                yield lo[0], hi[0], lo[1], hi[1], lo[2], hi[2]


def cseg_decode(data, shape_xyz, block, dtype):
    """Decode one compressed_segmentation chunk into a (z, y, x) array."""
    try:
        import cseg_ref  # the independent numpy decoder (tests/py/cseg_ref.py)
    except ImportError as exc:
        fail("cannot import tests/py/cseg_ref.py (%s): compressed_segmentation "
             "chunks need the independent decoder" % exc)
    out = cseg_ref.decode(data, np.dtype(dtype), tuple(shape_xyz),
                          tuple(block), 1)  # (channel, z, y, x)
    return np.asarray(out)[0]


def read_layer(layer):
    """The whole scale 0 of a layer as a (z, y, x) array."""
    info = read_info(layer)
    if info.get("num_channels", 1) != 1:
        fail("num_channels %r" % info.get("num_channels"))
    scale = info["scales"][0]
    dtype = np.dtype(info["data_type"]).newbyteorder("<")
    nx, ny, nz = scale["size"]
    vol = np.zeros((nz, ny, nx), dtype=dtype)
    seen = np.zeros((nz, ny, nx), dtype=bool)
    for x0, x1, y0, y1, z0, z1 in chunk_boxes(scale):
        name = "%d-%d_%d-%d_%d-%d" % (x0, x1, y0, y1, z0, z1)
        path = os.path.join(layer, scale["key"], name)
        if not os.path.exists(path):
            fail("missing chunk %s" % path)
        with open(path, "rb") as f:
            data = f.read()
        shape = (x1 - x0, y1 - y0, z1 - z0)
        if scale["encoding"] == "raw":
            want = shape[0] * shape[1] * shape[2] * dtype.itemsize
            if len(data) != want:
                fail("%s: %d bytes, expected %d" % (path, len(data), want))
            block = np.frombuffer(data, dtype=dtype).reshape(shape[::-1])
        elif scale["encoding"] == "compressed_segmentation":
            block = cseg_decode(data, shape,
                                scale["compressed_segmentation_block_size"],
                                dtype)
        else:
            fail("unexpected encoding %r" % scale["encoding"])
        vol[z0:z1, y0:y1, x0:x1] = block
        seen[z0:z1, y0:y1, x0:x1] = True
    if not seen.all():
        fail("chunks do not cover the layer")
    chunk_files = sorted(os.listdir(os.path.join(layer, scale["key"])))
    expected = sorted("%d-%d_%d-%d_%d-%d" % b for b in chunk_boxes(scale))
    if chunk_files != expected:
        fail("unexpected objects in %s: %s"
             % (scale["key"], sorted(set(chunk_files) - set(expected))))
    return info, vol


def read_images(files):
    return [np.asarray(skimage.io.imread(f)) for f in files]


def check_image(layer, files):
    info, vol = read_layer(layer)
    imgs = read_images(files)
    if info["type"] != "image":
        fail("layer type %r" % info["type"])
    if vol.shape != (len(imgs),) + imgs[0].shape:
        fail("layer shape %s, images %s" % (vol.shape, imgs[0].shape))
    if vol.dtype.newbyteorder("=") != imgs[0].dtype.newbyteorder("="):
        fail("layer dtype %s, images %s" % (vol.dtype, imgs[0].dtype))
    for z, img in enumerate(imgs):
        if not np.array_equal(vol[z], img):
            bad = np.argwhere(vol[z] != img)[0]
            fail("section %d (%s) differs at y=%d x=%d: %d vs %d"
                 % (z, files[z], bad[0], bad[1], vol[z][tuple(bad)],
                    img[tuple(bad)]))
    print("ok: %s equals %d images voxel for voxel (%s %s)"
          % (layer, len(imgs), vol.dtype, "x".join(map(str, vol.shape[::-1]))))


def check_segmentation(layer, files):
    info, vol = read_layer(layer)
    imgs = read_images(files)
    if info["type"] != "segmentation" or info["data_type"] != "uint64":
        fail("layer is %s %s" % (info["type"], info["data_type"]))
    base = 0
    total = 0
    for z, img in enumerate(imgs):
        ours = vol[z].astype(np.uint64)
        ref = skimage.measure.label(img != 0, connectivity=1, background=0)
        # A bijection between label sets, 0 <-> 0.
        pairs = np.unique(np.stack([ours.ravel(), ref.ravel().astype(
            np.uint64)]), axis=1)
        if (len(np.unique(pairs[0])) != pairs.shape[1] or
                len(np.unique(pairs[1])) != pairs.shape[1]):
            fail("section %d: components differ from skimage (%d pairs for "
                 "%d/%d labels)" % (z, pairs.shape[1], len(np.unique(ours)),
                                    len(np.unique(ref))))
        zero = pairs[:, pairs[0] == 0]
        if zero.shape[1] > 1 or (zero.shape[1] == 1 and zero[1, 0] != 0):
            fail("section %d: label 0 is not background" % z)
        # The documented numbering: base+1, base+2, ... in raster order of
        # each component's first pixel.
        n = int(ref.max())
        flat = ref.ravel()
        labels, first = np.unique(flat, return_index=True)
        order = labels[labels != 0][np.argsort(first[labels != 0])]
        want = np.zeros(n + 1, dtype=np.uint64)
        want[order] = base + 1 + np.arange(n, dtype=np.uint64)
        if not np.array_equal(ours.ravel(), want[flat]):
            fail("section %d: ids are not %d.. in raster order" % (z, base + 1))
        base += n
        total += n
    print("ok: %s: %d sections, %d components, bijective with skimage and "
          "numbered in z then raster order" % (layer, len(imgs), total))


def make_tiff(out):
    import tifffile

    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(2012)
    # 70x45 (not a multiple of any chunk), values over 255 to catch byte
    # order, and three layouts: plain strips, zlib strips, 16x16 tiles.
    for z, kw in enumerate([{}, {"compression": "zlib"},
                            {"tile": (16, 16)}]):
        img = rng.integers(0, 65536, size=(45, 70), dtype=np.uint16)
        img[0, 0] = 0x1234
        tifffile.imwrite(os.path.join(out, "s%d.tif" % z), img, **kw)
    print("ok: wrote 3 16-bit TIFF sections to %s" % out)


def make_tiles(sections, out):
    """2x2 tiles of 300x300 per section, overlapping by 88 px, nominal
    positions a few pixels off, one tile as TIFF."""
    import tifffile

    doc = {"format": "cnx.tileset/1", "resolution": [4, 4, 50],
           "dtype": "uint8", "sections": []}
    jitter = [(0, 0), (3, -2), (-4, 1), (2, 5)]
    for z, path in enumerate(sections):
        img = skimage.io.imread(path)
        os.makedirs(os.path.join(out, "z%05d" % z), exist_ok=True)
        tiles = []
        for k, (r, c) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
            y, x = 212 * r, 212 * c
            tile = img[y:y + 300, x:x + 300]
            ext = "tif" if (z, k) == (0, 3) else "png"
            name = "z%05d/r%02d-c%02d.%s" % (z, r, c, ext)
            if ext == "tif":
                tifffile.imwrite(os.path.join(out, name), tile)
            else:
                skimage.io.imsave(os.path.join(out, name), tile,
                                  check_contrast=False)
            tiles.append({"id": "z%05d-r%02d-c%02d" % (z, r, c),
                          "file": name, "x": x + jitter[k][0],
                          "y": y + jitter[k][1], "width": 300,
                          "height": 300})
        doc["sections"].append({"z": z, "tiles": tiles})
    with open(os.path.join(out, "tiles.json"), "w") as f:
        json.dump(doc, f, indent=2)
    print("ok: wrote a tile set of %d sections to %s" % (len(sections), out))


def check_tiles(src, store):
    with open(os.path.join(src, "tiles.json")) as f:
        orig = json.load(f)
    with open(os.path.join(store, "tiles.json"), "rb") as f:
        raw = f.read()
    rec = json.loads(raw)
    canon = json.dumps(rec, sort_keys=True, separators=(",", ":"),
                       ensure_ascii=False).encode()
    if raw != canon:
        fail("recorded tiles.json is not canonical JSON")
    if rec["format"] != "cnx.tileset/1" or rec["dtype"] != orig["dtype"]:
        fail("format or dtype changed")
    if rec["resolution"] != orig["resolution"]:
        fail("resolution changed")
    ntiles = 0
    for so, sr in zip(orig["sections"], rec["sections"], strict=True):
        if so["z"] != sr["z"]:
            fail("section order changed")
        for to, tr in zip(so["tiles"], sr["tiles"], strict=True):
            if tr["file"] != "tiles/" + to["file"]:
                fail("tile %s: file %r" % (to["id"], tr["file"]))
            for k in ("id", "x", "y", "width", "height"):
                if tr[k] != to[k]:
                    fail("tile %s: %s changed" % (to["id"], k))
            if set(tr) != set(to) | {"sha256"}:
                fail("tile %s: keys %s" % (to["id"], sorted(tr)))
            with open(os.path.join(src, to["file"]), "rb") as f:
                a = f.read()
            with open(os.path.join(store, tr["file"]), "rb") as f:
                b = f.read()
            if a != b:
                fail("tile %s: stored bytes differ" % to["id"])
            if tr["sha256"] != "sha256:" + hashlib.sha256(a).hexdigest():
                fail("tile %s: wrong sha256" % to["id"])
            ntiles += 1
    print("ok: %s holds %d tiles byte for byte and a canonical tiles.json "
          "with their SHA-256" % (store, ntiles))


def main(argv):
    if len(argv) < 3:
        fail(__doc__)
    cmd = argv[1]
    if cmd == "image":
        check_image(argv[2], argv[3:])
    elif cmd == "segmentation":
        check_segmentation(argv[2], argv[3:])
    elif cmd == "make-tiff":
        make_tiff(argv[2])
    elif cmd == "make-tiles":
        make_tiles(argv[2:-1], argv[-1])
    elif cmd == "tiles":
        check_tiles(argv[2], argv[3])
    else:
        fail("unknown command %r" % cmd)


if __name__ == "__main__":
    main(sys.argv)
