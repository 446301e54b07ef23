#!/usr/bin/env bash
# A release split by a controller kill is completed by the next run. The
# controller publishes a `released` event and then the task message, to
# two topics; killed between their acknowledgements, the event is in the
# log (the ledger says released) and no task message is behind it. Here
# the split is made exactly: the only ds1 task's message is taken off
# cnx.tasks.downsample by a consumer of the workers' own group that
# commits it and runs nothing, and the controller is then killed -9. The
# restarted controller (with --release-lease 0: no lease to fall back on)
# must send the task message again, as the same attempt, with no second
# release; a worker then runs it and the request is done. Reuses
# acceptance/lib.sh; about 30 s.
source "$(dirname "$0")/../../acceptance/lib.sh"

"$BIN/cnx-synth" --out "$WORK/data" --shape 128,128,128 --quiet
start_broker 2
start_controller --release-lease 0
q() { sqlite3 -readonly "$WORK/ledger.db" "$1" 2>/dev/null || true; }

take_first_task split

kill -9 "$CTL_PID"
wait "$CTL_PID" 2>/dev/null || true
CNX_LOG=info "$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/ledger.db" \
  --trust "$WORK/trust" --key "$CKEY" --progress 0.5 --release-lease 0 \
  >>"$WORK/controller2.log" 2>&1 &
CPID=$!
PIDS+=($CPID)
check "the restarted controller sends the unconfirmed release's message again" \
  wait_for 30 grep -q "sending again the task messages of 1 release" "$WORK/controller2.log"

start_worker w1
done_split() { [ "$(q "SELECT outcome FROM requests WHERE id = 'split'")" = done ]; }
check "the request is done" wait_for 60 done_split
check "the task was released once, as attempt 1" \
  [ "$(q "SELECT group_concat(attempt) FROM releases WHERE request = 'split'
          AND idx = 0 AND type = 'released'")" = 1 ]
check "attempt 1 is the one that ran" \
  [ "$(q "SELECT group_concat(a.attempt) FROM attempts a JOIN tasks t ON
          t.task_key = a.task_key AND t.request = a.request
          WHERE t.request = 'split' AND t.idx = 0 AND a.state = 'succeeded'")" = 1 ]
check "the ledger is consistent" \
  "$PY" "$SRC/acceptance/ledger_check.py" "$WORK/ledger.db" split --max-releases 1
kill -TERM "$CPID"
crc=0
wait "$CPID" 2>/dev/null || crc=$?
check "the controller stops with exit 0 (got $crc)" [ "$crc" -eq 0 ]
check "no sanitizer report from the controller" \
  bash -c '! grep -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$1" "$2"' _ \
  "$WORK/controller.log" "$WORK/controller2.log"
if [ "$failed" -ne 0 ]; then
  tail -n 30 "$WORK/controller.log" "$WORK/controller2.log"
  cat "$WORK/kcat.err"
fi
finish
