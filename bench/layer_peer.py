"""Peer for bench_core's layer figures: numpy writes a 256^3 uint8 volume as
eight 128^3 raw chunk files with the same discipline as cnx's store
(temporary file, fsync, link, directory fsync) and reads them back.
Prints "write <MB/s> read <MB/s>" (medians)."""
import argparse
import os
import statistics
import time

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--dir", required=True)
ap.add_argument("--repeat", type=int, default=5)
a = ap.parse_args()
rng = np.random.default_rng(1)
vol = rng.integers(0, 256, size=(256, 256, 256), dtype=np.uint8)  # z, y, x
ws, rs = [], []
for r in range(a.repeat):
    d = os.path.join(a.dir, "run%d" % r, "8_8_8")
    os.makedirs(d, exist_ok=True)
    t0 = time.perf_counter()
    for z in (0, 128):
        for y in (0, 128):
            for x in (0, 128):
                name = os.path.join(d, "%d-%d_%d-%d_%d-%d" % (x, x + 128, y, y + 128, z, z + 128))
                tmp = name + ".tmp"
                with open(tmp, "wb") as f:
                    f.write(np.ascontiguousarray(vol[z:z + 128, y:y + 128, x:x + 128]).tobytes())
                    f.flush()
                    os.fsync(f.fileno())
                os.link(tmp, name)
                os.unlink(tmp)
    fd = os.open(d, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    ws.append(vol.nbytes / 1e6 / (time.perf_counter() - t0))
    t0 = time.perf_counter()
    out = np.empty_like(vol)
    for z in (0, 128):
        for y in (0, 128):
            for x in (0, 128):
                name = os.path.join(d, "%d-%d_%d-%d_%d-%d" % (x, x + 128, y, y + 128, z, z + 128))
                with open(name, "rb") as f:
                    out[z:z + 128, y:y + 128, x:x + 128] = np.frombuffer(f.read(), np.uint8).reshape(128, 128, 128)
    rs.append(vol.nbytes / 1e6 / (time.perf_counter() - t0))
    assert (out == vol).all()
print("write %.1f read %.1f" % (statistics.median(ws), statistics.median(rs)))
