#!/usr/bin/env python3
"""Per-stage and end-to-end CPU cost of pipeline requests, from ledgers.

usage: pipeline_costs.py --voxels N LABEL=LEDGER.db [LABEL=LEDGER.db ...]

Each ledger holds one request (bench/bench_pipeline.sh runs one per
ledger). Read with Python's sqlite3 from the ledger's stage_costs view
(docs/ledger.md): per stage the tasks, the CPU seconds of the succeeded
attempts, the voxels the stage counted and its MVx per core-second; the
end-to-end figure is the request's voxels (N, the region) over the CPU
seconds of every stage. Projected to 8 x 8 x 30 nm: 1e18 / 1920 = 5.21e14
voxels per mm^3. The request's wall time is its `finished` minus its
`submitted` time in the requests table.
"""
import argparse
import sqlite3
import sys
from datetime import datetime

VOXELS_PER_MM3 = 1e18 / (8 * 8 * 30)
TARGET_E2E = 5.0      # MVx per core-second, end to end
TARGET_STAGE = 20.0   # MVx per core-second, every stage
TARGET_WALL = 300.0   # seconds, the 512^3 request
HOURS_PER_WEEK = 168.0


def read(path):
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    reqs = db.execute("SELECT id FROM requests").fetchall()
    if len(reqs) != 1:
        sys.exit("%s: %d requests, expected one" % (path, len(reqs)))
    req = reqs[0][0]
    stages = db.execute(
        "SELECT c.stage, c.worker, c.tasks, c.attempts_succeeded, c.voxels, "
        "c.cpu_s, c.wall_s FROM stage_costs c JOIN stages s ON "
        "s.request = c.request AND s.stage = c.stage WHERE c.request = ? "
        "ORDER BY s.seq",
        (req,)).fetchall()
    cols = {r[1] for r in db.execute("PRAGMA table_info(requests)")}
    wall = None
    if {"submitted", "finished"} <= cols:
        row = db.execute("SELECT submitted, finished FROM requests "
                         "WHERE id = ?", (req,)).fetchone()
        if row and row[0] and row[1]:
            t = [datetime.fromisoformat(v.replace("Z", "+00:00"))
                 for v in row]
            wall = (t[1] - t[0]).total_seconds()
    return req, stages, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--voxels", type=int, required=True)
    ap.add_argument("runs", nargs="+", metavar="LABEL=LEDGER")
    a = ap.parse_args()
    summary = []
    for spec in a.runs:
        label, _, path = spec.partition("=")
        req, stages, wall = read(path)
        total = sum(s[5] for s in stages)
        print("== %s (request %s, ledger %s)" % (label, req, path))
        print("%-10s %-16s %6s %9s %12s %12s %7s" % (
            "stage", "worker", "tasks", "cpu_s", "voxels", "MVx/core-s",
            "share"))
        slow = []
        for st, worker, tasks, att, vox, cpu, _wall in stages:
            rate = vox / cpu / 1e6 if cpu > 0 and vox > 0 else None
            print("%-10s %-16s %6d %9.1f %12d %12s %6.1f%%" % (
                st, worker, tasks, cpu, vox,
                "%.2f" % rate if rate is not None else "-",
                100.0 * cpu / total if total > 0 else 0.0))
            if rate is not None and rate < TARGET_STAGE:
                slow.append("%s %.2f" % (st, rate))
        e2e = a.voxels / total / 1e6 if total > 0 else 0.0
        chmm3 = VOXELS_PER_MM3 / (e2e * 1e6) / 3600 if e2e > 0 else 0.0
        print("end to end: %d voxels / %.1f CPU s = %.3f MVx per "
              "core-second" % (a.voxels, total, e2e))
        print("projected at 8 x 8 x 30 nm: %.0f core-hours per mm^3; "
              "10 mm^3 a week needs %.0f cores" % (
                  chmm3, 10 * chmm3 / HOURS_PER_WEEK))
        if wall is not None:
            print("request wall time: %.1f s" % wall)
        print("targets: end to end >= %.0f MVx/core-s: %s (%.3f); "
              "no stage below %.0f: %s%s; wall < %.0f s: %s" % (
                  TARGET_E2E, "met" if e2e >= TARGET_E2E else "MISSED", e2e,
                  TARGET_STAGE, "met" if not slow else "MISSED",
                  "" if not slow else " (" + ", ".join(slow) + ")",
                  TARGET_WALL,
                  "-" if wall is None else
                  ("met" if wall < TARGET_WALL else "MISSED")))
        print()
        summary.append((label, dict((s[0], s[5]) for s in stages), total,
                        e2e, wall))
    if len(summary) > 1:
        base = summary[0]
        print("== CPU seconds per stage, %s vs each other run" % base[0])
        for label, costs, total, e2e, wall in summary[1:]:
            for st, cpu in costs.items():
                b = base[1].get(st)
                print("%-10s %9.1f -> %9.1f  (%s)" % (
                    st, b if b is not None else float("nan"), cpu,
                    "%.2fx" % (b / cpu) if b and cpu > 0 else "-"))
            print("end to end: %.3f -> %.3f MVx/core-s (%.2fx); wall %s -> "
                  "%s s" % (base[3], e2e, e2e / base[3] if base[3] else 0,
                            "%.1f" % base[4] if base[4] else "-",
                            "%.1f" % wall if wall else "-"))


if __name__ == "__main__":
    main()
