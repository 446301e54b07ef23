"""Checks a segmentation run from its files, with numpy and scikit-image
only (no cnx code): the layers are read as Neuroglancer precomputed
(tests/py/layer_ref.py; compressed_segmentation decoded by
tests/py/cseg_ref.py, written from the format description), meshes as legacy fragments.

    seg_check.py --data DIR --whole FILE --chunked FILE [--report FILE]

- segmentation/v1 against gt: VI split <= 0.30 and VI merge <= 0.30 (CREMI
  convention: gt 0 ignored, log2; scikit-image's variation_of_information);
- the kernel on the whole volume at once (--whole, uint32 raw, x fastest)
  within 0.02 of the chunked result, split and merge;
- segmentation/v1 equal, voxel for voxel, to the one-process chunked
  method (--chunked, uint64 raw);
- segment_properties/info: one entry per segment, its voxel count;
- every segment's mesh (mesh/<id>:0 and its fragments): after joining the
  fragments at identical vertices, every edge is shared by exactly two
  triangles with opposite orientations (closed, oriented), and for the
  segments that do not touch the volume's edge and have at least 1000
  voxels the enclosed volume is within 5% of the segment's voxels.
  (Marching cubes on voxels cuts every corner: a lone voxel encloses 1/6
  of its volume, a 100-voxel sliver ~15% less; the smaller ones are
  reported, not judged.)
Prints one line per check; exit 1 on a failure.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "py"))
import metrics_ref  # noqa: E402
from layer_ref import read_layer  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--data", required=True)
ap.add_argument("--whole", required=True)
ap.add_argument("--chunked", required=True)
ap.add_argument("--report")
a = ap.parse_args()
failed = 0
report = {}


def check(what, ok):
    global failed
    print(("ok: " if ok else "FAILED: ") + what)
    failed += not ok


seg_dir = os.path.join(a.data, "segmentation", "v1")
info, seg = read_layer(seg_dir)
_, gt = read_layer(os.path.join(a.data, "gt"))
shape = seg.shape
res = info["scales"][0]["resolution"]

# Quality against gt.
split, merge, are, _, _, n = metrics_ref.scores(gt.ravel(), seg.ravel())
report.update(vi_split=split, vi_merge=merge, are=are, voxels=n)
check("VI split %.4f <= 0.30 and VI merge %.4f <= 0.30 (ARE %.4f) against gt"
      % (split, merge, are), split <= 0.30 and merge <= 0.30)

# The same kernel on the whole volume at once.
whole = np.fromfile(a.whole, dtype="<u4").reshape(shape)
ws, wm, wa, _, _, _ = metrics_ref.scores(gt.ravel(), whole.ravel())
report.update(whole_vi_split=ws, whole_vi_merge=wm, whole_are=wa)
check("chunked within 0.02 VI of the whole-volume run (split %.4f vs %.4f, "
      "merge %.4f vs %.4f)" % (split, ws, merge, wm),
      abs(split - ws) <= 0.02 and abs(merge - wm) <= 0.02)

# The workers' bytes are the one-process method's.
ref = np.fromfile(a.chunked, dtype="<u8").reshape(shape)
check("segmentation/v1 equals the one-process chunked method voxel for voxel",
      np.array_equal(ref, seg))

# segment_properties.
ids, counts = np.unique(seg, return_counts=True)
props = json.load(open(os.path.join(seg_dir, "segment_properties", "info")))
inline = props["inline"]
vox = [p for p in inline["properties"] if p["id"] == "voxels"][0]
check("segment_properties: %d segments with their voxel counts" % len(ids),
      info.get("segment_properties") == "segment_properties" and
      props["@type"] == "neuroglancer_segment_properties" and
      [int(i) for i in inline["ids"]] == ids.tolist() and
      vox["values"] == counts.tolist())
report["segments"] = int(len(ids))

# The label (volume at the layer's resolution, the voxel the id comes from:
# id - 1 = x | y << 21 | z << 42) and the tags (size class; multi_chunk when
# the segment has voxels in more than one chunk), from the labels alone.
lab = [p for p in inline["properties"] if p["id"] == "label"][0]
tg = [p for p in inline["properties"] if p["id"] == "tags"][0]
cx, cy, cz = info["scales"][0]["chunk_sizes"][0]
chunk_of = ((np.arange(shape[0]) // cz)[:, None, None] * 1_000_000 +
            (np.arange(shape[1]) // cy)[None, :, None] * 1_000 +
            (np.arange(shape[2]) // cx)[None, None, :])
pairs = np.unique(np.stack([seg.ravel().astype(np.uint64),
                            np.broadcast_to(chunk_of, shape).ravel().astype(np.uint64)]), axis=1)
nchunks = dict(zip(*np.unique(pairs[0], return_counts=True)))
want_labels, want_tags = [], []
um3 = float(res[0]) * float(res[1]) * float(res[2]) * 1e-9
for i, c in zip(ids.tolist(), counts.tolist()):
    v, m = i - 1, (1 << 21) - 1
    vol = c * um3
    want_labels.append("%.3g um3 @ %d,%d,%d" % (vol, v & m, (v >> 21) & m, v >> 42))
    cls = 0 if vol < 0.1 else 1 if vol < 1.0 else 2
    want_tags.append([cls] + ([3] if nchunks[i] > 1 else []))
check("segment_properties: labels (volume, origin voxel) and tags (size, multi_chunk) "
      "of %d segments, %d in several chunks" % (len(ids), sum(1 for t in want_tags if 3 in t)),
      lab["values"] == want_labels and tg["values"] == want_tags and
      tg["tags"] == ["small", "medium", "large", "multi_chunk"])


def load_mesh(sid):
    man = json.load(open(os.path.join(seg_dir, "mesh", "%d:0" % sid)))
    verts, tris, base = [], [], 0
    for frag in man["fragments"]:
        b = open(os.path.join(seg_dir, "mesh", frag), "rb").read()
        nv = int(np.frombuffer(b[:4], "<u4")[0])
        v = np.frombuffer(b[4:4 + 12 * nv], "<f4").reshape(nv, 3)
        t = np.frombuffer(b[4 + 12 * nv:], "<u4").reshape(-1, 3)
        if len(b) != 4 + 12 * nv + 4 * t.size or t.size == 0:
            raise ValueError("fragment %s: bad length" % frag)
        verts.append(v)
        tris.append(t.astype(np.int64) + base)
        base += nv
    v = np.concatenate(verts)
    t = np.concatenate(tris)
    # Join fragments: identical coordinates are one vertex.
    uv, inv = np.unique(v, axis=0, return_inverse=True)
    return uv.astype(np.float64), inv.ravel()[t], len(man["fragments"])


def closed(t):
    e = np.concatenate([t[:, [0, 1]], t[:, [1, 2]], t[:, [2, 0]]])
    if (e[:, 0] == e[:, 1]).any():
        return False
    d = e[:, 0] * (1 << 32) + e[:, 1]
    r = e[:, 1] * (1 << 32) + e[:, 0]
    du = np.unique(d)
    # each directed edge once, and its reverse present: every undirected
    # edge in exactly two triangles, oriented oppositely
    return len(du) == len(d) and np.isin(r, du).all()


def volume(v, t):
    a, b, c = v[t[:, 0]], v[t[:, 1]], v[t[:, 2]]
    return float(np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6.0)


if info.get("mesh") != "mesh":
    check("info names the mesh directory", False)
else:
    from scipy import ndimage
    dense = np.searchsorted(ids, seg) + 1  # 1..k, for find_objects
    boxes = ndimage.find_objects(dense)
    bad_closed, bad_volume, interior, worst, frags = [], [], 0, 0.0, 0
    small_errs = []
    vox_nm3 = res[0] * res[1] * res[2]
    for k, (sid, cnt) in enumerate(zip(ids.tolist(), counts.tolist())):
        v, t, nf = load_mesh(sid)
        frags += nf
        if not closed(t):
            bad_closed.append(sid)
        if any(sl.start == 0 or sl.stop == dim
               for sl, dim in zip(boxes[k], shape)):
            continue
        err = abs(volume(v, t) / (cnt * vox_nm3) - 1)
        if cnt < 1000:
            small_errs.append(err)
            continue
        interior += 1
        worst = max(worst, err)
        if err > 0.05:
            bad_volume.append((sid, err))
    report.update(meshes=len(ids), fragments=frags, interior=interior,
                  worst_volume_error=worst, small_interior=len(small_errs),
                  small_median_volume_error=float(np.median(small_errs))
                  if small_errs else 0.0)
    check("every mesh closed and oriented after joining its fragments "
          "(%d meshes, %d fragments; not closed: %s)"
          % (len(ids), frags, bad_closed[:5]), not bad_closed)
    check("%d segments of >= 1000 voxels off the edge: mesh volume within 5%% "
          "of the voxels (worst %.2f%%; %d smaller ones, median error %.1f%%)"
          % (interior, 100 * worst, len(small_errs),
             100 * report["small_median_volume_error"]),
          interior > 0 and not bad_volume)

if a.report:
    json.dump(report, open(a.report, "w"), indent=1)
print("seg_check: %s" % ("failed" if failed else "passed"))
sys.exit(1 if failed else 0)
