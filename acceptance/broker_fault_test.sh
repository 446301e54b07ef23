#!/usr/bin/env bash
# Broker faults through the mock cluster's own injection API (cnx-broker
# --control) while a request runs end to end: a 3-broker cnx-broker on
# fixed ports, the controller, two downsample workers, the `pyramid`
# workflow over a 256^3 cnx-synth volume (9 tasks), cnx-reprocess --wait.
#  0. a clean run: done; the bytes of every output file recorded;
#  1. injected request errors (Produce, Fetch, Metadata, OffsetCommit,
#     FindCoordinator, Heartbeat): done;
#  2. every broker down for 4 s, then up: done;
#  3. partition leaders moved to other brokers, twice, mid-request: done;
#  4. the broker killed (-9) mid-request and started again, empty, on the
#     same ports: the controller says the log went backwards (a new
#     cluster id), reads the new log from its start and releases again
#     every task released before; done;
# each time exit 0 with every repeated task bit-identical, and the output
# files byte-identical to the clean run's. Every wait is bounded
# (--timeout on cnx-reprocess, wait_for elsewhere).
source "$(dirname "$0")/lib.sh"

DATA=$WORK/data
"$BIN/cnx-synth" --out "$DATA" --shape 256,256,256 --quiet
make_key
mkdir -p "$WORK/trust"
cp "$PUB" "$WORK/trust/workers.pem"

# Three free ports in a row below the kernel's ephemeral range (32768-),
# so no stray client of another test reconnects to them.
PORT=$("$PY" -c 'import random, socket
for _ in range(200):
    p = random.randint(20000, 32000)
    try:
        for q in (p, p + 1, p + 2):
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
    except OSError:
        continue
    print(p); break')
CTL=$WORK/broker.ctl
broker_up() { # start cnx-broker on $PORT with its control FIFO -> BOOT
  rm -f "$WORK/broker.out"
  "$BIN/cnx-broker" --brokers 3 --partitions 4 --stages downsample \
    --port "$PORT" --control "$CTL" >"$WORK/broker.out" 2>>"$WORK/broker.err" &
  BROKER_PID=$!
  PIDS+=($BROKER_PID)
  wait_for 10 test -s "$WORK/broker.out"
  BOOT=$(head -n1 "$WORK/broker.out")
}
control() { # one fault-injection command, and its answer on stderr
  local before; before=$(grep -c "control:" "$WORK/broker.err" || true)
  echo "$*" >"$CTL"
  wait_for 10 eval '[ "$(grep -c "control:" "$WORK/broker.err")" -gt "$before" ]'
  tail -n1 "$WORK/broker.err" | grep -q ": ok$"
}
broker_up
check "cnx-broker listens on the port asked for" [ "$BOOT" = "127.0.0.1:$PORT,127.0.0.1:$((PORT + 1)),127.0.0.1:$((PORT + 2))" ]

CNX_LOG=info "$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/ledger.db" \
  --trust "$WORK/trust" --key "$CKEY" --progress 0.5 \
  >>"$WORK/controller.log" 2>&1 &
CPID=$!
PIDS+=($CPID)
# Each task takes a second or more (--slow-ms), so that faults land while
# the request runs.
for i in 1 2; do
  CNX_LOG=info "$BIN/cnx-downsample" --brokers "$BOOT" --key "$KEY" \
    --instance "w$i" --session-timeout-ms 6000 --slow-ms 1000 $DIRTY \
    >>"$WORK/w$i.log" 2>&1 &
  PIDS+=($!)
done

REQ_PID=
submit() { # request id: cnx-reprocess --wait in the background
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" \
    --workflow pyramid --workflows "$SRC/workflows" --dataset "file://$DATA" \
    --roi 0,0,0,256,256,256 --request "$1" --wait --json --timeout 150 \
    >"$WORK/$1.json" 2>"$WORK/$1.err" &
  REQ_PID=$!
  PIDS+=($REQ_PID)
}
finished() { # request id -> its exit status in RC
  set +e; wait "$REQ_PID"; RC=$?; set -e
  echo "  $1: exit $RC, $(tail -n1 "$WORK/$1.err")"
}
events_of() { # request id -> number of task events of the request so far
  topic_dump cnx.events | grep -c "\"request\":\"$1\"" || true
}
outputs() { # sha256 of the output layer's info and chunks, sorted
  (cd "$DATA/pyramid/v1" && find . -path ./lineage -prune -o -type f \
    ! -name '.lock*' -print0 | sort -z | xargs -0 sha256sum)
}
succeeded_of() { # request id -> succeeded events of the request so far
  topic_dump cnx.events | grep "\"request\":\"$1\"" |
    grep -c '"type":"succeeded"' || true
}
identical() { # request id: exit 0, every task repeated and identical
  [ "$RC" -eq 0 ] && [ "$(jq_py "$WORK/$1.json" 'd["outcome"], d["repeated"] == d["identical"] == 9')" = "('done', True)" ]
}

# 0. A clean run.
submit req-clean
finished req-clean
check "clean run: done, 9 tasks (rc $RC)" [ "$RC" -eq 0 ]
outputs >"$WORK/clean.sha256"
check "clean run wrote the outputs (info, provenance and 8 + 8 chunks)" [ "$(wc -l <"$WORK/clean.sha256")" -eq 18 ]

# 1. Request errors, queued as the request starts.
submit req-errors
control request-errors Produce NOT_LEADER_FOR_PARTITION*2 NOT_ENOUGH_REPLICAS*2 REQUEST_TIMED_OUT
control request-errors Fetch NOT_LEADER_FOR_PARTITION*3 UNKNOWN_TOPIC_OR_PART*2
control request-errors Metadata LEADER_NOT_AVAILABLE*2
control request-errors OffsetCommit REQUEST_TIMED_OUT*2 COORDINATOR_NOT_AVAILABLE
control request-errors FindCoordinator COORDINATOR_NOT_AVAILABLE*2
control request-errors Heartbeat COORDINATOR_LOAD_IN_PROGRESS*2
check "request errors injected (6 commands answered ok)" [ "$(grep -c 'request-errors.*: ok$' "$WORK/broker.err")" -eq 6 ]
finished req-errors
check "request errors: done, every task bit-identical (rc $RC)" identical req-errors
check "request errors: outputs byte-identical to the clean run" cmp -s "$WORK/clean.sha256" <(outputs)

# 2. Every broker down, then up, once the request has started.
submit req-down
wait_for 60 eval '[ "$(events_of req-down)" -gt 0 ]'
for b in 1 2 3; do control down $b; done
sleep 4
for b in 1 2 3; do control up $b; done
finished req-down
check "brokers down 4 s then up: done, every task bit-identical (rc $RC)" identical req-down
check "brokers down then up: outputs byte-identical to the clean run" cmp -s "$WORK/clean.sha256" <(outputs)

# 3. Leaders moved mid-request (every partition of the topics in play).
submit req-leaders
wait_for 60 eval '[ "$(events_of req-leaders)" -gt 0 ]'
moved=0
for to in 2 3; do
  for t in cnx.requests cnx.events cnx.lineage cnx.tasks.downsample; do
    for p in 0 1 2 3; do control leader $t $p $to && moved=$((moved + 1)); done
  done
  sleep 2
done
check "32 leader moves answered ok ($moved)" [ "$moved" -eq 32 ]
finished req-leaders
check "leader changes: done, every task bit-identical (rc $RC)" identical req-leaders
check "leader changes: outputs byte-identical to the clean run" cmp -s "$WORK/clean.sha256" <(outputs)

# 4. The broker killed and started again, empty, on the same ports.
submit req-restart
wait_for 60 eval '[ "$(succeeded_of req-restart)" -gt 0 ]'
kill -9 "$BROKER_PID"
sleep 2
broker_up
check "the broker came back on the same ports" [ "$BOOT" = "127.0.0.1:$PORT,127.0.0.1:$((PORT + 1)),127.0.0.1:$((PORT + 2))" ]
finished req-restart
check "broker restarted empty: done, every task bit-identical (rc $RC)" identical req-restart
check "broker restarted empty: outputs byte-identical to the clean run" cmp -s "$WORK/clean.sha256" <(outputs)
check "the controller said the log went backwards (new cluster id), once" \
  [ "$(grep -c "the log went backwards: the broker's cluster id changed" "$WORK/controller.log")" -eq 1 ]
check "tasks released before the restart were released again" \
  grep -q "lost: the broker's log was reset" "$WORK/controller.log"
check "the controller is still running" kill -0 "$CPID"
finish
