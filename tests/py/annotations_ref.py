#!/usr/bin/env python3
"""Independent reader of a Neuroglancer precomputed annotation collection
(neuroglancer_annotations_v1, unsharded or sharded), written from the spec
(neuroglancer's src/datasource/precomputed/annotations.md), numpy only; no
cnx code. A sharded index (one with a "sharding" member) is read through
sharded_ref.py's reader (neuroglancer_uint64_sharded_v1, written from the
spec): chunk ids are annotation ids (by_id), segment ids (rel_*) and the
compressed Morton code of a cell over grid_shape (spatial); every shard
file is walked (nothing stored but the index's objects).

    annotations_ref.py COLLECTION_DIR TABLES [--resolution X,Y,Z]
                       [--sharded yes|no]

COLLECTION_DIR holds the info; TABLES is a synapse table (JSON lines) or a
directory whose files (recursively) are all tables. Reads the info, every
by_id entry, every rel_<relationship> index and every spatial cell, decodes
them with the spec's layout (point float32le; properties grouped 4-byte,
2-byte, 1-byte types in info order; zero padding to 4 bytes; per
relationship a uint32 count and uint64 ids; lists as a uint64 count, the
records, then the uint64 ids), and checks that they give back the tables
exactly:

- by_id holds every synapse of the tables and nothing else; from its
  entry come the id, the site, pre_site and post_site (a point at voxel
  v + 0.5), size, score (float32, the table's millionths) and the
  pre/post ids (the relationships; an empty list for id 0);
- every synapse is in rel_pre_synaptic_cell/<pre_id> and
  rel_post_synaptic_cell/<post_id> (non-zero ids), each index holds
  exactly the synapses with that id, and there is no other index file;
- each synapse lies in exactly one cell of level 0, inside that cell's
  interval, and the records in every list equal those of by_id; a cell
  with no synapse is not stored (a missing one reads as none), and no
  stored list is empty (Neuroglancer 2.37.5 refuses a list of 8 bytes,
  "Expected at least 8 bytes"); nothing is stored outside the grid;
- with --sharded yes (no), every index is sharded (none is).

Exit 0 and one summary line when all holds; 1 with one line naming the
first difference; 2 for unreadable input.
"""
import json
import os
import struct
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sharded_ref  # noqa: E402

TYPES = {"float32": ("<f4", 4), "uint32": ("<u4", 4), "int32": ("<i4", 4),
         "uint16": ("<u2", 2), "int16": ("<i2", 2), "uint8": ("u1", 1),
         "int8": ("i1", 1), "rgb": ("3u1", 1), "rgba": ("4u1", 1)}
NVEC = {"POINT": 1, "LINE": 2, "AXIS_ALIGNED_BOUNDING_BOX": 2, "ELLIPSOID": 2}
KEYS = {"id", "post_id", "post_site", "pre_id", "pre_site", "score", "site",
        "site_nm", "size"}


class Bad(Exception):
    pass


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise Bad("%s: %s" % (path, e.strerror))


class Layout:
    """Byte layout of one annotation (without relationships), from info."""

    def __init__(self, info):
        self.rank = len(info["dimensions"])
        self.nvec = NVEC[info["annotation_type"]]
        off = 4 * self.rank * self.nvec
        self.props = {}
        # 4-byte types first, then 2-byte, then 1-byte, each in info order
        for width in (4, 2, 1):
            for p in info["properties"]:
                dt, w = TYPES[p["type"]]
                if w != width:
                    continue
                n = 3 if p["type"] == "rgb" else 4 if p["type"] == "rgba" else 1
                self.props[p["id"]] = (off, np.dtype(dt.lstrip("34")), n)
                off += np.dtype(dt.lstrip("34")).itemsize * n
        self.size = (off + 3) // 4 * 4
        self.nrel = len(info["relationships"])

    def decode(self, buf, at):
        """(geometry vectors, {property: value}) of the record at `at`."""
        geo = np.frombuffer(buf, "<f4", self.rank * self.nvec, at)
        props = {}
        for name, (off, dt, n) in self.props.items():
            v = np.frombuffer(buf, dt, n, at + off)
            props[name] = v[0] if n == 1 else tuple(v)
        if any(buf[at + self.end_of_props():at + self.size]):
            raise Bad("padding bytes are not zero")
        return geo.reshape(self.nvec, self.rank), props

    def end_of_props(self):
        return max([off + dt.itemsize * n for off, dt, n in self.props.values()]
                   + [4 * self.rank * self.nvec])


class Index:
    """One index of the collection: its objects by chunk id (an integer,
    or for an unsharded spatial index the "i_j_k" name), read from files
    or, when sharded, from shard files through sharded_ref."""

    def __init__(self, coll, entry):
        self.key = entry["key"]
        self.dir = os.path.join(coll, self.key)
        self.spec = entry.get("sharding")
        if self.spec is not None:
            for k in ("preshift_bits", "minishard_bits", "shard_bits", "hash",
                      "minishard_index_encoding", "data_encoding"):
                if k not in self.spec:
                    raise Bad("info: %s: sharding has no %s" % (self.key, k))
            if self.spec.get("@type") != "neuroglancer_uint64_sharded_v1":
                raise Bad("info: %s: sharding @type %r" % (self.key, self.spec.get("@type")))

    def ids(self):
        """Every stored chunk id (names for an unsharded index)."""
        if not os.path.isdir(self.dir):
            return set()
        if self.spec is None:
            return set(os.listdir(self.dir))
        try:
            return sharded_ref.walk(self.spec, self.dir)
        except (sharded_ref.ShardError, OSError, EOFError, zlib.error, struct.error) as e:
            raise Bad("%s: %s" % (self.key, e))

    def get(self, cid):
        """The bytes of chunk cid, or None where it is not stored."""
        if self.spec is None:
            path = os.path.join(self.dir, str(cid))
            return read(path) if os.path.exists(path) else None
        try:
            return sharded_ref.read_chunk(self.spec, self.dir, cid)
        except (sharded_ref.ShardError, OSError, EOFError, zlib.error, struct.error) as e:
            raise Bad("%s: %s" % (self.key, e))


def decode_list(buf, lay, what):
    if len(buf) < 8:
        raise Bad("%s: %d bytes, no count" % (what, len(buf)))
    count = int(np.frombuffer(buf, "<u8", 1, 0)[0])
    if count == 0:
        raise Bad("%s: an empty list is stored (Neuroglancer refuses it: "
                  "\"Expected at least 8 bytes\"); a missing one reads as none" % what)
    want = 8 + count * (lay.size + 8)
    if len(buf) != want:
        raise Bad("%s: %d bytes for %d annotations, want %d" % (what, len(buf), count, want))
    recs = [lay.decode(buf, 8 + i * lay.size) for i in range(count)]
    ids = np.frombuffer(buf, "<u8", count, 8 + count * lay.size)
    return [int(i) for i in ids], recs


def decode_by_id(buf, lay, what):
    if len(buf) < lay.size:
        raise Bad("%s: %d bytes, shorter than one annotation" % (what, len(buf)))
    rec = lay.decode(buf, 0)
    at, rels = lay.size, []
    for _ in range(lay.nrel):
        if at + 4 > len(buf):
            raise Bad("%s: truncated relationship" % what)
        n = int(np.frombuffer(buf, "<u4", 1, at)[0])
        at += 4
        if at + 8 * n > len(buf):
            raise Bad("%s: truncated relationship ids" % what)
        rels.append([int(v) for v in np.frombuffer(buf, "<u8", n, at)])
        at += 8 * n
    if at != len(buf):
        raise Bad("%s: %d trailing bytes" % (what, len(buf) - at))
    return rec, rels


def load_tables(path):
    files = []
    if os.path.isdir(path):
        for d, _, names in os.walk(path):
            files += [os.path.join(d, n) for n in names]
    else:
        files = [path]
    table = {}
    for f in sorted(files):
        for k, line in enumerate(read(f).decode().splitlines(), 1):
            s = json.loads(line)
            if set(s) != KEYS:
                raise Bad("%s: line %d: keys %s" % (f, k, sorted(s)))
            if s["id"] in table:
                raise Bad("%s: line %d: id %d twice" % (f, k, s["id"]))
            table[s["id"]] = s
    return table


def point(v, what):
    """A point at a voxel's centre -> the voxel."""
    w = np.asarray(v, np.float64) - 0.5
    if not np.all(w == np.round(w)):
        raise Bad("%s: %s is not at a voxel centre" % (what, list(v)))
    return [int(x) for x in w]


def check(coll, tables, resolution=None, sharded=None):
    info = json.loads(read(os.path.join(coll, "info")))
    if info.get("@type") != "neuroglancer_annotations_v1":
        raise Bad("info: @type %r" % info.get("@type"))
    if info["annotation_type"] != "POINT":
        raise Bad("info: annotation_type %r, want POINT" % info["annotation_type"])
    if list(info["dimensions"]) != ["x", "y", "z"]:
        raise Bad("info: dimensions %s" % list(info["dimensions"]))
    if resolution is not None:
        got = [info["dimensions"][a] for a in "xyz"]
        if got != [[r, "nm"] for r in resolution]:
            raise Bad("info: dimensions %s, want %s nm" % (got, resolution))
    for p in info["properties"]:
        if p["type"] not in TYPES:
            raise Bad("info: property %s: type %s" % (p["id"], p["type"]))
    for key in ("score", "size", "pre_x", "pre_y", "pre_z", "post_x", "post_y", "post_z"):
        if key not in [p["id"] for p in info["properties"]]:
            raise Bad("info: no property %s" % key)
    rels = [r["id"] for r in info["relationships"]]
    if rels != ["pre_synaptic_cell", "post_synaptic_cell"]:
        raise Bad("info: relationships %s" % rels)
    for r in info["relationships"] + [info["by_id"]] + info["spatial"]:
        if sharded is not None and ("sharding" in r) != sharded:
            raise Bad("info: %s is %s, want %s" % (
                r["key"], "sharded" if "sharding" in r else "unsharded",
                "sharded" if sharded else "unsharded"))
    lay = Layout(info)
    lo = np.array(info["lower_bound"], np.float64)
    hi = np.array(info["upper_bound"], np.float64)

    # by_id: exactly the table's ids
    by_id = Index(coll, info["by_id"])
    stored = sorted(int(n) for n in by_id.ids())
    if stored != sorted(tables):
        extra = sorted(set(stored) - set(tables))[:3]
        missing = sorted(set(tables) - set(stored))[:3]
        raise Bad("by_id: ids differ from the tables (extra %s, missing %s)" % (extra, missing))
    records = {}
    for sid, t in tables.items():
        what = "by_id/%d" % sid
        (geo, props), (pre, post) = decode_by_id(by_id.get(sid), lay, what)
        records[sid] = (geo.tobytes(), {k: np.asarray(v).tobytes() for k, v in props.items()})
        got = {
            "id": sid,
            "site": point(geo[0], what + " point"),
            "pre_site": point([props["pre_x"], props["pre_y"], props["pre_z"]], what + " pre"),
            "post_site": point([props["post_x"], props["post_y"], props["post_z"]], what + " post"),
            "size": int(props["size"]),
            "score_micro": int(round(float(props["score"]) * 1e6)),
            "pre_id": pre[0] if pre else 0,
            "post_id": post[0] if post else 0,
        }
        want = {k: t[k] for k in ("id", "site", "pre_site", "post_site", "size", "pre_id", "post_id")}
        want["score_micro"] = int(round(t["score"] * 1e6))
        if abs(t["score"] * 1e6 - want["score_micro"]) > 1e-6:
            raise Bad("table: synapse %d: score %r is not in millionths" % (sid, t["score"]))
        if len(pre) > 1 or len(post) > 1 or (pre == [0]) or (post == [0]):
            raise Bad("%s: relationships %s %s" % (what, pre, post))
        if got != want:
            diff = {k: (got[k], want[k]) for k in got if got[k] != want[k]}
            raise Bad("%s: differs from the table: %s" % (what, diff))
        if np.any(geo[0] < lo) or np.any(geo[0] >= hi):
            raise Bad("%s: point %s outside the bounds" % (what, list(geo[0])))

    def same_record(sid, rec, what):
        geo, props = rec
        if (geo.tobytes(), {k: np.asarray(v).tobytes() for k, v in props.items()}) != records[sid]:
            raise Bad("%s: annotation %d differs from by_id" % (what, sid))

    # relationship indexes: each id's file holds exactly its synapses
    nrel = {}
    for r, field in zip(info["relationships"], ("pre_id", "post_id")):
        index = Index(coll, r)
        want = {}
        for sid, t in tables.items():
            if t[field] != 0:
                want.setdefault(t[field], set()).add(sid)
        files = sorted(int(n) for n in index.ids())
        if files != sorted(want):
            raise Bad("%s: segment files %s, want %s" % (r["key"], files[:5], sorted(want)[:5]))
        for seg, sids in want.items():
            what = "%s/%d" % (r["key"], seg)
            ids, recs = decode_list(index.get(seg), lay, what)
            if len(ids) != len(set(ids)) or set(ids) != sids:
                raise Bad("%s: ids %s, want %s" % (what, sorted(ids), sorted(sids)))
            for sid, rec in zip(ids, recs):
                same_record(sid, rec, what)
        nrel[r["id"]] = len(want)

    # spatial: the stored cells of every level; level 0 holds every
    # synapse once; a missing cell reads as none
    seen = {}
    cells = 0
    for level, sp in enumerate(info["spatial"]):
        shape = [int(g) for g in sp["grid_shape"]]
        size = np.array(sp["chunk_size"], np.float64)
        if not np.allclose(size * shape, hi - lo):
            raise Bad("spatial %s: grid_shape x chunk_size != upper - lower" % sp["key"])
        index = Index(coll, sp)
        stored = index.ids()
        count_max = 0
        for k in range(shape[2]):
            for j in range(shape[1]):
                for i in range(shape[0]):
                    what = "%s/%d_%d_%d" % (sp["key"], i, j, k)
                    cid = ("%d_%d_%d" % (i, j, k) if index.spec is None
                           else sharded_ref.morton((i, j, k), shape))
                    stored.discard(cid)
                    buf = index.get(cid)
                    if buf is None:
                        continue
                    ids, recs = decode_list(buf, lay, what)
                    cells += 1
                    count_max = max(count_max, len(ids))
                    c0 = lo + size * [i, j, k]
                    for sid, rec in zip(ids, recs):
                        if sid not in tables:
                            raise Bad("%s: annotation %d is not in the tables" % (what, sid))
                        same_record(sid, rec, what)
                        p = rec[0][0]
                        if np.any(p < c0) or np.any(p > c0 + size):
                            raise Bad("%s: annotation %d at %s outside the cell" % (what, sid, list(p)))
                        if sid in seen:
                            raise Bad("%s: annotation %d also in %s" % (what, sid, seen[sid]))
                        seen[sid] = what
        if stored:
            raise Bad("spatial %s: objects outside the grid: %s" % (sp["key"], sorted(stored)[:3]))
        if count_max > sp["limit"]:
            raise Bad("spatial %s: a cell holds %d > limit %d" % (sp["key"], count_max, sp["limit"]))
    if set(seen) != set(tables):
        raise Bad("spatial: %d synapses not in any cell" % len(set(tables) - set(seen)))
    layout = "sharded" if "sharding" in info["by_id"] else "unsharded"
    return "annotations_ref: %d synapses: by_id, %d pre and %d post segment indexes, %d spatial cells (%s) agree with the tables" % (
        len(tables), nrel["pre_synaptic_cell"], nrel["post_synaptic_cell"], cells, layout)


def main(argv):
    args = argv[1:]
    resolution = None
    if "--resolution" in args:
        i = args.index("--resolution")
        resolution = [float(v) if "." in v else int(v) for v in args[i + 1].split(",")]
        del args[i:i + 2]
    sharded = None
    if "--sharded" in args:
        i = args.index("--sharded")
        sharded = {"yes": True, "no": False}[args[i + 1]]
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        tables = load_tables(args[1])
    except (Bad, ValueError) as e:
        print("annotations_ref: tables: %s" % e, file=sys.stderr)
        return 2
    try:
        print(check(args[0], tables, resolution, sharded))
    except (Bad, KeyError, ValueError, TypeError) as e:
        print("annotations_ref: FAILED: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
