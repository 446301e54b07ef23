#!/usr/bin/env python3
"""Independent numpy implementation of Neuroglancer's compressed_segmentation.

Written from the format description (Neuroglancer's
src/neuroglancer/sliceview/compressed_segmentation/README.md and the layout
of its reference encoder), block by block and on purpose simple, to
cross-check the C codec in libcnx:

  file    = one uint32 per channel: that channel's offset in words from the
            start of the file; then each channel's data.
  channel = one 2-word header per block (x fastest), then for each block in
            that order its encoded values followed by its lookup table,
            unless an identical table was written earlier in the channel,
            in which case the header points at that one.
  header  = word 0: table offset (low 24 bits) | encoded bits << 24;
            word 1: encoded values offset; both in words from the first
            header of the channel.
  bits    = 0 for one distinct value, else the smallest of 1, 2, 4, 8, 16,
            32 with 2**bits >= distinct values.
  values  = table index of each voxel of the FULL block, voxel offset
            x + bx*(y + by*z), packed LSB first into uint32 words; voxels
            past the chunk edge take index 0.
  table   = the block's distinct values, ascending; uint64 as low word then
            high word.

Usage:
  cseg_ref.py selftest
  cseg_ref.py check DIR [--decoder PATH]

`check` reads every DIR/*.json sidecar written by cseg_fixture
({"name", "dtype", "size", "block", "channels", "raw", "cseg"}), and for each
volume: decodes our encoding with this decoder and compares voxel for voxel
with the raw labels; encodes the raw labels with this encoder and compares
the bytes with ours; and, given --decoder (cseg_fixture), has our decoder
read this encoder's bytes back, then sweeps random shapes, block sizes,
types and label mixes through `cseg_fixture encode` and compares bytes and
round trips. Exit status 1 on any mismatch.
"""

import glob
import json
import os
import subprocess
import sys

import numpy as np

BIT_WIDTHS = (1, 2, 4, 8, 16, 32)


def bits_for(count):
    """Encoded bits for a block with `count` distinct values."""
    if count == 1:
        return 0
    for bits in BIT_WIDTHS:
        if (1 << bits) >= count:
            return bits
    raise ValueError("more than 2**32 distinct values in a block")


def grid_of(size, block):
    return [-(-s // b) for s, b in zip(size, block)]


def words_per_label(dtype):
    return np.dtype(dtype).itemsize // 4


def table_words(values, dtype):
    """Sorted distinct values as uint32 words (uint64: low, high)."""
    values = values.astype(np.uint64)
    if words_per_label(dtype) == 1:
        return values.astype(np.uint32)
    out = np.empty(2 * len(values), dtype=np.uint32)
    out[0::2] = (values & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    out[1::2] = (values >> np.uint64(32)).astype(np.uint32)
    return out


def pack(indices, bits):
    """Pack indices (one per voxel of the full block) LSB first."""
    n = len(indices)
    nwords = (n * bits + 31) // 32
    offsets = np.arange(n, dtype=np.uint64) * np.uint64(bits)
    word = (offsets // np.uint64(32)).astype(np.int64)
    shift = offsets % np.uint64(32)
    out = np.zeros(nwords, dtype=np.uint64)
    # Fields of one word never overlap, so adding them is OR-ing them.
    np.add.at(out, word, indices.astype(np.uint64) << shift)
    return out.astype(np.uint32)


def encode(labels, block):
    """labels: array (channels, z, y, x) of uint32 or uint64."""
    channels, sz, sy, sx = labels.shape
    size = (sx, sy, sz)
    bx, by, bz = block
    gx, gy, gz = grid_of(size, block)
    out = [np.zeros(channels, dtype=np.uint32)]
    length = channels
    for c in range(channels):
        base = length
        out[0][c] = base
        headers = np.zeros(2 * gx * gy * gz, dtype=np.uint32)
        out.append(headers)
        length += len(headers)
        tables = {}
        for z in range(gz):
            for y in range(gy):
                for x in range(gx):
                    sub = labels[c, z * bz:(z + 1) * bz, y * by:(y + 1) * by,
                                 x * bx:(x + 1) * bx]
                    values, inverse = np.unique(sub, return_inverse=True)
                    bits = bits_for(len(values))
                    full = np.zeros((bz, by, bx), dtype=np.uint64)
                    full[:sub.shape[0], :sub.shape[1], :sub.shape[2]] = \
                        inverse.reshape(sub.shape)
                    voff = length - base
                    if bits:
                        packed = pack(full.reshape(-1), bits)
                        out.append(packed)
                        length += len(packed)
                    key = values.tobytes()
                    if key in tables:
                        toff = tables[key]
                    else:
                        toff = length - base
                        words = table_words(values, labels.dtype)
                        out.append(words)
                        length += len(words)
                        tables[key] = toff
                    if toff >= 1 << 24:
                        raise ValueError("table offset does not fit 24 bits")
                    i = x + gx * (y + gy * z)
                    headers[2 * i] = toff | bits << 24
                    headers[2 * i + 1] = voff
    return np.concatenate(out).astype('<u4').tobytes()


class Corrupt(Exception):
    pass


def decode(data, dtype, size, block, channels=1):
    """Decode to an array (channels, z, y, x); raise Corrupt on bad data."""
    if len(data) % 4:
        raise Corrupt("length not a multiple of 4")
    words = np.frombuffer(data, dtype='<u4').astype(np.uint64)
    nwords = len(words)
    sx, sy, sz = size
    bx, by, bz = block
    gx, gy, gz = grid_of(size, block)
    wpl = words_per_label(dtype)
    bvox = bx * by * bz
    out = np.zeros((channels, sz, sy, sx), dtype=dtype)
    if nwords < channels:
        raise Corrupt("too short for the channel offsets")
    for c in range(channels):
        base = int(words[c])
        if base < channels or base + 2 * gx * gy * gz > nwords:
            raise Corrupt("channel %d offset %d" % (c, base))
        for z in range(gz):
            for y in range(gy):
                for x in range(gx):
                    i = x + gx * (y + gy * z)
                    h0 = int(words[base + 2 * i])
                    voff = int(words[base + 2 * i + 1])
                    toff = h0 & 0xFFFFFF
                    bits = h0 >> 24
                    az = min(bz, sz - z * bz)
                    ay = min(by, sy - y * by)
                    ax = min(bx, sx - x * bx)
                    if bits == 0:
                        index = np.zeros((bz, by, bx), dtype=np.int64)
                    elif bits in BIT_WIDTHS:
                        nvw = (bvox * bits + 31) // 32
                        start = base + voff
                        if start + nvw > nwords:
                            raise Corrupt("block (%d,%d,%d) values" % (x, y, z))
                        packed = words[start:start + nvw]
                        offsets = np.arange(bvox, dtype=np.uint64) * \
                            np.uint64(bits)
                        w = packed[(offsets // np.uint64(32)).astype(np.int64)]
                        mask = np.uint64((1 << bits) - 1)
                        index = ((w >> (offsets % np.uint64(32))) & mask)
                        index = index.astype(np.int64).reshape(bz, by, bx)
                    else:
                        raise Corrupt("block (%d,%d,%d) bits %d" % (x, y, z,
                                                                   bits))
                    index = index[:az, :ay, :ax]
                    pos = base + toff + index * wpl
                    if pos.max() + wpl > nwords:
                        raise Corrupt("block (%d,%d,%d) table" % (x, y, z))
                    value = words[pos]
                    if wpl == 2:
                        value = value | (words[pos + 1] << np.uint64(32))
                    out[c, z * bz:z * bz + az, y * by:y * by + ay,
                        x * bx:x * bx + ax] = value.astype(dtype)
    return out


def words_of(blob):
    return [int(w) for w in np.frombuffer(blob, dtype='<u4')]


def selftest():
    """The format description worked by hand for tiny chunks."""
    failures = 0

    def expect(name, got, want):
        nonlocal failures
        if got != want:
            failures += 1
            print("selftest %s: got %s, want %s" % (name, got, want))

    # 2x1x1 {5, 3}, block 8^3: table [3, 5] at 18, 16 value words at 2.
    lab = np.array([[[[5, 3]]]], dtype=np.uint32)
    want = [1, 18 | 1 << 24, 2, 1] + [0] * 15 + [3, 5]
    expect("two voxels", words_of(encode(lab, (8, 8, 8))), want)
    # single label, uint64: zero bits, table at 2.
    lab = np.full((1, 8, 8, 8), 42, dtype=np.uint64)
    expect("single label", words_of(encode(lab, (8, 8, 8))), [1, 2, 2, 42, 0])
    # 4x1x1 {30, 10, 20, 30}, block 4x1x1: two bits, indices 2 0 1 2.
    lab = np.array([[[[30, 10, 20, 30]]]], dtype=np.uint32)
    expect("two bits", words_of(encode(lab, (4, 1, 1))),
           [1, 3 | 2 << 24, 2, 0x92, 10, 20, 30])
    # uint64 with a high word: table written low, high.
    lab = np.array([[[[0x100000002]], [[1]]]], dtype=np.uint64)
    want = [1, 18 | 1 << 24, 2, 1] + [0] * 15 + [1, 0, 2, 1]
    expect("uint64 table", words_of(encode(lab, (8, 8, 8))), want)
    # two blocks with the same table: the second re-uses it.
    lab = np.full((1, 8, 8, 16), 9, dtype=np.uint32)
    lab[..., 8:] = 7
    lab[0, 0, 0, 0] = 7
    lab[0, 0, 0, 8] = 9
    got = words_of(encode(lab, (8, 8, 8)))
    expect("table re-use headers", got[:5], [1, 20 | 1 << 24, 4,
                                             20 | 1 << 24, 22])
    expect("table re-use length", len(got), 39)
    # Round trips of this implementation on random data.
    rng = np.random.default_rng(7)
    for dtype in (np.uint32, np.uint64):
        for shape, block in (((13, 7, 20), (8, 8, 8)), ((5, 9, 4), (3, 5, 7))):
            sx, sy, sz = shape
            lab = rng.integers(0, 6, size=(2, sz, sy, sx)).astype(dtype)
            lab = lab * dtype(0x100000001 if dtype == np.uint64 else 77)
            back = decode(encode(lab, block), dtype, shape, block, 2)
            if not np.array_equal(back, lab):
                failures += 1
                print("selftest round trip %s %s failed" % (dtype, shape))
    return failures


def check(directory, decoder):
    passed = 0
    failed = 0
    sidecars = sorted(glob.glob(os.path.join(directory, "*.json")))
    if not sidecars:
        print("no fixtures in %s" % directory)
        return 1
    for path in sidecars:
        with open(path) as f:
            meta = json.load(f)
        name = meta["name"]
        dtype = np.dtype(meta["dtype"]).newbyteorder('<')
        size = tuple(meta["size"])
        block = tuple(meta["block"])
        channels = meta["channels"]
        raw = np.fromfile(os.path.join(directory, meta["raw"]), dtype=dtype)
        raw = raw.reshape(channels, size[2], size[1], size[0])
        with open(os.path.join(directory, meta["cseg"]), "rb") as f:
            ours = f.read()
        desc = "%s %s %dx%dx%d block %dx%dx%d x%d" % (
            name, meta["dtype"], size[0], size[1], size[2], block[0],
            block[1], block[2], channels)

        def report(what, ok, detail=""):
            nonlocal passed, failed
            if ok:
                passed += 1
            else:
                failed += 1
            print("%-4s %-44s %s%s" % ("ok" if ok else "FAIL", desc, what,
                                       (": " + detail) if detail else ""))

        # 1. numpy decodes our bytes.
        try:
            back = decode(ours, dtype, size, block, channels)
            bad = int(np.count_nonzero(back != raw))
            report("numpy decode of C bytes (%d voxels)" % raw.size, bad == 0,
                   "%d voxels differ" % bad if bad else "")
        except Corrupt as e:
            report("numpy decode of C bytes", False, "corrupt: %s" % e)
        # 2. numpy encoder gives the same bytes.
        mine = encode(raw, block)
        same = mine == ours
        detail = ""
        if not same:
            a, b = words_of(mine), words_of(ours)
            first = next((i for i in range(min(len(a), len(b)))
                          if a[i] != b[i]), min(len(a), len(b)))
            detail = "numpy %d words, C %d words, first difference at " \
                     "word %d" % (len(a), len(b), first)
        report("byte-identical encodings (%d bytes)" % len(ours), same,
               detail)
        # 3. our decoder reads the numpy encoder's bytes.
        if decoder:
            ref_path = os.path.join(directory, name + ".numpy.cseg")
            out_path = os.path.join(directory, name + ".numpy.bin")
            with open(ref_path, "wb") as f:
                f.write(mine)
            cmd = [decoder, "decode", ref_path, meta["dtype"]] + \
                [str(v) for v in size] + [str(v) for v in block] + \
                [str(channels), out_path]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                report("C decode of numpy bytes", False,
                       proc.stderr.strip() or "exit %d" % proc.returncode)
            else:
                got = np.fromfile(out_path, dtype=dtype).reshape(raw.shape)
                bad = int(np.count_nonzero(got != raw))
                report("C decode of numpy bytes", bad == 0,
                       "%d voxels differ" % bad if bad else "")
    if decoder:
        p, f = random_sweep(directory, decoder, RANDOM_CASES)
        passed += p
        failed += f
    print("cseg numpy cross-check: %d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


RANDOM_CASES = 40


def random_sweep(directory, tool, cases):
    """Random shapes, blocks, types and label mixes: the C encoder (run as
    `tool encode`) must write this encoder's bytes, and decode to the input
    through this decoder."""
    rng = np.random.default_rng(20240611)
    passed = failed = 0
    for case in range(cases):
        dtype = np.dtype(np.uint64 if case % 2 else np.uint32)
        size = tuple(int(v) for v in rng.integers(1, 24, size=3))
        block = tuple(int(v) for v in rng.choice([1, 2, 3, 4, 5, 8, 16],
                                                  size=3))
        channels = int(rng.integers(1, 3))
        pool = int(rng.choice([1, 2, 3, 4, 7, 9, 20, 70, 300, 5000]))
        values = rng.integers(0, 2**63, size=pool, dtype=np.uint64)
        if dtype == np.uint32:
            values &= np.uint64(0xFFFFFFFF)
        # Labels from a small pool, in runs along x, as segmentations are.
        shape = (channels, size[2], size[1], size[0])
        picks = rng.integers(0, pool, size=shape)
        runs = rng.integers(0, 2, size=shape).astype(bool)
        for x in range(1, size[0]):
            picks[..., x] = np.where(runs[..., x], picks[..., x - 1],
                                     picks[..., x])
        lab = values[picks].astype(dtype)
        raw_path = os.path.join(directory, "sweep%d.bin" % case)
        enc_path = os.path.join(directory, "sweep%d.cseg" % case)
        lab.astype(dtype.newbyteorder("<")).tofile(raw_path)
        cmd = [tool, "encode", raw_path, dtype.name] + \
            [str(v) for v in size] + [str(v) for v in block] + \
            [str(channels), enc_path]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        desc = "sweep%d %s %dx%dx%d block %dx%dx%d x%d pool %d" % (
            case, dtype.name, size[0], size[1], size[2], block[0], block[1],
            block[2], channels, pool)
        ok = proc.returncode == 0
        detail = proc.stderr.strip()
        if ok:
            with open(enc_path, "rb") as f:
                ours = f.read()
            ok = ours == encode(lab, block)
            detail = "" if ok else "C bytes differ from numpy bytes"
            if ok:
                back = decode(ours, dtype, size, block, channels)
                ok = np.array_equal(back, lab)
                detail = "" if ok else "numpy decode of C bytes differs"
        if ok:
            passed += 1
        else:
            failed += 1
            print("FAIL %s: %s" % (desc, detail))
    print("%-4s %d random sweeps: C encoder = numpy encoder, round trips "
          "exact (%d failed)" % ("ok" if not failed else "FAIL", cases,
                                 failed))
    return passed, failed


def main(argv):
    if len(argv) >= 2 and argv[1] == "selftest":
        failures = selftest()
        print("cseg numpy selftest: %s" % ("ok" if not failures else
                                           "%d failed" % failures))
        return 1 if failures else 0
    if len(argv) >= 3 and argv[1] == "check":
        decoder = None
        if len(argv) >= 5 and argv[3] == "--decoder":
            decoder = argv[4]
        failures = selftest()
        if failures:
            print("cseg numpy selftest: %d failed; not comparing" % failures)
            return 1
        print("cseg numpy selftest: ok")
        return check(argv[2], decoder)
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
