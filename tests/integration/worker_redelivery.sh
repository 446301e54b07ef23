#!/usr/bin/env bash
# A task delivered again after its work was durable (issue 13, defect 8):
# a worker that dies between its `succeeded` event and its commit (as one
# killed at that instant, or one whose commit a rebalance refused) leaves
# the task uncommitted, so Kafka delivers it again. The next delivery must
# not make a second manifest (the worker finds its own verified envelope of
# that task in this request, every output present, and announces it again
# instead of computing), and the ledger must count both runs of the same
# attempt by the same worker instance (events carry a run id; attempts are
# keyed by it), not fold them into one row.
#
# Needs a test build (CNX_FAULT_INJECTION: CNX_FAULT_EXIT_BEFORE_COMMIT).
# Request r1 (pyramid, 2 tasks) on a 256x128x128 cnx-synth dataset: worker
# w1 exits before committing its first task; w1 is started again under the
# same --instance and finishes the request. About 30 s.
source "$(dirname "$0")/../../acceptance/lib.sh"
"$BIN/cnx-downsample" --version | grep -q "fault hooks" || {
  echo "needs a test build (CMake -DCNX_FAULT_INJECTION=ON)"; exit 77; }

"$BIN/cnx-synth" --out "$WORK/data" --shape 256,128,128 --quiet
start_broker 2
start_controller
q() { sqlite3 -readonly "$WORK/ledger.db" "$1" 2>/dev/null || true; }

CNX_FAULT_EXIT_BEFORE_COMMIT=1 start_worker w1
"$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow pyramid \
  --workflows "$SRC/workflows" --dataset "file://$WORK/data" \
  --roi 0,0,0,256,128,128 --request r1 --wait --quiet --timeout 120 \
  >"$WORK/r1.out" 2>"$WORK/r1.err" &
RPID=$!
PIDS+=($RPID)
exited() { ! kill -0 "$WPID" 2>/dev/null; }
check "w1 exits before committing its first task" wait_for 60 exited
check "  having said so" grep -q "fault: exiting before the commit of task" "$WORK/w1.log"
K=$(sed -n 's/.*fault: exiting before the commit of task \(sha256:[0-9a-f]*\).*/\1/p' "$WORK/w1.log" | head -n1)
start_worker w1
rrc=0
wait "$RPID" || rrc=$?
check "the request finishes done (cnx-reprocess exit $rrc)" [ "$rrc" -eq 0 ]
check "the task delivered again was announced, not computed again" \
  grep -q "task $K was done before" "$WORK/w1.log"

HEX=${K#sha256:}
nfiles=$(find "$WORK/data/pyramid/v1/lineage/$HEX" -name '*.dsse.json' | wc -l)
check "one manifest of the task in storage (got $nfiles)" [ "$nfiles" -eq 1 ]
ndistinct=$(timeout 30 kcat -b "$BOOT" -C -t cnx.lineage -o beginning -e -q \
  -f '%k\t%s\n' 2>/dev/null | awk -F'\t' -v k="$K" '$1 == k' | sort -u | wc -l)
check "one distinct manifest of the task on cnx.lineage (got $ndistinct)" [ "$ndistinct" -eq 1 ]
check "the ledger's task is done with that manifest" \
  [ "$(q "SELECT count(*) FROM tasks WHERE task_key = '$K' AND state = 'done'")" = 1 ]
rows=$(q "SELECT count(*) || '|' || count(DISTINCT run) || '|' || count(DISTINCT attempt || worker)
          FROM attempts WHERE task_key = '$K' AND request = 'r1'")
check "both runs of attempt 1 by w1 are rows of their own (rows|runs|attempt+worker: $rows)" \
  [ "$rows" = "2|2|1" ]
if [ "$failed" -ne 0 ]; then
  tail -n 20 "$WORK/w1.log"; tail -n 20 "$WORK/controller.log"
fi
finish
