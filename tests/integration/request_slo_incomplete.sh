#!/usr/bin/env bash
# A request with dead or never-run tasks never reports "SLO met", however
# early it finishes. The real stack (broker, controller, one cnx-downsample
# worker) runs workflows/pyramid.json over a 128^3 cnx-synth image with a
# far deadline, but with ds1's parameters set to {"mode": "bogus"}: the
# planner does not read downsample's parameters, the worker refuses them
# (fatal), so ds1's task is dead-lettered and ds2's never runs. Checked:
#  - cnx-reprocess --wait exits 4 (tasks failed); its --json result says
#    "slo": "missed", and its text summary "SLO MISSED (incomplete: 1 task
#    dead, 1 never ran)", never "SLO met";
#  - the ledger: the request's slo is 'missed', and no 'met' SLO event.
# Before the fix the controller compared the finish time with the deadline
# only, and all three said "met".
source "${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}/acceptance/lib.sh"
DATA=$WORK/data
for tool in kcat sqlite3 openssl; do
  command -v "$tool" >/dev/null || { echo "request_slo_incomplete.sh: $tool is not installed" >&2; exit 1; }
done
"$BIN/cnx-synth" --out "$DATA" --shape 128,128,128 --seed 2 --quiet >/dev/null
mkdir -p "$WORK/wf"
"$PY" - "$SRC/workflows/pyramid.json" "$WORK/wf/pyramid-bad.json" <<'PY'
import json, sys
wf = json.load(open(sys.argv[1]))
wf["name"] = "pyramid-bad"
wf["stages"][0]["parameters"] = {"mode": "bogus"}
json.dump(wf, open(sys.argv[2], "w"), indent=1)
PY

start_broker 2
start_controller
start_worker ds-1

run() { # request id, extra args -> RC, $WORK/<id>.out, .err
  local id=$1; shift
  set +e
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" \
    --workflow pyramid-bad --workflows "$WORK/wf" --dataset "file://$DATA" \
    --roi 0,0,0,128,128,128 --deadline 24h --request "$id" --wait \
    --timeout 300 "$@" >"$WORK/$id.out" 2>"$WORK/$id.err"
  RC=$?
  set -e
}

run dead-json --json
check "cnx-reprocess --json: exit 4, tasks failed (rc $RC)" [ "$RC" -eq 4 ]
check "the result: outcome failed, ds1 dead, ds2 never run, slo missed" \
  [ "$(jq_py "$WORK/dead-json.out" '(d["outcome"], d["slo"], [(s["stage"], s["dead"], s["never_run"]) for s in d["stages"]])')" = \
    "('failed', 'missed', [('ds1', 1, 0), ('ds2', 0, 1)])" ]
check "ledger: the request's SLO is missed" \
  [ "$(sqlite3 "$WORK/ledger.db" "SELECT slo FROM requests WHERE id = 'dead-json'")" = missed ]
check "ledger: no 'met' SLO event for it" \
  [ "$(sqlite3 "$WORK/ledger.db" "SELECT count(*) FROM slo_events WHERE request = 'dead-json' AND type = 'met'")" = 0 ]

run dead-text # the summary goes to stderr
grep "SLO" "$WORK/dead-text.err" || true
check "cnx-reprocess text summary: exit 4 (rc $RC)" [ "$RC" -eq 4 ]
check "the summary says SLO MISSED (incomplete: ...)" \
  grep -qF "SLO MISSED (incomplete: 1 task dead, 1 never ran)" "$WORK/dead-text.err"
check "the summary never says SLO met" bash -c '! grep -q "SLO met" "$1"' _ "$WORK/dead-text.err"
finish
