#!/usr/bin/env bash
# What a request may ask of a live cnx-controller (issue 13, defects 4 and
# 7): datasets only under the controller's --dataset-root URLs (component-
# wise: a sibling whose name merely starts like a root is outside), never
# a scheme it cannot write (http), never a path with '..'; and no more
# tasks than --max-tasks-per-request, refused at planning time with the
# count and the cap. Each refusal is one line in the request's `error`
# (and on cnx-reprocess's stderr, exit 2); nothing is written outside the
# roots. A request within bounds is accepted. Bad --dataset-root values are
# usage errors (exit 2). Reuses acceptance/lib.sh; about 15 s.
source "$(dirname "$0")/../../acceptance/lib.sh"

mkdir -p "$WORK/ok" "$WORK/also" "$WORK/outside"
"$BIN/cnx-synth" --out "$WORK/ok/data" --shape 256,256,128 --quiet
"$BIN/cnx-synth" --out "$WORK/outside/data" --shape 128,128,128 --quiet
cp -r "$WORK/outside/data" "$WORK/ok-evil"
start_broker 2
make_key
mkdir -p "$WORK/trust"
cp "$PUB" "$WORK/trust/workers.pem"

usage() { # args...: the controller must refuse them with exit 2
  local rc=0
  "$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/x.db" --trust "$WORK/trust" --key "$CKEY" \
    "$@" >/dev/null 2>"$WORK/usage.err" || rc=$?
  [ "$rc" -eq 2 ] || { echo "exit $rc for $*: $(cat "$WORK/usage.err")" >&2; return 1; }
}
check "--dataset-root of a scheme the controller cannot write: exit 2" \
  usage --dataset-root http://example.org/data
check "--dataset-root with '..': exit 2" usage --dataset-root "file://$WORK/ok/../outside"
check "--max-tasks-per-request 0: exit 2" usage --max-tasks-per-request 0
check "--release-lease -1: exit 2" usage --release-lease -1

CNX_LOG=info "$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/ledger.db" \
  --trust "$WORK/trust" --key "$CKEY" --progress 0.5 --dataset-root "file://$WORK/ok" \
  --dataset-root "$WORK/also" --max-tasks-per-request 3 \
  >>"$WORK/controller.log" 2>&1 &
CPID=$!
PIDS+=($CPID)
q() { sqlite3 -readonly "$WORK/ledger.db" "$1" 2>/dev/null || true; }

submit() { # id, dataset, roi: cnx-reprocess without --wait; sets RC
  RC=0
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow pyramid \
    --workflows "$SRC/workflows" --dataset "$2" --roi "$3" --request "$1" \
    --timeout 60 --quiet >"$WORK/$1.out" 2>"$WORK/$1.err" || RC=$?
}
refused() { # id, substrings of its error
  local id=$1 err
  shift
  [ "$(q "SELECT state FROM requests WHERE id = '$id'")" = refused ] || {
    echo "$id: state '$(q "SELECT state FROM requests WHERE id = '$id'")'" >&2
    return 1
  }
  err=$(q "SELECT error FROM requests WHERE id = '$id'")
  for s in "$@"; do
    case $err in *"$s"*) ;; *) echo "$id: error '$err' lacks '$s'" >&2; return 1 ;; esac
  done
}

submit inside "file://$WORK/ok/data" 0,0,0,128,128,128
check "a request under a root, within the cap, is accepted (exit $RC)" [ "$RC" -eq 0 ]
check "  its 2 tasks are planned" [ "$(q "SELECT tasks FROM requests WHERE id = 'inside'")" = 2 ]

submit too-big "file://$WORK/ok/data" 0,0,0,256,256,128
check "5 tasks over a cap of 3: refused (exit $RC)" [ "$RC" -eq 2 ]
check "  the reason gives the count, per stage, and the cap" \
  refused too-big "the region needs 5 tasks (ds1 4, ds2 1), more than the cap of 3 tasks per request" \
  "--max-tasks-per-request"
check "  and no task of it is in the ledger" \
  [ "$(q "SELECT count(*) FROM tasks WHERE request = 'too-big'")" = 0 ]

submit outside "file://$WORK/outside/data" 0,0,0,128,128,128
check "a dataset under no root: refused (exit $RC)" [ "$RC" -eq 2 ]
check "  the reason names the dataset and the roots" \
  refused outside "dataset file://$WORK/outside/data is not under a dataset root" \
  "file://$WORK/ok" "file://$WORK/also"
submit evil "file://$WORK/ok-evil" 0,0,0,128,128,128
check "a sibling whose name starts like a root is outside it: refused (exit $RC)" \
  refused evil "dataset file://$WORK/ok-evil is not under a dataset root"
check "  nothing was written outside the roots" \
  bash -c '[ ! -e "$1/outside/data/pyramid" ] && [ ! -e "$1/ok-evil/pyramid" ]' _ "$WORK"

submit web http://127.0.0.1:9/data 0,0,0,128,128,128
check "an http dataset: refused (exit $RC)" [ "$RC" -eq 2 ]
check "  the reason says the controller cannot write http://" \
  refused web "the controller cannot write http:// stores"

# A '..' that climbs out of a root, sent as is (cnx-reprocess would
# canonicalise it): the fold rejects the message, no request is made.
"$PY" - "$SRC/workflows/pyramid.json" "$WORK" >"$WORK/dotdot.json" <<'PYEOF'
import json, sys
print(json.dumps({"schema": "cnx.request/1", "request": "dotdot",
                  "workflow": json.load(open(sys.argv[1])),
                  "dataset": "file://" + sys.argv[2] + "/ok/../outside/data",
                  "roi": {"min": [0, 0, 0], "max": [128, 128, 128]},
                  "deadline": "2099-01-01T00:00:00Z",
                  "submitted": "2026-01-01T00:00:00Z", "reuse": False,
                  "submitter": "bounds@test"}, separators=(",", ":")))
PYEOF
kcat -P -b "$BOOT" -t cnx.requests -k dotdot "$WORK/dotdot.json"
dotdot_rejected() { [ "$(q "SELECT count(*) FROM rejected WHERE topic = 'cnx.requests' AND error LIKE '%..%'")" = 1 ]; }
check "a dataset with '..' is rejected with the reason" wait_for 20 dotdot_rejected
check "  and makes no request" [ "$(q "SELECT count(*) FROM requests WHERE id = 'dotdot'")" = 0 ]

kill -TERM "$CPID"
crc=0
wait "$CPID" || crc=$?
check "the controller stops with exit 0 (got $crc)" [ "$crc" -eq 0 ]
check "no sanitizer report from the controller" \
  bash -c '! grep -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$1"' _ "$WORK/controller.log"
if [ "$failed" -ne 0 ]; then
  q "SELECT id, state, error FROM requests"
  q "SELECT * FROM rejected"
  tail -n 20 "$WORK/controller.log"
fi
finish
