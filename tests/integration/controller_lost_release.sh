#!/usr/bin/env bash
# A released task whose message is lost is released again (issue 13,
# defect 3). The lease used to cover only tasks with a `started` attempt,
# so a task message that never reached a worker (a broker that came back
# empty) left its request `accepted` for ever. Here the message of the
# only ds1 task is taken from cnx.tasks.downsample by a consumer of the
# workers' own group (kcat -G cnx.downsample) that commits it and runs
# nothing; only then does a worker start. With --release-lease 12 (time
# for the worker to join the group the thief left) the controller releases
# the task again as attempt 2 (reason "lost: not started ..."), the worker
# runs it, and the request is done. Reuses acceptance/lib.sh (broker,
# keys, worker, checks); about 30 s.
source "$(dirname "$0")/../../acceptance/lib.sh"

"$BIN/cnx-synth" --out "$WORK/data" --shape 128,128,128 --quiet
start_broker 2
make_key
mkdir -p "$WORK/trust"
cp "$PUB" "$WORK/trust/workers.pem"
CNX_LOG=info "$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/ledger.db" \
  --trust "$WORK/trust" --key "$CKEY" --progress 0.5 --release-lease 12 \
  >>"$WORK/controller.log" 2>&1 &
CPID=$!
PIDS+=($CPID)
q() { sqlite3 -readonly "$WORK/ledger.db" "$1" 2>/dev/null || true; }

take_first_task lost

start_worker w1
done_lost() { [ "$(q "SELECT outcome FROM requests WHERE id = 'lost'")" = done ]; }
check "the request is done all the same" wait_for 60 done_lost
check "the lost task was released again as attempt 2, as not started" \
  [ "$(q "SELECT count(*) FROM releases WHERE request = 'lost' AND idx = 0
          AND type = 'released' AND attempt = 2
          AND reason LIKE 'lost: not started % after the release of attempt 1'")" = 1 ]
check "a re-released attempt is the one that ran" \
  [ "$(q "SELECT min(a.attempt) >= 2 FROM attempts a JOIN tasks t ON
          t.task_key = a.task_key AND t.request = a.request
          WHERE t.request = 'lost' AND t.idx = 0 AND a.state = 'succeeded'")" = 1 ]
check "the ledger is consistent (no task released beyond its budget)" \
  "$PY" "$SRC/acceptance/ledger_check.py" "$WORK/ledger.db" lost --max-releases 4
kill -TERM "$CPID"
crc=0
wait "$CPID" 2>/dev/null || crc=$?
check "the controller stops with exit 0 (got $crc)" [ "$crc" -eq 0 ]
check "no sanitizer report from the controller" \
  bash -c '! grep -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$1"' _ "$WORK/controller.log"
if [ "$failed" -ne 0 ]; then
  tail -n 30 "$WORK/controller.log"
  cat "$WORK/kcat.err"
fi
finish
