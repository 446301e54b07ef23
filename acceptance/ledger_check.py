#!/usr/bin/env python3
"""ledger_check.py LEDGER REQUEST [--max-releases N] [--envelopes DIR]
                 [--live LIVE]

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
Archives (docs/ledger.md, "Archiving a request"): in a live ledger a
lineage row whose `archive` names a file and whose envelope is empty is a
stub: its chain fields are checked, its envelope is not. LEDGER may be an
archive (meta `archive` names its request): its rows are a subset of their
partitions, so each row's digests are checked but not its link to the row
before; with --live LIVE each archived row must be a stub in LIVE with the
same prev, row digest, envelope digest and verified flag naming this file,
and LIVE's chain must be intact, so the archive's rows are the ones the
live chain holds.
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


def check_chain(db, name, is_archive, bad):
    """Recompute the chain of every partition; returns the rows seen."""
    cols = [r[1] for r in db.execute("PRAGMA table_info(lineage)")]
    arc = "archive" if "archive" in cols else "NULL"
    rows = 0
    for (part,) in db.execute("SELECT DISTINCT partition FROM lineage"):
        prev = GENESIS
        for off, env_digest, verified, env, p, digest, where in db.execute(
                "SELECT offset, envelope_digest, verified, envelope, prev, "
                f"row_digest, {arc} FROM lineage WHERE partition = ? "
                "ORDER BY offset", (part,)):
            rows += 1
            stub = where is not None and env == ""
            if not stub and sha(env.encode()) != env_digest:
                bad.append(f"{name}: lineage {part}@{off}: envelope digest "
                           "wrong")
            if not is_archive and p != prev:
                bad.append(f"{name}: lineage {part}@{off}: chain broken "
                           f"(prev {p}, expected {prev})")
            text = (f"cnx.lineage-row/1\n{p}\n{part}\n{off}\n{env_digest}\n"
                    f"{verified}\n")
            if sha(text.encode()) != digest:
                bad.append(f"{name}: lineage {part}@{off}: row digest wrong")
            prev = digest
    return rows


def check_against_live(db, name, live, bad):
    """Every archived lineage row is a stub of the live chain, and the
    live chain is intact."""
    ldb = sqlite3.connect(f"file:{live}?mode=ro", uri=True)
    check_chain(ldb, live, False, bad)
    target = os.path.abspath(name)
    for part, off, env_digest, verified, p, digest in db.execute(
            "SELECT partition, offset, envelope_digest, verified, prev, "
            "row_digest FROM lineage"):
        row = ldb.execute(
            "SELECT envelope_digest, verified, prev, row_digest, archive, "
            "envelope FROM lineage WHERE partition = ? AND offset = ?",
            (part, off)).fetchone()
        if row is None:
            bad.append(f"{name}: lineage {part}@{off}: no such row in {live}")
        elif row[:4] != (env_digest, verified, p, digest):
            bad.append(f"{name}: lineage {part}@{off}: differs from {live}'s "
                       f"row ({row[3]})")
        elif row[5] == "" and (row[4] is None or
                               os.path.abspath(row[4]) != target):
            bad.append(f"{name}: lineage {part}@{off}: {live}'s stub names "
                       f"archive {row[4]}")


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
    live = None
    if "--live" in args:
        i = args.index("--live")
        live = args[i + 1]
        del args[i:i + 2]
    ledger, request = args
    db = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    bad = []
    is_archive = db.execute("SELECT count(*) FROM meta WHERE key = "
                            "'archive'").fetchone()[0] > 0

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

    rows = check_chain(db, ledger, is_archive, bad)
    if rows == 0:
        bad.append("no lineage rows")
    if live is not None:
        check_against_live(db, ledger, live, bad)

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
