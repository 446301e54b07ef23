"""Helpers of acceptance/align_test.sh (numpy + Pillow, no cnx code).

    align_sections.py export LAYER DIR
        every section of a uint8 image layer as DIR/zNNNNN.png (pixel value
        0 kept: "no data"), and DIR/origin holding "X,Y N" (the layer's
        voxel_offset in x, y and its section count), for align_tool.
    align_sections.py same LAYER TRANSFORMS
        the alignment layer's align_transforms/<scale>/<slab> documents
        against one cnx.align/1 document (align_tool's transforms.json):
        every section's status, node displacements, gain and offset equal,
        bit for bit (the documents carry 17 significant digits); exit 1 if
        not.
"""
import glob
import json
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "py"))
from layer_ref import read_layer  # noqa: E402


def export(layer, out):
    info, vol = read_layer(layer)
    os.makedirs(out, exist_ok=True)
    for z in range(vol.shape[0]):
        Image.fromarray(np.ascontiguousarray(vol[z])).save(
            os.path.join(out, "z%05d.png" % z))
    off = info["scales"][0].get("voxel_offset", [0, 0, 0])
    with open(os.path.join(out, "origin"), "w") as f:
        f.write("%d,%d %d\n" % (off[0], off[1], vol.shape[0]))


def same(layer, transforms):
    ref = json.load(open(transforms))
    got, grids = {}, []
    for f in sorted(glob.glob(os.path.join(layer, "align_transforms", "*", "*"))):
        doc = json.load(open(f))
        grids.append(doc["grid"])
        for s in doc["sections"]:
            got[s["z"]] = s
    keys = ("status", "dx", "dy", "gain", "offset")
    bad = [s["z"] for s in ref["sections"]
           if s["z"] not in got or any(got[s["z"]][k] != s[k] for k in keys)]
    ok = (not bad and len(got) == len(ref["sections"]) and
          all(g == ref["grid"] for g in grids))
    print("  %d sections compared; %s" % (len(ref["sections"]),
                                         "all identical" if ok else
                                         "differ: %s" % bad[:10]))
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "export":
        export(sys.argv[2], sys.argv[3])
        sys.exit(0)
    if len(sys.argv) == 4 and sys.argv[1] == "same":
        sys.exit(same(sys.argv[2], sys.argv[3]))
    sys.exit(__doc__)
