#!/usr/bin/env bash
# cnx-report (docs/report.md) on a ledger written by the real stack
# (cnx-broker, cnx-controller, cnx-downsample) and checked against that
# ledger read with Python's sqlite3 (tests/py/report_check.py: its own
# reading of the rows, html.parser for the page). Requests on a
# 256x128x128 cnx-synth dataset, pyramid workflow (ds1: 2 tasks, ds2: 1):
#   r1  the worker dies after its first task's `succeeded` event and before
#       its commit (a test build's CNX_FAULT_EXIT_BEFORE_COMMIT), so the
#       task is delivered and run again: two runs of one attempt;
#   r2  the same region again: every task repeated (bit-identity: 3 of 3);
#   r3  the same with --reuse: every task already done (reused decisions).
# Checked: for each request, one timeline row per stage, bars per stage and
# their outcome classes as the ledger says, the Neuroglancer state; r2's
# page shows 3 of 3 repeated tasks identical; a copy of the ledger with
# failed, preempted, lost and dead-lettered attempts of r2 drawn in those
# classes, retries outlined; strings from the ledger are
# escaped (request ids cannot hold '<': a copy of the ledger whose request
# id, stage name and error text hold markup gives a page with that text and
# no element of it); a copy with rows of the wrong types (text for numbers,
# blobs for times, JSON that is not JSON, a stage no plan names) gives a
# page, exit 0, and the file is not changed; bad arguments, a missing
# ledger, a file that is not a ledger, an unknown request and an
# unwritable --out each give one line on stderr and exit 2 or 1.
# About 40 s. Needs kcat-free tools only, sqlite3 and a test build.
source "${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}/acceptance/lib.sh"
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 not installed"; exit 77; }
"$BIN/cnx-downsample" --version | grep -q "fault hooks" || {
  echo "needs a test build (CMake -DCNX_FAULT_INJECTION=ON)"; exit 77; }
CHECK=$SRC/tests/py/report_check.py
L=$WORK/ledger.db
R=$BIN/cnx-report

"$BIN/cnx-synth" --out "$WORK/data" --shape 256,128,128 --quiet
start_broker 2
start_controller
request() { # id [--reuse]
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow pyramid \
    --workflows "$SRC/workflows" --dataset "file://$WORK/data" \
    --roi 0,0,0,256,128,128 --request "$1" --wait --quiet --timeout 120 "${@:2}" \
    >"$WORK/$1.out" 2>"$WORK/$1.err"
}
CNX_FAULT_EXIT_BEFORE_COMMIT=1 start_worker w1
request r1 & RPID=$!
PIDS+=($RPID)
exited() { ! kill -0 "$WPID" 2>/dev/null; }
check "w1 exits before committing its first task" wait_for 60 exited
check "  having said so" grep -q "fault: exiting before the commit of task" "$WORK/w1.log"
start_worker w1
rrc=0; wait "$RPID" || rrc=$?
check "r1 done (cnx-reprocess exit $rrc)" [ "$rrc" -eq 0 ]
rrc=0; request r2 || rrc=$?
check "r2 done (exit $rrc)" [ "$rrc" -eq 0 ]
rrc=0; request r3 --reuse || rrc=$?
check "r3 done with --reuse (exit $rrc)" [ "$rrc" -eq 0 ]
q() { sqlite3 -readonly "$L" "$1"; }
check "r1 has two runs of one attempt in the ledger" \
  [ "$(q "SELECT count(*) FROM (SELECT 1 FROM attempts WHERE request = 'r1'
          GROUP BY task_key, attempt, worker HAVING count(*) = 2)")" = 1 ]

for r in r1 r2 r3; do
  out=$("$R" --ledger "$L" --request "$r" --out "$WORK/report-$r" 2>"$WORK/report-$r.err")
  check "cnx-report $r: exit 0, prints the page's path" [ "$out" = "$WORK/report-$r/index.html" ]
  check "$r: the page against the ledger (report_check.py)" \
    "$PY" "$CHECK" "$L" "$r" "$WORK/report-$r"
done
check "r2: 3 of 3 repeated tasks identical, as the controller counted" \
  grep -q "<b>3 of 3</b> identical" "$WORK/report-r2/index.html"
check "r3: 3 already-done bars" \
  [ "$(grep -c 'data-outcome="already-done"' "$WORK/report-r3/index.html")" = 3 ]
check "the default layer source is the dataset's URL" \
  grep -q "\"precomputed://file://$WORK/data/pyramid/v1\"" "$WORK/report-r1/neuroglancer.json"
"$R" --ledger "$L" --request r1 --out "$WORK/report-base" \
  --layer-url-base http://127.0.0.1:9000/ >/dev/null
check "--layer-url-base replaces the base; the layer is an image (its info)" \
  "$PY" -c 'import json, sys
l = json.load(open(sys.argv[1]))["layers"]
sys.exit(not (l == [{"type": "image", "name": "pyramid/v1",
  "source": "precomputed://http://127.0.0.1:9000/pyramid/v1"}]))' "$WORK/report-base/neuroglancer.json"

# Markup in the ledger: a copy whose request id, a stage name and an error
# hold markup (the controller refuses such ids; a copy can hold anything).
X=$WORK/xss.db
sqlite3 "$L" ".backup '$X'"
XID='r<script>alert(1)</script>'
XST='ds1"><img src=x onerror=alert(2)>'
sqlite3 "$X" "UPDATE requests SET id = '$XID' WHERE id = 'r1';
  UPDATE stages SET request = '$XID' WHERE request = 'r1';
  UPDATE tasks SET request = '$XID' WHERE request = 'r1';
  UPDATE releases SET request = '$XID' WHERE request = 'r1';
  UPDATE attempts SET request = '$XID' WHERE request = 'r1';
  UPDATE stages SET stage = '$XST' WHERE request = '$XID' AND stage = 'ds1';
  UPDATE tasks SET stage = '$XST' WHERE request = '$XID' AND stage = 'ds1';
  UPDATE attempts SET error = '<iframe src=//x>', error_code = 'E' WHERE request = '$XID';"
"$R" --ledger "$X" --request "$XID" --out "$WORK/report-xss" >/dev/null
check "markup from the ledger is text, not elements (and the stages still match)" \
  "$PY" "$CHECK" "$X" "$XID" "$WORK/report-xss"
check "  no img or iframe element either; the escaped text is there" "$PY" -c '
import html.parser, sys
class P(html.parser.HTMLParser):
    tags = set(); text = []
    def handle_starttag(self, t, a): self.tags.add(t)
    def handle_data(self, d): self.text.append(d)
p = P(); p.feed(open(sys.argv[1]).read())
t = "".join(p.text)
sys.exit(not ({"script", "img", "iframe"}.isdisjoint(p.tags) and sys.argv[2] in t
              and sys.argv[3] in t))' "$WORK/report-xss/index.html" "$XID" "$XST"

# Every outcome class: a copy of the ledger where r2's ds1 task 0 failed
# (retriable) on attempt 2, was preempted on attempt 3, was released as
# attempt 4 and never reported, attempt 5 started and was never heard of
# again, and attempt 6 was dead-lettered without an attempt; and its task
# 1 failed on attempt 2 and was dead-lettered. (The rows the controller
# would fold from such events; the real run gives succeeded, two runs of
# one attempt and already-done above.)
O=$WORK/outcomes.db
sqlite3 "$L" ".backup '$O'"
sqlite3 "$O" "
  INSERT INTO attempts(task_key, request, attempt, worker, run, stage, state, started, finished, error_code, error, retriable)
    SELECT task_key, request, 2, 'w9', 'x', 'ds1', 'failed', done_at, done_at, 'EIO', 'storage <down>', 1 FROM tasks WHERE request = 'r2' AND idx = 0;
  INSERT INTO attempts(task_key, request, attempt, worker, run, stage, state, started, finished)
    SELECT task_key, request, 3, 'w9', 'x', 'ds1', 'preempted', done_at, done_at FROM tasks WHERE request = 'r2' AND idx = 0;
  INSERT INTO releases SELECT request, idx, 4, 'released', task_key, 'bulk', done_at, 'lost', NULL FROM tasks WHERE request = 'r2' AND idx = 0;
  INSERT INTO releases SELECT request, idx, 5, 'released', task_key, 'bulk', done_at, 'lost', NULL FROM tasks WHERE request = 'r2' AND idx = 0;
  INSERT INTO attempts(task_key, request, attempt, worker, run, stage, state, started)
    SELECT task_key, request, 5, 'w9', 'y', 'ds1', 'started', done_at FROM tasks WHERE request = 'r2' AND idx = 0;
  INSERT INTO releases SELECT request, idx, 6, 'dead_lettered', task_key, 'bulk', done_at, 'gave up', NULL FROM tasks WHERE request = 'r2' AND idx = 0;
  INSERT INTO attempts(task_key, request, attempt, worker, run, stage, state, started, finished, error_code, error, retriable)
    SELECT task_key, request, 2, 'w9', 'x', 'ds1', 'failed', done_at, done_at, 'EINVAL', 'bad', 0 FROM tasks WHERE request = 'r2' AND idx = 1;
  INSERT INTO releases SELECT request, idx, 2, 'dead_lettered', task_key, 'bulk', done_at, 'fatal', NULL FROM tasks WHERE request = 'r2' AND idx = 1;"
"$R" --ledger "$O" --request r2 --out "$WORK/report-outcomes" >/dev/null
check "every outcome class drawn as the ledger's rows say (report_check.py)" \
  "$PY" "$CHECK" "$O" r2 "$WORK/report-outcomes"
check "  the classes are there: failed-retried, preempted, lost, dead-lettered" bash -c '
  for c in failed-retried preempted lost dead-lettered; do
    grep -q "data-outcome=\"$c\"" "$1" || { echo "  no $c bar"; exit 1; }; done' _ "$WORK/report-outcomes/index.html"

# Rows of the wrong types: no crash, a page, the file unchanged.
G=$WORK/garbage.db
sqlite3 "$L" ".backup '$G'"
sqlite3 "$G" "UPDATE requests SET roi = 'not json', summary = '{broken',
    submitted = x'00ff', eta = 'soon', deadline = 12 WHERE id = 'r2';
  UPDATE attempts SET started = x'deadbeef', wall_s = 'fast', voxels = 'many',
    cpu_s = x'01', attempt = 'one' WHERE request = 'r2' AND stage = 'ds1';
  UPDATE stages SET res_x = 'wide', tasks = 'some' WHERE request = 'r2';
  INSERT INTO tasks(request, idx, stage, x0, y0, z0, x1, y1, z1, deps_left,
    state, task_key, done_at) VALUES('r2', 99, 'nowhere', 'a', 'b', 'c', 1, 2, 3,
    0, 'done', 'k', 'yesterday');
  INSERT INTO attempts(task_key, request, attempt, worker, run, stage, state,
    started, finished, wall_s) VALUES('k', 'r2', -5, 'w', '', 'nowhere', 'weird',
    'then', NULL, -1e308);
  INSERT INTO releases VALUES('r2', 99, 1, 'released', 'k', 'bulk', 'later', '', NULL);
  INSERT OR REPLACE INTO slo_events VALUES('r2', 'met', 'whenever', NULL, 'never');"
before=$(sha256sum <"$G")
rc=0; "$R" --ledger "$G" --request r2 --out "$WORK/report-garbage" >/dev/null 2>"$WORK/garbage.err" || rc=$?
check "a ledger with rows of the wrong types: exit 0 (got $rc), a page" \
  [ "$rc" -eq 0 -a -s "$WORK/report-garbage/index.html" ]
check "  the stage no plan names has a row of its own" \
  grep -q 'data-stage="nowhere"' "$WORK/report-garbage/index.html"
check "  the ledger file is not changed (opened read-only)" [ "$(sha256sum <"$G")" = "$before" ]

# Bad input: one line on stderr, exit 2 (or 1: the report cannot be written).
bad() { # expected exit, text the line must hold, args...
  local want=$1 text=$2 rc=0; shift 2
  "$R" "$@" >"$WORK/bad.out" 2>"$WORK/bad.err" || rc=$?
  echo "  exit $rc: $(cat "$WORK/bad.err")"
  [ "$rc" -eq "$want" ] && [ "$(wc -l <"$WORK/bad.err")" -eq 1 ] &&
    grep -q -- "$text" "$WORK/bad.err" && [ ! -s "$WORK/bad.out" ]
}
echo not a ledger >"$WORK/notes.txt"
check "no --ledger: exit 2" bad 2 "missing --ledger" --request r1 --out "$WORK/o"
check "unknown option: exit 2" bad 2 "unknown option '--frobnicate'" --frobnicate
check "a missing ledger file: exit 2, named" bad 2 "$WORK/none.db" \
  --ledger "$WORK/none.db" --request r1 --out "$WORK/o"
check "a file that is not a ledger: exit 2" bad 2 "not a cnx ledger" \
  --ledger "$WORK/notes.txt" --request r1 --out "$WORK/o"
check "an unknown request: exit 2, named" bad 2 "no request 'r9'" \
  --ledger "$L" --request r9 --out "$WORK/o"
check "an --out that cannot be made: exit 1" bad 1 "cannot create $WORK/notes.txt/o" \
  --ledger "$L" --request r1 --out "$WORK/notes.txt/o"
check "bad --price-per-core-hour: exit 2" bad 2 "price-per-core-hour" \
  --ledger "$L" --request r1 --out "$WORK/o" --price-per-core-hour cheap
check "--help: usage on stdout, exit 0" bash -c '"$1" --help | head -1 | grep -q "usage: cnx-report"' _ "$R"
if [ "$failed" -ne 0 ]; then
  tail -n 20 "$WORK/controller.log"; cat "$WORK"/report-*.err 2>/dev/null || true
fi
finish
