#!/usr/bin/env bash
# Issue 13, defect 5: nobody hangs on a gone broker. A broker, the
# controller, an idle worker and `cnx-reprocess --wait` following a request
# that nobody works on, each with --broker-timeout 5; the broker is killed
# (-9). Each must exit 1 within the timeout plus a margin (20 s on a
# loaded 2-core machine), saying why on stderr in one line that names the
# broker: "broker unreachable for 5 s (bootstrap 127.0.0.1:PORT): <the
# last reason librdkafka gave>". Every wait is bounded.
source "$(dirname "$0")/lib.sh"

DATA=$WORK/data
"$BIN/cnx-synth" --out "$DATA" --shape 128,128,128 --quiet
start_broker 2
make_key
mkdir -p "$WORK/trust"
cp "$PUB" "$WORK/trust/workers.pem"

check "--broker-timeout 0 is refused (exit 2)" eval \
  '"$BIN/cnx-segment" --stage segment --brokers "$BOOT" --key "$KEY" --broker-timeout 0 2>/dev/null; [ $? -eq 2 ]'
check "--broker-timeout is in every --help" eval \
  'for b in cnx-controller cnx-reprocess cnx-submit cnx-downsample; do "$BIN/$b" --help | grep -q -- --broker-timeout || exit 1; done'

CNX_LOG=info "$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/ledger.db" \
  --trust "$WORK/trust" --key "$CKEY" --progress 0.5 --broker-timeout 5 \
  >"$WORK/controller.log" 2>&1 &
CPID=$!
PIDS+=($CPID)
# An idle worker: its stage has no task in this request.
CNX_LOG=info "$BIN/cnx-segment" --stage segment --brokers "$BOOT" --key "$KEY" \
  --instance idle --session-timeout-ms 6000 --broker-timeout 5 $DIRTY \
  >"$WORK/worker.log" 2>&1 &
WPID=$!
PIDS+=($WPID)
# A request no worker takes: cnx-reprocess follows it until the end.
"$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" \
  --workflow pyramid --workflows "$SRC/workflows" --dataset "file://$DATA" \
  --roi 0,0,0,128,128,128 --request req-stranded --wait --timeout 300 \
  --broker-timeout 5 >"$WORK/reprocess.out" 2>"$WORK/reprocess.err" &
RPID=$!
PIDS+=($RPID)
check "the request is accepted and followed" \
  wait_for 60 grep -q "req-stranded accepted" "$WORK/controller.log"
check "the worker is ready" wait_for 60 grep -q "worker idle ready" "$WORK/worker.log"

kill -9 "$BROKER_PID"
T0=$SECONDS
gone() { ! kill -0 "$1" 2>/dev/null; }
check "worker exits within 5 + 20 s" wait_for 25 gone "$WPID"
check "cnx-reprocess exits within 5 + 20 s" wait_for 25 gone "$RPID"
check "controller exits within 5 + 20 s" wait_for 25 gone "$CPID"
echo "  all three gone $((SECONDS - T0)) s after the kill"
status() { set +e; wait "$1"; echo $?; set -e; }
W=$(status "$WPID"); R=$(status "$RPID"); C=$(status "$CPID")
check "worker exit status 1 ($W)" [ "$W" = 1 ]
check "cnx-reprocess exit status 1 ($R)" [ "$R" = 1 ]
check "controller exit status 1 ($C)" [ "$C" = 1 ]
line="broker unreachable for 5 s (bootstrap $BOOT): "
said() { # file, prefix: exactly one line saying why, naming the broker
  echo "  $(grep -F "$2$line" "$1" | head -n1)"
  [ "$(grep -cF "$2$line" "$1")" -eq 1 ]
}
check "the worker says why in one line, naming the broker" \
  said "$WORK/worker.log" "cnx-segment: "
check "cnx-reprocess says why in one line, naming the broker" \
  said "$WORK/reprocess.err" "cnx-reprocess: reading cnx.requests: "
check "the controller says why in one line, naming the broker" \
  said "$WORK/controller.log" "cnx-controller: "
finish
