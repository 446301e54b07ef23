#!/usr/bin/env python3
"""ledger_check.py LEDGER REQUEST [--max-releases N] [--envelopes DIR]

Checks one request's rows in a cnx ledger with Python's own sqlite3 and
hashlib, independently of cnx's code:
  - the request is done and every task is done, once: each task released
    at most N times (default 1), with a manifest;
  - every task's manifest is a lineage row marked verified (with
    --envelopes DIR, each such envelope is written there for openssl);
  - the lineage hash chain is intact in every partition: each row's prev is
    the previous row's digest (the first: all zeros) and its row_digest is
    the SHA-256 of "cnx.lineage-row/1\\n<prev>\\n<partition>\\n<offset>\\n
    <envelope digest>\\n<verified>\\n"; every envelope digest is the
    SHA-256 of the stored envelope;
  - every output object the request's tasks recorded exists in storage
    with exactly the recorded SHA-256;
  - the cost view has voxels, CPU and wall time for every stage.
Prints one line per failed check; exit status 0 if all pass, 1 if not.
"""
import hashlib
import os
import sqlite3
import sys
from urllib.parse import urlparse

GENESIS = "sha256:" + "0" * 64


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def main():
    args = sys.argv[1:]
    max_releases = 1
    env_dir = None
    if "--max-releases" in args:
        i = args.index("--max-releases")
        max_releases = int(args[i + 1])
        del args[i:i + 2]
    if "--envelopes" in args:
        i = args.index("--envelopes")
        env_dir = args[i + 1]
        del args[i:i + 2]
    ledger, request = args
    db = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    bad = []

    state, = db.execute("SELECT state FROM requests WHERE id = ?",
                        (request,)).fetchone()
    if state != "done":
        bad.append(f"request {request} is {state}, not done")
    for idx, st, key, man, rel in db.execute(
            "SELECT idx, state, task_key, manifest, releases FROM tasks "
            "WHERE request = ?", (request,)):
        if st != "done" or man is None:
            bad.append(f"task {idx} is {st} (manifest {man})")
        n = db.execute("SELECT count(*) FROM releases WHERE request = ? AND "
                       "idx = ? AND type = 'released'",
                       (request, idx)).fetchone()[0]
        if n < 1 or n > max_releases or n != rel:
            bad.append(f"task {idx} released {n} times (tasks.releases "
                       f"{rel}; allowed 1..{max_releases})")
        row = db.execute("SELECT verified, envelope FROM lineage WHERE "
                         "envelope_digest = ?", (man,)).fetchone()
        if row is None or row[0] != 1:
            bad.append(f"task {idx}: manifest {man} not a verified "
                       "lineage row")
        elif env_dir:
            with open(os.path.join(env_dir, f"{request}-{idx}.json"),
                      "w") as f:
                f.write(row[1])

    rows = 0
    for (part,) in db.execute("SELECT DISTINCT partition FROM lineage"):
        prev = GENESIS
        for off, env_digest, verified, env, p, digest in db.execute(
                "SELECT offset, envelope_digest, verified, envelope, prev, "
                "row_digest FROM lineage WHERE partition = ? ORDER BY "
                "offset", (part,)):
            rows += 1
            if sha(env.encode()) != env_digest:
                bad.append(f"lineage {part}@{off}: envelope digest wrong")
            if p != prev:
                bad.append(f"lineage {part}@{off}: chain broken (prev "
                           f"{p}, expected {prev})")
            text = (f"cnx.lineage-row/1\n{p}\n{part}\n{off}\n{env_digest}\n"
                    f"{verified}\n")
            if sha(text.encode()) != digest:
                bad.append(f"lineage {part}@{off}: row digest wrong")
            prev = digest
    if rows == 0:
        bad.append("no lineage rows")

    outputs = 0
    for obj, digest in db.execute(
            "SELECT o.object, o.digest FROM outputs o JOIN tasks t ON "
            "t.task_key = o.task_key WHERE t.request = ?", (request,)):
        outputs += 1
        path = urlparse(obj).path
        try:
            with open(path, "rb") as f:
                got = sha(f.read())
        except OSError as e:
            bad.append(f"output {obj}: {e}")
            continue
        if got != digest:
            bad.append(f"output {obj}: storage has {got}, ledger {digest}")
    if outputs == 0:
        bad.append("no outputs recorded")

    for stage, vox, cpu, wall in db.execute(
            "SELECT stage, voxels, cpu_s, wall_s FROM stage_costs WHERE "
            "request = ?", (request,)):
        if not (vox > 0 and cpu > 0 and wall > 0):
            bad.append(f"stage {stage}: costs voxels={vox} cpu={cpu} "
                       f"wall={wall}")
    for b in bad:
        print(b)
    print(f"ledger_check {request}: {len(bad)} problem(s); {rows} lineage "
          f"rows, {outputs} outputs checked")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
