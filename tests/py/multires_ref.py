#!/usr/bin/env python3
"""Independent reader of Neuroglancer multi-resolution meshes
(neuroglancer_multilod_draco, unsharded or sharded), written from the
precomputed format description, with Draco's own draco_decoder (Debian's
package `draco`) for the fragments and tests/py/sharded_ref.py (the
sharded format's reader, from its spec) for the shards.

usage: multires_ref.py LAYER_DIR [--multires mesh_multires] [--legacy mesh]
                       [--report out.json] [--fragments out.json]

Unsharded: a manifest <id>.index and a data file <id> per segment.
Sharded (info has "sharding"): the shard files <hex>.shard only; each
segment's manifest is the chunk whose id is the segment id, and its
fragment data lie immediately before the manifest in the same shard (start:
the manifest's offset less the sum of the fragment sizes), stored raw; that
span must lie after the shard index and overlap no other segment's
manifest or data. --fragments writes, per segment, the sha256 of its
manifest and of each fragment in manifest order (the same for the two forms
of the same meshes).

Checks, for every segment with a manifest <id>.index:
- info: @type neuroglancer_multilod_draco, vertex_quantization_bits 10 or
  16, a 12-number transform, lod_scale_multiplier > 0;
- the manifest parses to its exact length, fragment positions in z-curve
  order within each level, the fragment sizes sum to the data file's size;
- every fragment decodes, has triangles, and every quantized coordinate is
  in [0, 2^bits) (the fragment lies within its cell); for lod > 0 no
  triangle crosses the cell's 2x2x2 partition (Neuroglancer's partition
  point 2^(bits-1)); every fragment of a level below the top has its
  parent cell on the next level;
- level 0, vertices welded at equal quantized global positions, is closed
  and oriented (each edge in exactly two triangles, once each way);
- level 0 is the legacy mesh: as many triangles, every vertex of each
  within one quantization step of a vertex of the other, the same bounding
  box within one step;
- triangles do not increase from a level to the next, and their total
  decreases.
Prints one line per failure and a summary; exits 1 on any failure.
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
from scipy.spatial import cKDTree

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sharded_ref  # noqa: E402

args = sys.argv[1:]
if not args:
    sys.exit(__doc__)
layer = args[0]
opt = {"--multires": "mesh_multires", "--legacy": "mesh", "--report": None,
       "--fragments": None}
i = 1
while i < len(args):
    if args[i] not in opt or i + 1 >= len(args):
        sys.exit("multires_ref.py: unknown or incomplete option %s" % args[i])
    opt[args[i]] = args[i + 1]
    i += 2
mdir = os.path.join(layer, opt["--multires"])
ldir = os.path.join(layer, opt["--legacy"])
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def morton(p):
    m = 0
    for bit in range(21):
        for a in range(3):
            m |= ((int(p[a]) >> bit) & 1) << (3 * bit + a)
    return m


def parse_index(b, name):
    at = 0

    def take(fmt, n):
        nonlocal at
        size = struct.calcsize("<%d%s" % (n, fmt))
        if at + size > len(b):
            raise ValueError("%s: truncated at byte %d" % (name, at))
        v = struct.unpack_from("<%d%s" % (n, fmt), b, at)
        at += size
        return v

    m = {}
    m["chunk_shape"] = np.array(take("f", 3), dtype=np.float64)
    m["grid_origin"] = np.array(take("f", 3), dtype=np.float64)
    (n,) = take("I", 1)
    m["num_lods"] = n
    m["lod_scales"] = take("f", n)
    m["vertex_offsets"] = np.array(take("f", 3 * n), dtype=np.float64).reshape(n, 3)
    m["nfrag"] = take("I", n)
    m["pos"], m["sizes"] = [], []
    for lod in range(n):
        k = m["nfrag"][lod]
        m["pos"].append(np.array(take("I", 3 * k), dtype=np.int64).reshape(3, k).T)
        m["sizes"].append(take("I", k))
    if at != len(b):
        raise ValueError("%s: %d bytes after the manifest" % (name, len(b) - at))
    return m


def draco_decode(blob, tmp):
    src = os.path.join(tmp, "f.drc")
    dst = os.path.join(tmp, "f.obj")
    with open(src, "wb") as f:
        f.write(blob)
    r = subprocess.run(["draco_decoder", "-i", src, "-o", dst],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise ValueError("draco_decoder: " + (r.stdout + r.stderr).strip()[-200:])
    v, t = [], []
    for line in open(dst):
        if line.startswith("v "):
            v.append([float(x) for x in line.split()[1:4]])
        elif line.startswith("f "):
            t.append([int(x.split("/")[0]) - 1 for x in line.split()[1:4]])
    return np.array(v, dtype=np.float64).reshape(-1, 3), np.array(t, dtype=np.int64).reshape(-1, 3)


def load_legacy(sid):
    man = json.load(open(os.path.join(ldir, "%d:0" % sid)))
    vs, ts, off = [], [], 0
    for frag in man["fragments"]:
        b = open(os.path.join(ldir, frag), "rb").read()
        (nv,) = struct.unpack_from("<I", b, 0)
        v = np.frombuffer(b, "<f4", 3 * nv, 4).reshape(-1, 3).astype(np.float64)
        t = np.frombuffer(b, "<u4", offset=4 + 12 * nv).reshape(-1, 3).astype(np.int64)
        vs.append(v)
        ts.append(t + off)
        off += nv
    return np.concatenate(vs), np.concatenate(ts)


def closed_oriented(t):
    e = np.concatenate([t[:, [0, 1]], t[:, [1, 2]], t[:, [2, 0]]])
    d = {}
    for a, b in map(tuple, e):
        d[(a, b)] = d.get((a, b), 0) + 1
    for (a, b), c in d.items():
        if c != 1 or d.get((b, a), 0) != 1 or a == b:
            return False
    return True


info = json.load(open(os.path.join(mdir, "info")))
if info.get("@type") != "neuroglancer_multilod_draco":
    fail("info: @type %r" % info.get("@type"))
bits = info.get("vertex_quantization_bits")
if bits not in (10, 16):
    fail("info: vertex_quantization_bits %r" % bits)
    bits = 16
top = 2 ** bits - 1
part = top // 2 + 1
M = np.array(info.get("transform", []), dtype=np.float64)
if M.shape != (12,):
    fail("info: transform is not 12 numbers")
    M = np.array([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0], dtype=np.float64)
M = M.reshape(3, 4)
if not info.get("lod_scale_multiplier", 0) > 0:
    fail("info: lod_scale_multiplier must be > 0")
legacy_info = json.load(open(os.path.join(ldir, "info")))
if legacy_info.get("@type") != "neuroglancer_legacy_mesh":
    fail("legacy info: @type %r" % legacy_info.get("@type"))


def read_sharded(spec):
    """{segment id: (manifest bytes, fragment data bytes)} from the shards."""
    out, base = {}, 16 << spec["minishard_bits"]
    for name in sorted(os.listdir(mdir)):
        if name == "info":
            continue
        if not name.endswith(".shard"):
            fail("sharded: %s: not a shard file" % name)
            continue
        path = os.path.join(mdir, name)
        blob = open(path, "rb").read()
        spans = []
        for m in range(1 << spec["minishard_bits"]):
            entries = sharded_ref.read_minishard(spec, path, blob, m)
            for sid, pos, size in entries:
                where = sharded_ref.locate(spec, sid)
                if where != (int(name[:-6], 16), m) or \
                        sharded_ref.shard_name(spec, where[0]) != name:
                    fail("sharded: %s: segment %d in the wrong shard or "
                         "minishard" % (name, sid))
                man = sharded_ref.decode(spec["data_encoding"],
                                         blob[pos:pos + size],
                                         "%s segment %d" % (name, sid))
                what = "%s segment %d" % (name, sid)
                try:
                    total = sum(sum(x) for x in parse_index(man, what)["sizes"])
                except ValueError as e:
                    fail(str(e))
                    continue
                if pos - total < base:
                    fail("sharded: %s: segment %d's fragment data would start "
                         "before the end of the shard index" % (name, sid))
                    continue
                if sid in out:
                    fail("sharded: segment %d stored twice" % sid)
                out[sid] = (man, blob[pos - total:pos])
                spans.append((pos - total, pos + size, sid))
        spans.sort()
        for a, b in zip(spans, spans[1:]):
            if a[1] > b[0]:
                fail("sharded: %s: segments %d and %d overlap"
                     % (name, a[2], b[2]))
    return out


sharded = None
if "sharding" in info:
    try:
        sharded = read_sharded(info["sharding"])
    except (sharded_ref.ShardError, OSError, ValueError, KeyError,
            struct.error) as e:
        fail("sharded: %s" % e)
        sharded = {}
    ids = sorted(sharded)
else:
    ids = sorted(int(f[:-6]) for f in os.listdir(mdir) if f.endswith(".index"))
fragments = {}
legacy_ids = sorted(int(f[:-2]) for f in os.listdir(ldir)
                    if f.endswith(":0") and f[:-2].isdigit())
if ids != legacy_ids:
    fail("segments with a multi-resolution mesh differ from the legacy "
         "ones (%d vs %d)" % (len(ids), len(legacy_ids)))
per_lod = {}
legacy_tris = legacy_bytes = multires_bytes = 0
worst_step = 0.0
with tempfile.TemporaryDirectory() as tmp:
    for sid in ids:
        name = "%d.index" % sid
        if sharded is not None:
            ib, data = sharded[sid]
        else:
            ib = open(os.path.join(mdir, name), "rb").read()
            data = open(os.path.join(mdir, str(sid)), "rb").read()
        fragments[str(sid)] = [hashlib.sha256(ib).hexdigest()]
        multires_bytes += len(ib) + len(data)
        try:
            m = parse_index(ib, name)
        except ValueError as e:
            fail(str(e))
            continue
        total = sum(sum(s) for s in m["sizes"])
        if total != len(data):
            fail("%d: fragment sizes sum to %d, the data file has %d bytes"
                 % (sid, total, len(data)))
            continue
        at, tris_per_lod, level0 = 0, [], None
        cells = [set(map(tuple, m["pos"][l].tolist())) for l in range(m["num_lods"])]
        for lod in range(m["num_lods"]):
            codes = [morton(p) for p in m["pos"][lod]]
            if codes != sorted(codes) or len(set(codes)) != len(codes):
                fail("%d: lod %d: positions not in z-curve order" % (sid, lod))
            size = m["chunk_shape"] * 2 ** lod
            ntri, gv, gt = 0, [], []
            for k, (p, n) in enumerate(zip(m["pos"][lod], m["sizes"][lod])):
                blob = data[at:at + n]
                at += n
                fragments[str(sid)].append(hashlib.sha256(blob).hexdigest())
                if lod + 1 < m["num_lods"] and tuple((p >> 1).tolist()) not in cells[lod + 1]:
                    fail("%d: lod %d cell %s has no parent" % (sid, lod, p.tolist()))
                try:
                    q, t = draco_decode(blob, tmp)
                except ValueError as e:
                    fail("%d: lod %d fragment %d: %s" % (sid, lod, k, e))
                    continue
                if len(t) == 0:
                    fail("%d: lod %d fragment %d: no triangles" % (sid, lod, k))
                if np.any(q != np.round(q)) or q.min() < 0 or q.max() > top:
                    fail("%d: lod %d fragment %d: a vertex outside its cell "
                         "(quantized %g..%g)" % (sid, lod, k, q.min(), q.max()))
                if lod > 0:
                    tv = q[t]  # triangles x corners x axes
                    lo = (tv <= part).all(axis=1)
                    hi = (tv >= part).all(axis=1)
                    if not (lo | hi).all():
                        fail("%d: lod %d fragment %d: a triangle crosses the "
                             "2x2x2 partition" % (sid, lod, k))
                ntri += len(t)
                if lod == 0:
                    gv.append((p * top + q).astype(np.int64))
                    gt.append(t + sum(len(x) for x in gv[:-1]))
            tris_per_lod.append(ntri)
            e = per_lod.setdefault(lod, [0, 0, 0])
            e[0] += len(m["pos"][lod])
            e[1] += ntri
            e[2] += sum(m["sizes"][lod])
            if lod == 0 and gv:
                level0 = (np.concatenate(gv), np.concatenate(gt))
        for a in range(1, len(tris_per_lod)):
            if tris_per_lod[a] > tris_per_lod[a - 1]:
                fail("%d: lod %d has more triangles than lod %d (%s)"
                     % (sid, a, a - 1, tris_per_lod))
        if level0 is None:
            fail("%d: no level 0" % sid)
            continue
        g, t = level0
        uniq, inv = np.unique(g, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        if not closed_oriented(inv[t]):
            fail("%d: level 0 is not closed and oriented after welding" % sid)
        # nm, then the info's transform
        step = m["chunk_shape"] / top
        nm = m["grid_origin"] + m["vertex_offsets"][0] + uniq * step
        nm = nm @ M[:, :3].T + M[:, 3]
        lv, lt = load_legacy(sid)
        legacy_tris += len(lt)
        legacy_bytes += sum(os.path.getsize(os.path.join(ldir, f))
                            for f in json.load(open(os.path.join(ldir, "%d:0" % sid)))["fragments"])
        used = lv[np.unique(lt)]
        if len(t) != len(lt):
            fail("%d: level 0 has %d triangles, the legacy mesh %d"
                 % (sid, len(t), len(lt)))
        tol = float(step.max()) * 1.01 + 1e-3
        d1, _ = cKDTree(used).query(nm)
        d2, _ = cKDTree(nm).query(used)
        worst = max(d1.max(), d2.max())
        worst_step = max(worst_step, worst / float(step.max()))
        if worst > tol:
            fail("%d: level 0 and the legacy mesh differ by %.4f nm "
                 "(one step: %.4f nm)" % (sid, worst, step.max()))
        if np.abs(nm.min(0) - used.min(0)).max() > tol or \
           np.abs(nm.max(0) - used.max(0)).max() > tol:
            fail("%d: level 0's bounding box is not the legacy mesh's" % sid)

lods = sorted(per_lod)
for a in range(1, len(lods)):
    if per_lod[a][1] >= per_lod[a - 1][1]:
        fail("lod %d: %d triangles in all, not fewer than lod %d's %d"
             % (a, per_lod[a][1], a - 1, per_lod[a - 1][1]))
report = {
    "segments": len(ids),
    "sharded": sharded is not None,
    "legacy": {"bytes": legacy_bytes, "triangles": legacy_tris},
    "multires": {"bytes": multires_bytes,
                 "lods": [{"lod": l, "fragments": per_lod[l][0],
                           "triangles": per_lod[l][1],
                           "bytes": per_lod[l][2]} for l in lods]},
    "level0_vs_legacy_worst_in_steps": round(worst_step, 4),
    "failures": len(failures),
}
if opt["--fragments"]:
    with open(opt["--fragments"], "w") as f:
        json.dump(fragments, f, indent=0, sort_keys=True)
if opt["--report"]:
    with open(opt["--report"], "w") as f:
        json.dump(report, f, indent=1)
print("multires_ref: %d segments, %d levels; legacy %d bytes, %d triangles; "
      "multires %d bytes, triangles per level %s; level 0 within %.3f steps "
      "of the legacy mesh; %d failures"
      % (len(ids), len(lods), legacy_bytes, legacy_tris, multires_bytes,
         [per_lod[l][1] for l in lods], worst_step, len(failures)))
sys.exit(1 if failures else 0)
