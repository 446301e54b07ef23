#!/usr/bin/env python3
"""sharded_ref.py - an independent writer and reader of the Neuroglancer
precomputed sharded format (neuroglancer_uint64_sharded_v1), written from
the specification (neuroglancer src/datasource/precomputed/sharded.md and
volume.md#compressed-morton-code), for checking cnx's reader and encoder.

  sharded_ref.py selftest         murmurhash3_x86_128 against SMHasher's
                                  verification value (and mmh3 if installed)
  sharded_ref.py write DIR [SEED] sharded sets, corrupt shards and Morton
                                  codes for sharded_tool to read back
  sharded_ref.py read DIR         read back shards cnx wrote: every chunk
                                  of DIR/chunks.txt equal to expect/<id>,
                                  every id of missing.txt absent, and a
                                  walk of every shard file: nothing else
                                  stored, no empty shard file, chunks in
                                  their own shard and minishard, ids
                                  increasing, no two chunks overlapping,
                                  gzip members with mtime 0

Layout of DIR:
  sets/<name>/info                an info whose scale "s" has the sharding
  sets/<name>/s/<shard>.shard     the shards
  sets/<name>/chunks.txt          one stored chunk id a line
  sets/<name>/expect/<id>         each chunk's bytes
  sets/<name>/missing.txt         ids that are stored nowhere
  corrupt/<name>/{info,s/...}     one damaged shard each
  corrupt/<name>/case.txt         "<chunk id> <error name> <message part>"
  morton.txt                      "gx gy gz x y z code" lines
  volumes/<name>/info             a uint8 raw volume whose one scale "s"
                                  is sharded (voxel_offset not 0, sizes
                                  not multiples of the chunk)
  volumes/<name>/s/<shard>.shard  its chunks, keyed by compressed Morton
                                  code; some left out (they read as fill)
  volumes/<name>/volume.bin       the whole array, x fastest, then y, z,
                                  channel; zeros where a chunk is left out
  volumes/<name>/boxes.txt        "x0 y0 z0 x1 y1 z1 touches_missing"
                                  boxes to read (absolute coordinates)
Standard library only (struct, zlib, gzip, random): no numpy needed.
"""
import gzip
import json
import os
import random
import struct
import sys
import zlib

MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF


def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & MASK32


def _fmix(h):
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & MASK32
    h ^= h >> 16
    return h


def murmur3_x86_128(data, seed=0):
    """MurmurHash3_x86_128 as four 32-bit words h1..h4."""
    c1, c2, c3, c4 = 0x239B961B, 0xAB0E9789, 0x38B34AE5, 0xA1E38B93
    h1 = h2 = h3 = h4 = seed & MASK32
    n = len(data)
    nblocks = n // 16
    for b in range(nblocks):
        k1, k2, k3, k4 = struct.unpack_from("<4I", data, 16 * b)
        k1 = (_rotl((k1 * c1) & MASK32, 15) * c2) & MASK32
        h1 ^= k1
        h1 = _rotl(h1, 19)
        h1 = (h1 + h2) & MASK32
        h1 = (h1 * 5 + 0x561CCD1B) & MASK32
        k2 = (_rotl((k2 * c2) & MASK32, 16) * c3) & MASK32
        h2 ^= k2
        h2 = _rotl(h2, 17)
        h2 = (h2 + h3) & MASK32
        h2 = (h2 * 5 + 0x0BCAA747) & MASK32
        k3 = (_rotl((k3 * c3) & MASK32, 17) * c4) & MASK32
        h3 ^= k3
        h3 = _rotl(h3, 15)
        h3 = (h3 + h4) & MASK32
        h3 = (h3 * 5 + 0x96CD1C35) & MASK32
        k4 = (_rotl((k4 * c4) & MASK32, 18) * c1) & MASK32
        h4 ^= k4
        h4 = _rotl(h4, 13)
        h4 = (h4 + h1) & MASK32
        h4 = (h4 * 5 + 0x32AC3B17) & MASK32
    tail = data[16 * nblocks:]
    t = len(tail)
    k = [0, 0, 0, 0]
    for j in range(t):
        k[j // 4] |= tail[j] << (8 * (j % 4))
    if t > 12:
        h4 ^= (_rotl((k[3] * c4) & MASK32, 18) * c1) & MASK32
    if t > 8:
        h3 ^= (_rotl((k[2] * c3) & MASK32, 17) * c4) & MASK32
    if t > 4:
        h2 ^= (_rotl((k[1] * c2) & MASK32, 16) * c3) & MASK32
    if t > 0:
        h1 ^= (_rotl((k[0] * c1) & MASK32, 15) * c2) & MASK32
    h1 ^= n
    h2 ^= n
    h3 ^= n
    h4 ^= n
    h1 = (h1 + h2 + h3 + h4) & MASK32
    h2 = (h2 + h1) & MASK32
    h3 = (h3 + h1) & MASK32
    h4 = (h4 + h1) & MASK32
    h1, h2, h3, h4 = _fmix(h1), _fmix(h2), _fmix(h3), _fmix(h4)
    h1 = (h1 + h2 + h3 + h4) & MASK32
    h2 = (h2 + h1) & MASK32
    h3 = (h3 + h1) & MASK32
    h4 = (h4 + h1) & MASK32
    return h1, h2, h3, h4


def smhasher_verification():
    """SMHasher's VerificationTest: keys {}, {0}, {0,1}, ... {0..254}, key i
    hashed with seed 256 - i, the 256 digests hashed with seed 0; the first
    four bytes of that, little-endian. Published: 0xB3ECE62A for x86_128."""
    digests = b""
    for i in range(256):
        key = bytes(range(i))
        digests += struct.pack("<4I", *murmur3_x86_128(key, 256 - i))
    return murmur3_x86_128(digests, 0)[0]


def selftest():
    got = smhasher_verification()
    if got != 0xB3ECE62A:
        sys.exit("sharded_ref: murmur3_x86_128 verification 0x%08x, "
                 "expected 0xb3ece62a" % got)
    try:
        import mmh3
    except ImportError:
        mmh3 = None
    if mmh3 is not None:
        rng = random.Random(5)
        for _ in range(200):
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
            ours = murmur3_x86_128(data, 0)
            ref = mmh3.hash128(data, 0, x64arch=False, signed=False)
            want = tuple((ref >> (32 * i)) & MASK32 for i in range(4))
            if ours != want:
                sys.exit("sharded_ref: murmur3 differs from mmh3 on %s"
                         % data.hex())
        print("sharded_ref: murmur3_x86_128 matches SMHasher and mmh3")
    else:
        print("sharded_ref: murmur3_x86_128 matches SMHasher (mmh3 not "
              "installed)")


def hash_id(spec, chunk_id):
    shifted = chunk_id >> spec["preshift_bits"] if spec["preshift_bits"] < 64 else 0
    if spec["hash"] == "identity":
        return shifted
    h = murmur3_x86_128(struct.pack("<Q", shifted), 0)
    return h[0] | (h[1] << 32)


def locate(spec, chunk_id):
    hashed = hash_id(spec, chunk_id)
    mbits, sbits = spec["minishard_bits"], spec["shard_bits"]
    minishard = hashed & ((1 << mbits) - 1)
    shard = (hashed >> mbits) & ((1 << sbits) - 1)
    return shard, minishard


def shard_name(spec, shard):
    digits = (spec["shard_bits"] + 3) // 4
    return format(shard, "x").zfill(digits) + ".shard"


def encode(kind, data):
    return gzip.compress(data, mtime=0) if kind == "gzip" else data


def build_shard(spec, chunks, rng):
    """chunks: {chunk id: bytes} all in this shard. Minishards are laid out
    one after another, each as its chunks (with random gaps) then its
    index, so offsets relative to the prior chunk's end are exercised."""
    nmini = 1 << spec["minishard_bits"]
    by_mini = {}
    for cid in chunks:
        by_mini.setdefault(locate(spec, cid)[1], []).append(cid)
    index = [(0, 0)] * nmini
    body = bytearray()
    for m in sorted(by_mini):
        ids = sorted(by_mini[m])
        starts, sizes = [], []
        for cid in ids:
            body += bytes(rng.randrange(256) for _ in range(rng.choice([0, 0, 3, 17])))
            stored = encode(spec["data_encoding"], chunks[cid])
            starts.append(len(body))
            sizes.append(len(stored))
            body += stored
        col_ids = [ids[0]] + [ids[i] - ids[i - 1] for i in range(1, len(ids))]
        col_off = [starts[0]] + [starts[i] - (starts[i - 1] + sizes[i - 1])
                                 for i in range(1, len(ids))]
        raw = struct.pack("<%dQ" % (3 * len(ids)), *(col_ids + col_off + sizes))
        enc = encode(spec["minishard_index_encoding"], raw)
        index[m] = (len(body), len(body) + len(enc))
        body += enc
    head = b"".join(struct.pack("<QQ", s, e) for s, e in index)
    return head + bytes(body)


def info_json(spec):
    return json.dumps({
        "@type": "neuroglancer_multiscale_volume", "type": "image",
        "data_type": "uint8", "num_channels": 1,
        "scales": [{"key": "s", "size": [64, 64, 64], "resolution": [4, 4, 40],
                    "voxel_offset": [0, 0, 0], "chunk_sizes": [[16, 16, 16]],
                    "encoding": "raw", "sharding": spec}]})


def full_spec(hash_, mbits, sbits, pre, ienc, denc):
    return {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": pre,
            "hash": hash_, "minishard_bits": mbits, "shard_bits": sbits,
            "minishard_index_encoding": ienc, "data_encoding": denc}


def write_shards(directory, spec, chunks, rng):
    """chunks: {chunk id: bytes}, each into its shard file in directory
    (shards with no chunk are not written); returns the shard count."""
    shards = {}
    for cid, data in chunks.items():
        shards.setdefault(locate(spec, cid)[0], {})[cid] = data
    for shard, group in shards.items():
        with open(os.path.join(directory, shard_name(spec, shard)), "wb") as f:
            f.write(build_shard(spec, group, rng))
    return len(shards)


def write_set(root, spec, chunks, missing, rng):
    os.makedirs(os.path.join(root, "s"))
    os.makedirs(os.path.join(root, "expect"))
    with open(os.path.join(root, "info"), "w") as f:
        f.write(info_json(spec))
    nshards = write_shards(os.path.join(root, "s"), spec, chunks, rng)
    with open(os.path.join(root, "chunks.txt"), "w") as f:
        for cid, data in sorted(chunks.items()):
            f.write("%d\n" % cid)
            with open(os.path.join(root, "expect", str(cid)), "wb") as g:
                g.write(data)
    with open(os.path.join(root, "missing.txt"), "w") as f:
        for cid in missing:
            f.write("%d\n" % cid)
    return nshards


def random_chunks(rng, count, small):
    chunks = {}
    while len(chunks) < count:
        if small:
            cid = rng.randrange(4096)
        else:
            cid = rng.randrange(1 << 64)
        size = rng.choice([0, 1, 7, 64, 300, 4096]) if rng.random() < 0.3 \
            else rng.randrange(1, 2000)
        chunks[cid] = bytes(rng.randrange(256) for _ in range(size))
    return chunks


def write_sets(out, rng):
    sets = [
        ("identity-raw", full_spec("identity", 2, 3, 0, "raw", "raw"), True),
        ("murmur-gzip", full_spec("murmurhash3_x86_128", 3, 2, 2, "gzip", "gzip"), False),
        ("murmur-one-file", full_spec("murmurhash3_x86_128", 0, 0, 0, "raw", "gzip"), False),
        ("identity-sparse", full_spec("identity", 4, 5, 1, "gzip", "raw"), True),
        ("murmur-wide", full_spec("murmurhash3_x86_128", 6, 1, 3, "raw", "raw"), False),
        ("identity-preshift", full_spec("identity", 1, 9, 6, "gzip", "gzip"), True),
    ]
    for name, spec, small in sets:
        chunks = random_chunks(rng, 150, small)
        missing = []
        while len(missing) < 40:
            cid = rng.randrange(4096) if small else rng.randrange(1 << 64)
            if cid not in chunks:
                missing.append(cid)
        nshards = write_set(os.path.join(out, "sets", name), spec, chunks,
                            missing, rng)
        # every set must have minishards holding several chunks
        per = {}
        for cid in chunks:
            per[locate(spec, cid)] = per.get(locate(spec, cid), 0) + 1
        assert max(per.values()) >= 2, name
        print("sharded_ref: %s: %d chunks in %d shards, %d minishards"
              % (name, len(chunks), nshards, len(per)))


def write_corrupt(out, rng):
    """One damaged shard each; the spec has minishard_bits 1, shard_bits 0,
    identity hash: chunk ids 2 and 4 are in minishard 0, 3 in minishard 1."""
    def case(name, spec, shard_bytes, chunk_id, err, part):
        root = os.path.join(out, "corrupt", name)
        os.makedirs(os.path.join(root, "s"))
        with open(os.path.join(root, "info"), "w") as f:
            f.write(info_json(spec))
        with open(os.path.join(root, "s", "0.shard"), "wb") as f:
            f.write(shard_bytes)
        with open(os.path.join(root, "case.txt"), "w") as f:
            f.write("%d %s %s\n" % (chunk_id, err, part))

    raw = full_spec("identity", 1, 0, 0, "raw", "raw")
    gz = full_spec("identity", 1, 0, 0, "gzip", "gzip")
    good = build_shard(raw, {3: b"hello", 5: b"world!"}, rng)
    case("truncated-index", raw, good[:20], 3, "ECORRUPT",
         "shard index truncated")
    idx = struct.pack("<QQ", 0, 0) + struct.pack("<QQ", 1000, 1048)
    case("minishard-index-past-end", raw, idx + b"x" * 10, 3, "ECORRUPT",
         "lies past the end of the shard")
    idx = struct.pack("<QQ", 0, 0) + struct.pack("<QQ", 24, 8)
    case("minishard-index-reversed", raw, idx + b"x" * 40, 3, "ECORRUPT",
         "before start")
    ms = struct.pack("<3Q", 3, 0, 5)[:20]
    idx = struct.pack("<QQ", 0, 0) + struct.pack("<QQ", 5, 5 + len(ms))
    case("minishard-index-not-24", raw, idx + b"hello" + ms, 3, "ECORRUPT",
         "not a multiple of 24")
    ms = struct.pack("<3Q", 3, 0, 5000)
    idx = struct.pack("<QQ", 0, 0) + struct.pack("<QQ", 5, 5 + len(ms))
    case("chunk-past-end", raw, idx + b"hello" + ms, 3, "ECORRUPT",
         "chunk data")
    ms = gzip.compress(struct.pack("<3Q", 3, 0, 7), mtime=0)
    idx = struct.pack("<QQ", 0, 0) + struct.pack("<QQ", 7, 7 + len(ms))
    case("bad-gzip-data", gz, idx + b"notgzip" + ms, 3, "ECORRUPT", "gzip")
    trunc = gzip.compress(b"some chunk bytes", mtime=0)[:-6]
    ms = gzip.compress(struct.pack("<3Q", 3, 0, len(trunc)), mtime=0)
    idx = struct.pack("<QQ", 0, 0) + struct.pack("<QQ", len(trunc),
                                                 len(trunc) + len(ms))
    case("truncated-gzip-data", gz, idx + trunc + ms, 3, "ECORRUPT", "gzip")
    ms = b"\x1f\x8b\x08\x00garbage-garbage"
    idx = struct.pack("<QQ", 0, 0) + struct.pack("<QQ", 0, len(ms))
    case("bad-gzip-index", gz, idx + ms, 3, "ECORRUPT", "minishard index: gzip")
    case("missing-in-minishard", raw, good, 7, "ENOTFOUND", "not in minishard")
    case("empty-minishard", raw, good, 4, "ENOTFOUND", "is empty")


def morton(pos, grid):
    bits = [(g - 1).bit_length() for g in grid]  # ceil(log2(g)); 0 for g == 1
    code, j = 0, 0
    for i in range(max(bits)):
        for d in range(3):
            if i < bits[d]:
                code |= ((pos[d] >> i) & 1) << j
                j += 1
    return code


def write_morton(out, rng):
    grids = [(1, 1, 1), (2, 1, 1), (1, 1, 7), (3, 5, 9), (16, 8, 16),
             (100, 3, 1), (1, 1000, 2), (7, 7, 7), (1 << 21, 1 << 21, 1 << 21),
             (1 << 30, 5, 1 << 20), (17, 1, 33)]
    with open(os.path.join(out, "morton.txt"), "w") as f:
        for g in grids:
            for _ in range(60):
                pos = [rng.randrange(x) for x in g]
                f.write("%d %d %d %d %d %d %d\n" % (*g, *pos, morton(pos, g)))
    # the spec's own example, x fastest: on a 2x2x2 grid (1,0,0) is 1,
    # (0,1,0) is 2, (0,0,1) is 4
    assert [morton(p, (2, 2, 2)) for p in ((1, 0, 0), (0, 1, 0), (0, 0, 1))] \
        == [1, 2, 4]


def write_volume(root, spec, size, chunk, offset, channels, whole_edges,
                 leave_out, rng):
    """A random uint8 raw volume, chunked and sharded from scratch here.
    whole_edges: chunks at the upper bound are stored at full chunk size
    (random padding past the bound) instead of truncated; both occur in
    the wild. leave_out: how many chunks are left out of their shards."""
    os.makedirs(os.path.join(root, "s"))
    sx, sy, sz = size
    nvox = sx * sy * sz
    vol = bytearray(rng.randrange(1, 256) for _ in range(nvox * channels))
    grid = [(size[d] + chunk[d] - 1) // chunk[d] for d in range(3)]
    positions = [(gx, gy, gz) for gz in range(grid[2]) for gy in range(grid[1])
                 for gx in range(grid[0])]
    missing = set(rng.sample(positions, leave_out))
    chunks = {}
    for g in positions:
        lo = [g[d] * chunk[d] for d in range(3)]
        hi = [min(lo[d] + chunk[d], size[d]) for d in range(3)]
        ext = list(chunk) if whole_edges else [hi[d] - lo[d] for d in range(3)]
        data = bytearray()
        for c in range(channels):
            for z in range(lo[2], lo[2] + ext[2]):
                for y in range(lo[1], lo[1] + ext[1]):
                    for x in range(lo[0], lo[0] + ext[0]):
                        if x < sx and y < sy and z < sz:
                            i = x + sx * (y + sy * (z + sz * c))
                            data.append(0 if g in missing else vol[i])
                        else:
                            data.append(rng.randrange(256))
        if g in missing:
            for c in range(channels):
                for z in range(lo[2], hi[2]):
                    for y in range(lo[1], hi[1]):
                        i0 = lo[0] + sx * (y + sy * (z + sz * c))
                        vol[i0:i0 + hi[0] - lo[0]] = bytes(hi[0] - lo[0])
            continue
        chunks[morton(g, grid)] = bytes(data)
    info = {"@type": "neuroglancer_multiscale_volume", "type": "image",
            "data_type": "uint8", "num_channels": channels,
            "scales": [{"key": "s", "size": list(size), "resolution": [4, 4, 40],
                        "voxel_offset": list(offset),
                        "chunk_sizes": [list(chunk)], "encoding": "raw",
                        "sharding": spec}]}
    with open(os.path.join(root, "info"), "w") as f:
        json.dump(info, f)
    write_shards(os.path.join(root, "s"), spec, chunks, rng)
    with open(os.path.join(root, "volume.bin"), "wb") as f:
        f.write(vol)

    def touches_missing(lo, hi):
        for g in missing:
            if all(lo[d] < (g[d] + 1) * chunk[d] and g[d] * chunk[d] < hi[d]
                   for d in range(3)):
                return 1
        return 0

    boxes = [([0, 0, 0], list(size)), ([0, 0, 0], list(chunk))]
    g = positions[-1]  # the last chunk: truncated on every axis
    boxes.append(([g[d] * chunk[d] for d in range(3)], list(size)))
    for _ in range(25):
        lo = [rng.randrange(size[d]) for d in range(3)]
        hi = [rng.randrange(lo[d] + 1, size[d] + 1) for d in range(3)]
        boxes.append((lo, hi))
    for _ in range(5):  # one voxel
        lo = [rng.randrange(size[d]) for d in range(3)]
        boxes.append((lo, [v + 1 for v in lo]))
    with open(os.path.join(root, "boxes.txt"), "w") as f:
        for lo, hi in boxes:
            a = [lo[d] + offset[d] for d in range(3)]
            b = [hi[d] + offset[d] for d in range(3)]
            f.write("%d %d %d %d %d %d %d\n" % (*a, *b, touches_missing(lo, hi)))


def write_volumes(out, rng):
    vols = [
        ("identity-truncated", full_spec("identity", 2, 2, 1, "raw", "raw"),
         (70, 45, 33), (16, 16, 8), (5, -3, 2), 1, False, 3),
        ("murmur-whole-edges", full_spec("murmurhash3_x86_128", 3, 1, 0, "gzip",
                                         "gzip"),
         (50, 40, 20), (16, 8, 8), (0, 0, 0), 2, True, 2),
        ("one-shard-flat", full_spec("identity", 0, 0, 0, "gzip", "raw"),
         (40, 30, 1), (8, 8, 1), (-8, 16, 7), 1, False, 1),
        # 128 minishards, more than the layer's index cache keeps (64)
        ("murmur-many-minishards", full_spec("murmurhash3_x86_128", 6, 1, 0,
                                             "raw", "raw"),
         (64, 64, 15), (8, 8, 8), (0, 0, 0), 1, False, 4),
    ]
    for name, spec, size, chunk, offset, channels, whole, leave in vols:
        write_volume(os.path.join(out, "volumes", name), spec, size, chunk,
                     offset, channels, whole, leave, rng)


class ShardError(Exception):
    pass


def decode(kind, data, what):
    if kind != "gzip":
        return data
    if data[:2] != b"\x1f\x8b":
        raise ShardError("%s: not gzip" % what)
    if struct.unpack_from("<I", data, 4)[0] != 0:
        raise ShardError("%s: gzip mtime not 0 (not reproducible)" % what)
    return gzip.decompress(data)


def read_minishard(spec, path, blob, minishard):
    """The (chunk id, absolute start, size) list of one minishard."""
    base = 16 << spec["minishard_bits"]
    if len(blob) < base:
        raise ShardError("%s: %d bytes, shorter than its shard index"
                         % (path, len(blob)))
    start, end = struct.unpack_from("<QQ", blob, 16 * minishard)
    if end < start or base + end > len(blob):
        raise ShardError("%s: minishard %d index [%d, %d) out of the file"
                         % (path, minishard, start, end))
    if start == end:
        return []
    raw = decode(spec["minishard_index_encoding"],
                 blob[base + start:base + end],
                 "%s minishard %d index" % (path, minishard))
    if len(raw) % 24:
        raise ShardError("%s: minishard %d index of %d bytes"
                         % (path, minishard, len(raw)))
    n = len(raw) // 24
    cols = struct.unpack("<%dQ" % (3 * n), raw)
    out, cid, pos = [], 0, base
    for i in range(n):
        cid += cols[i]
        pos += cols[n + i]
        size = cols[2 * n + i]
        if pos + size > len(blob):
            raise ShardError("%s: chunk %d past the end" % (path, cid))
        out.append((cid, pos, size))
        pos += size
    return out


def read_chunk(spec, scale_dir, cid):
    """One chunk's bytes, or None if it is stored nowhere."""
    shard, minishard = locate(spec, cid)
    path = os.path.join(scale_dir, shard_name(spec, shard))
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        blob = f.read()
    for got, pos, size in read_minishard(spec, path, blob, minishard):
        if got == cid:
            return decode(spec["data_encoding"], blob[pos:pos + size],
                          "%s chunk %d" % (path, cid))
    return None


def walk(spec, scale_dir):
    """Every chunk id stored in scale_dir's shards, with the checks of a
    writer's output: chunks where their id puts them, sorted ids, no
    overlaps, no empty shard file."""
    stored = set()
    for name in sorted(os.listdir(scale_dir)):
        path = os.path.join(scale_dir, name)
        with open(path, "rb") as f:
            blob = f.read()
        spans, count = [], 0
        for m in range(1 << spec["minishard_bits"]):
            entries = read_minishard(spec, path, blob, m)
            ids = [e[0] for e in entries]
            if ids != sorted(set(ids)):
                raise ShardError("%s: minishard %d ids not increasing"
                                 % (path, m))
            for cid, pos, size in entries:
                if locate(spec, cid) != (int(name.split(".")[0], 16), m) \
                        or shard_name(spec, locate(spec, cid)[0]) != name:
                    raise ShardError("%s: chunk %d stored in minishard %d, "
                                     "belongs to %s" % (path, cid, m,
                                                        locate(spec, cid)))
                if cid in stored:
                    raise ShardError("%s: chunk %d stored twice" % (path, cid))
                stored.add(cid)
                spans.append((pos, pos + size))
                count += 1
        if count == 0:
            raise ShardError("%s: a shard file holding no chunk" % path)
        spans.sort()
        for a, b in zip(spans, spans[1:]):
            if a[1] > b[0]:
                raise ShardError("%s: chunks overlap at byte %d" % (path, b[0]))
    return stored


def read_back(root):
    with open(os.path.join(root, "info")) as f:
        scale = json.load(f)["scales"][0]
    spec, scale_dir = scale["sharding"], os.path.join(root, scale["key"])
    with open(os.path.join(root, "chunks.txt")) as f:
        want = [int(line) for line in f if line.strip()]
    with open(os.path.join(root, "missing.txt")) as f:
        missing = [int(line) for line in f if line.strip()]
    for cid in want:
        with open(os.path.join(root, "expect", str(cid)), "rb") as f:
            expect = f.read()
        got = read_chunk(spec, scale_dir, cid)
        if got is None:
            raise ShardError("%s: chunk %d not found" % (root, cid))
        if got != expect:
            raise ShardError("%s: chunk %d: %d bytes differ from the %d "
                             "written" % (root, cid, len(got), len(expect)))
    for cid in missing:
        if read_chunk(spec, scale_dir, cid) is not None:
            raise ShardError("%s: chunk %d found, never written" % (root, cid))
    stored = walk(spec, scale_dir)
    if stored != set(want):
        raise ShardError("%s: shards hold %d chunks, %d written (%d extra)"
                         % (root, len(stored), len(want),
                            len(stored - set(want))))
    print("sharded_ref: %s: %d chunks read back in %d shards, %d absent"
          % (root, len(want), len(os.listdir(scale_dir)), len(missing)))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "selftest":
        selftest()
        return
    if len(sys.argv) == 3 and sys.argv[1] == "read":
        try:
            read_back(sys.argv[2])
        except (ShardError, OSError, EOFError, ValueError, KeyError,
                struct.error, zlib.error) as e:
            sys.exit("sharded_ref: %s" % e)
        return
    if len(sys.argv) not in (3, 4) or sys.argv[1] != "write":
        sys.exit(__doc__)
    out = sys.argv[2]
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) == 4 else 17)
    selftest()
    write_sets(out, rng)
    write_corrupt(out, rng)
    write_morton(out, rng)
    write_volumes(out, rng)


if __name__ == "__main__":
    main()
