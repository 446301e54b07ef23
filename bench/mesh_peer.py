#!/usr/bin/env python3
"""Peer of bench_mesh: every label of a volume meshed with scikit-image.

For each nonzero label: its bounding box grown by one voxel on each side
(clipped to the volume), the binary mask (crop == label) padded by one voxel
of zeros (np.pad; so objects touching the volume's faces close, as cnx's
do), then skimage.measure.marching_cubes(mask, 0.5) (Lewiner; its
ambiguity resolution differs from cnx's, so triangle counts differ).
Bounding boxes come from np.unique(return_inverse) + scipy find_objects,
timed apart ("bbox") from the meshing ("mesh"). Median of RUNS.

usage: mesh_peer.py NPY [--runs N] [--check L1,L2,...]
Prints "key value" lines: labels, mesh_s, bbox_s, bbox_voxels, tris (all
labels), and for each --check label "check LABEL TRIS VOLUME" (VOLUME: the
enclosed volume in voxels, |sum of signed tetrahedra|).
"""

import argparse
import sys
import time

import numpy as np


def bboxes(vol):
    from scipy.ndimage import find_objects
    ids, inv = np.unique(vol, return_inverse=True)
    inv = inv.reshape(vol.shape).astype(np.int32) + 1
    slices = find_objects(inv)
    return [(int(ids[i]), s) for i, s in enumerate(slices)
            if s is not None and ids[i] != 0]


def grow(s, shape):
    return tuple(slice(max(a.start - 1, 0), min(a.stop + 1, n))
                 for a, n in zip(s, shape))


def mesh_all(vol, boxes):
    from skimage.measure import marching_cubes
    out = {}
    for label, s in boxes:
        mask = np.pad(vol[grow(s, vol.shape)] == label, 1).astype(np.float32)
        out[label] = marching_cubes(mask, 0.5)[:2]
    return out


def enclosed(verts, faces):
    v = verts.astype(np.float64)
    a, b, c = v[faces[:, 0]], v[faces[:, 1]], v[faces[:, 2]]
    return abs(np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6.0)


def median_time(fn, runs):
    times, result = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], result


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("npy")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--check", default="")
    a = ap.parse_args(argv[1:])
    vol = np.load(a.npy)
    tb, boxes = median_time(lambda: bboxes(vol), a.runs)
    tm, meshes = median_time(lambda: mesh_all(vol, boxes), a.runs)
    bvox = sum(int(np.prod([min(x.stop + 1, n) - max(x.start - 1, 0)
                            for x, n in zip(s, vol.shape)]))
               for _, s in boxes)
    print("labels %d" % len(boxes))
    print("mesh_s %.6f" % tm)
    print("bbox_s %.6f" % tb)
    print("bbox_voxels %d" % bvox)
    print("tris %d" % sum(len(f) for _, f in meshes.values()))
    for tok in filter(None, a.check.split(",")):
        label = int(tok)
        if label in meshes:
            v, f = meshes[label]
            print("check %d %d %.3f" % (label, len(f), enclosed(v, f)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
