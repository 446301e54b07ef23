#!/usr/bin/env bash
# The controller, the ledger and cnx-reprocess on the real stack: broker,
# controller and downsample workers on this machine, a 512x512x256
# cnx-synth dataset, the two-level `pyramid` workflow.
#  1. the region through the workflow: done; the ledger checked with
#     Python's sqlite3 and hashlib (every task done once with a verified
#     manifest, the lineage chain intact, every output's bytes as
#     recorded) and the manifests with openssl; every request-state and
#     control message valid against its schema;
#  2. the same region again: every repeated task bit-identical, exit 0;
#  3. workers built with the fault hook and told to be non-deterministic:
#     the violation reported by task and object, exit 3;
#  4. the controller killed (-9) mid-request and restarted: the request
#     completes, no task released twice; then the ledger deleted and
#     rebuilt with --rebuild: the same `sqlite3 .dump`;
#  5. a deadline shorter than the work: SLO at risk, then missed, the
#     urgent lane used, exit 5;
#  6. tasks that go silent past their lease: released again as the next
#     attempt, within the budget; the request completes.
source "$(dirname "$0")/lib.sh"
if ! "$BIN/cnx-downsample" --version | grep -q "fault hooks compiled in"; then
  echo "FAILED: this test needs a build configured with -DCNX_FAULT_INJECTION=ON (scripts/test.sh makes one)"
  exit 1
fi

DATA=$WORK/data
"$BIN/cnx-synth" --out "$DATA" --shape 512,512,256 --quiet
start_broker 4
make_key
mkdir -p "$WORK/trust"
cp "$PUB" "$WORK/trust/workers.pem"
echo "not a key" >"$WORK/trust/README.txt"

MPORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_controller() { # extra controller args...
  CNX_LOG=info "$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/ledger.db" \
    --trust "$WORK/trust" --key "$CKEY" --progress 0.5 --price-per-core-hour 0.05 --metrics-port "$MPORT" \
    "$@" >>"$WORK/controller.log" 2>&1 &
  CPID=$!
  PIDS+=($CPID)
}

start_workers() { # tag, extra worker args...
  local tag=$1; shift
  stop_workers
  for i in 1 2; do
    start_worker "w-$tag-$i" "$@"
    WORKERS+=($WPID)
  done
}

reprocess() { # request id, extra args... ; JSON summary in $WORK/<id>.json
  local id=$1; shift
  set +e
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow pyramid \
    --workflows "$SRC/workflows" --dataset "file://$DATA" \
    --roi 0,0,0,512,512,256 --request "$id" --wait --json --timeout 300 "$@" \
    >"$WORK/$id.json" 2>"$WORK/$id.err"
  RC=$?
  set -e
}

sql() { "$PY" -c 'import sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
for r in db.execute(sys.argv[2]): print("|".join(str(x) for x in r))' "$WORK/ledger.db" "$1"; }

start_controller
start_workers plain

# 1. The region through the workflow.
reprocess req-first
check "first run exits 0 (rc $RC)" [ "$RC" -eq 0 ]
check "first run: done, 36 tasks (32 ds1 + 4 ds2)" \
  [ "$(jq_py "$WORK/req-first.json" 'd["outcome"], sum(s["done"] for s in d["stages"])')" = "('done', 36)" ]
# A region off the chunk grid: widened to whole chunks, and said so.
"$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow pyramid --workflows "$SRC/workflows" \
  --dataset "file://$DATA" --roi 10,10,10,300,300,200 --request req-widened \
  --wait --json --timeout 300 >"$WORK/req-widened.json" 2>"$WORK/req-widened.err" || true
check "an unaligned region is widened to whole chunks, and the notes say so" "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
notes = " ".join(d["notes"])
assert d["exit_code"] == 0 and d["outcome"] == "done", d
assert "10,10,10-300,300,200" in notes and "0,0,0-384,384,256" in notes, notes' "$WORK/req-widened.json"
check "the notes are on stderr too" grep -q "widened" "$WORK/req-widened.err"
mkdir -p "$WORK/env"
check "ledger consistent (Python sqlite3 + hashlib)" \
  "$PY" "$SRC/acceptance/ledger_check.py" "$WORK/ledger.db" req-first --envelopes "$WORK/env"
check "every manifest verifies with openssl" \
  bash "$SRC/acceptance/verify_openssl.sh" "$PUB" "$WORK"/env/*.json
check "pyramid/v1 has scales 16 and 32 nm" \
  [ "$(jq_py "$DATA/pyramid/v1/info" '[s["key"] for s in d["scales"]]')" = "['16_16_16', '32_32_32']" ]
check "cost figures: MVx/s, core-hours, GB/mm3, \$/mm3 per stage" \
  "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert all(s["mvx_per_s"] > 0 and s["core_hours"] > 0 and s["gb_per_mm3"] > 0
           and s["usd_per_mm3"] > 0 for s in d["stages"]), d["stages"]' "$WORK/req-first.json"

# 2. The same region again: recomputed, bit-identical.
reprocess req-second
check "second run exits 0 (rc $RC)" [ "$RC" -eq 0 ]
check "second run: 36 of 36 repeated tasks identical" \
  [ "$(jq_py "$WORK/req-second.json" 'd["repeated"], d["identical"]')" = "(36, 36)" ]
check "second run ledger consistent" \
  "$PY" "$SRC/acceptance/ledger_check.py" "$WORK/ledger.db" req-second

# 3. A non-deterministic kernel (test build fault hook).
export CNX_FAULT_NONDETERMINISTIC=downsample
start_workers faulty
unset CNX_FAULT_NONDETERMINISTIC
reprocess req-faulty
check "non-deterministic kernel: exit 3 (rc $RC)" [ "$RC" -eq 3 ]
# Every ds1 task is refused at least once; a task redelivered (a rebalance
# while the faulty workers join) is refused again with other bytes, which
# is one more violation of the same task.
check "violations name task, object and both digests, for each of the 32 ds1 tasks" "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
v = d["violations"]
assert len({x["task_key"] for x in v}) == 32 and len(v) >= 32, len(v)
for x in v:
    assert x["task_key"].startswith("sha256:") and x["object"].startswith("file://")
    assert x["expected"] != x["got"] and x["stage"] == "ds1", x' "$WORK/req-faulty.json"
check "the objects were not overwritten" \
  "$PY" "$SRC/acceptance/ledger_check.py" "$WORK/ledger.db" req-first
check "ledger: immutability violations for the 32 ds1 tasks of req-faulty" \
  [ "$(sql "SELECT count(DISTINCT task_key) FROM violations WHERE request = 'req-faulty' AND kind = 'immutability'")" = 32 ]

# 4. The controller killed mid-request and restarted; then rebuilt.
start_workers slow --slow-ms 300
"$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow pyramid --workflows "$SRC/workflows" \
  --dataset "file://$DATA" --roi 0,0,0,512,512,256 --request req-restart \
  --wait --json --timeout 300 >"$WORK/req-restart.json" 2>"$WORK/req-restart.err" &
RPID=$!
PIDS+=($RPID)
some_done() { [ "$(sql "SELECT count(*) FROM tasks WHERE request = 'req-restart' AND state = 'done'" 2>/dev/null || echo 0)" -ge 6 ]; }
wait_for 120 some_done || true
metrics_ok() { # the exposition is refreshed every --progress period
  "$PY" -c 'import re, sys, urllib.request
t = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
open(sys.argv[2], "w").write(t)
for pat in (r"cnx_request_tasks\{request=\"req-restart\",stage=\"ds1\",state=\"done\"\} [1-9]",
            r"cnx_request_eta_seconds\{request=\"req-restart\"\} [0-9]",
            r"cnx_request_deadline_seconds\{request=\"req-restart\"\} [0-9]",
            r"cnx_request_slo\{request=\"req-restart\",state=\"ok\"\} 1",
            r"cnx_controller_messages_applied_total [1-9]",
            r"cnx_controller_catching_up 0",
            r"cnx_controller_last_update_timestamp_seconds [1-9]",
            r"cnx_stage_queued_tasks\{stage=\"downsample\",lane=\"bulk\"\} [0-9]",
            r"cnx_request_retried_tasks\{request=\"req-restart\",stage=\"ds1\"\} [0-9]",
            r"cnx_request_cpu_seconds\{request=\"req-restart\",stage=\"ds1\"\} [0-9]",
            r"cnx_request_processed_mm3\{request=\"req-restart\",stage=\"ds1\"\} [0-9]",
            r"cnx_request_cost_per_mm3_dollars\{request=\"req-restart\",stage=\"ds1\"\} [0-9]",
            r"cnx_ledger_violations_total\{kind=\"reproducibility\"\} " + sys.argv[3] + "\n"):
    assert re.search(pat, t), pat' "http://127.0.0.1:$MPORT/metrics" "$WORK/metrics.txt" \
    "$(sql "SELECT count(*) FROM violations WHERE kind = 'reproducibility'")" 2>/dev/null
}
check "metrics: per-request tasks by state, ETA, deadline and SLO" wait_for 20 metrics_ok
kill -9 "$CPID"
echo "controller killed with $(sql "SELECT count(*) FROM tasks WHERE request = 'req-restart' AND state = 'done'") task(s) done"
sleep 1
start_controller
set +e; wait "$RPID"; RC=$?; set -e
check "request completes across the controller restart (rc $RC)" [ "$RC" -eq 0 ]
check "no task released twice; ledger consistent" \
  "$PY" "$SRC/acceptance/ledger_check.py" "$WORK/ledger.db" req-restart
check "releases: one per task, none twice" \
  [ "$(sql "SELECT max(n) FROM (SELECT count(*) AS n FROM releases WHERE type = 'released' GROUP BY request, idx)")" = 1 ]
kill -TERM "$CPID"; wait "$CPID" 2>/dev/null || true
sqlite3 "$WORK/ledger.db" .dump >"$WORK/live.sql"
mv "$WORK/ledger.db" "$WORK/old-ledger.db"; rm -f "$WORK/ledger.db-wal" "$WORK/ledger.db-shm"
"$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/rebuilt.db" --trust "$WORK/trust" --key "$CKEY" \
  --rebuild >>"$WORK/controller.log" 2>&1
sqlite3 "$WORK/rebuilt.db" .dump >"$WORK/rebuilt.sql"
check "rebuilt ledger dumps the same rows ($(wc -l <"$WORK/live.sql") lines)" \
  cmp "$WORK/live.sql" "$WORK/rebuilt.sql"
mv "$WORK/old-ledger.db" "$WORK/ledger.db"
# At risk when the ETA comes within half the allowed time of the deadline
# (or, with no ETA yet, half-way there): a 4 s window before an 8 s
# deadline, wide enough for a loaded machine's progress ticks (0.5 s).
start_controller --at-risk-margin 0.5

# 5. A deadline shorter than the work.
start_workers late --slow-ms 600
reprocess req-late --deadline 8s
check "deadline missed: exit 5 (rc $RC)" [ "$RC" -eq 5 ]
slo=$(sql "SELECT group_concat(type || ':' || (julianday(time) < julianday(deadline)), ',') FROM (SELECT type, time, deadline FROM slo_events WHERE request = 'req-late' ORDER BY time)")
check "SLO events: at_risk, before the deadline, then missed (type:before-deadline = $slo)" \
  [ "$slo" = "at_risk:1,missed:0" ]
check "the urgent lane was used" \
  [ "$(sql "SELECT count(*) > 0 FROM releases WHERE request = 'req-late' AND lane = 'urgent'")" = 1 ]
check "urgent tasks were on cnx.tasks.downsample.urgent" \
  [ "$(topic_dump cnx.tasks.downsample.urgent | grep -c req-late)" -gt 0 ]

# 6. Lost tasks: a stage whose lease (2 s) is shorter than its tasks
#    (3.5 s without an event): the controller releases them again as the
#    next attempt; the request completes; none beyond its budget.
"$PY" -c 'import json, sys
w = json.load(open(sys.argv[1]))
w["name"] = "leased"
w["stages"] = [dict(w["stages"][0], lease_s=2, retry_budget=3, output={"layer": "leased/v1"})]
json.dump(w, open(sys.argv[2], "w"))' "$SRC/workflows/pyramid.json" "$WORK/leased.json"
start_workers lease --slow-ms 3500
set +e
"$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow "$WORK/leased.json" \
  --dataset "file://$DATA" --roi 0,0,0,256,256,128 --request req-lease \
  --wait --json --timeout 300 >"$WORK/req-lease.json" 2>"$WORK/req-lease.err"
RC=$?
set -e
check "lost tasks: the request completes (rc $RC)" [ "$RC" -eq 0 ]
check "lost tasks were released again, as later attempts" \
  [ "$(sql "SELECT count(*) > 0 FROM releases WHERE request = 'req-lease' AND attempt > 1 AND reason LIKE 'lost:%'")" = 1 ]
check "no task released beyond its budget (1 + 3)" \
  "$PY" "$SRC/acceptance/ledger_check.py" "$WORK/ledger.db" req-lease --max-releases 4

# Every message the controller and cnx-reprocess wrote, against its schema.
topic_dump cnx.requests >"$WORK/requests.jsonl"
topic_dump cnx.events >"$WORK/events.jsonl"
check "cnx.requests and cnx.events messages valid against their schemas" \
  "$PY" -c 'import json, sys, jsonschema
src = sys.argv[1]
load = lambda n: json.load(open(f"{src}/schemas/{n}.schema.json"))
by = {"cnx.request/1": load("request"), "cnx.request-state/1": load("request-state"),
      "cnx.event/1": load("event"), "cnx.control/1": load("control")}
n = 0
for f in sys.argv[2:]:
    for line in open(f):
        if line.strip():
            m = json.loads(line)
            jsonschema.validate(m, by[m["schema"]]); n += 1
print(n, "messages valid")' "$SRC" "$WORK/requests.jsonl" "$WORK/events.jsonl"
finish
