#!/usr/bin/env bash
# Health endpoints of a worker and the controller (issue 19), spoken to
# with curl and checked with promtool (Debian's prometheus package).
#
# A broker on a fixed port, the controller and an idle cnx-downsample
# worker, each with --metrics-port and --ready-timeout 3; the worker has
# --broker-timeout 15. Both serve /metrics (200, and `promtool check
# metrics` finds nothing to say; cnx_build_info names the commit
# --version prints; the process_* series are there), /healthz 200,
# /readyz 200 (a query string ignored), /nope 404, POST /metrics 405.
# Run 1: the broker is killed: /readyz turns 503 naming the broker within
# the readiness time plus a margin, cnx_ready drops to 0, /healthz
# answers 200 as long as the worker lives, and the worker gives up and
# exits 1 saying why; a worker started then, with no broker, is never
# ready (503 while it tries to join, then naming the broker). Run 2: the
# broker comes back on the same port; a new worker is ready; the broker is killed and started again before the
# give-up: /readyz is 200 again and the worker is still running past the
# moment it would have given up. Draining: a request is submitted, the
# worker takes a task (slowed by --slow-ms) and gets SIGTERM: /readyz
# is 503 "draining", /healthz 200, and the worker exits 0 once its task
# is done. Every wait is bounded. About 80 s.
source "$(dirname "$0")/../../acceptance/lib.sh"
command -v promtool >/dev/null || { echo "needs promtool (apt-get install prometheus)"; exit 77; }
command -v curl >/dev/null || { echo "needs curl"; exit 77; }

# Four free ports below the kernel's ephemeral range: the broker's and
# three metrics ports.
read -r PORT WM CM W0M < <("$PY" -c 'import random, socket
for _ in range(200):
    ps = random.sample(range(20000, 32000), 4)
    try:
        for q in ps:
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
    except OSError:
        continue
    print(*ps); break')
BT=15 # the workers' --broker-timeout
broker_up() { # cnx-broker on $PORT -> BOOT, BROKER_PID
  rm -f "$WORK/broker.out"
  "$BIN/cnx-broker" --partitions 2 --stages downsample --port "$PORT" \
    >"$WORK/broker.out" 2>>"$WORK/broker.err" &
  BROKER_PID=$!
  PIDS+=($BROKER_PID)
  wait_for 10 test -s "$WORK/broker.out"
  BOOT=$(head -n1 "$WORK/broker.out")
}
code() { # [curl args] url: the HTTP status (000: no answer)
  curl -s -o /dev/null -m 5 -w '%{http_code}' "$@" || true
}
body() { curl -s -m 5 "$@" || true; }
is() { local want=$1; shift; [ "$(code "$@")" = "$want" ]; }
lint() { # url: promtool has nothing to say about the exposition
  local out
  curl -sf -m 5 "$1" >"$WORK/scrape.txt" || { echo "  no scrape of $1"; return 1; }
  out=$(promtool check metrics <"$WORK/scrape.txt" 2>&1) || { echo "$out" | head -n 20; return 1; }
  [ -z "$out" ] || { echo "$out" | head -n 20; return 1; }
}
alive() { kill -0 "$1" 2>/dev/null; }
gone() { ! alive "$1"; }

for b in cnx-downsample cnx-controller; do
  check "$b --ready-timeout 0 is refused (exit 2, one line)" eval \
    '"$BIN/$b" --ready-timeout 0 2>"$WORK/usage.err"; [ $? -eq 2 ] && [ "$(wc -l <"$WORK/usage.err")" -eq 1 ]'
  check "$b --help names /healthz, /readyz and --ready-timeout" eval \
    '"$BIN/$b" --help | tr -s " \n" " " | grep -q "/healthz.*/readyz.*--ready-timeout"'
done
broker_up
check "cnx-broker listens on the port asked for" [ "$BOOT" = "127.0.0.1:$PORT" ]
start_controller --metrics-port "$CM" --ready-timeout 3 --broker-timeout 300
start_worker w1 --metrics-port "$WM" --ready-timeout 3 --broker-timeout "$BT"
W1=$WPID
W="http://127.0.0.1:$WM"
C="http://127.0.0.1:$CM"

check "worker /readyz turns 200" wait_for 60 is 200 "$W/readyz"
check "controller /readyz turns 200 (caught up)" wait_for 60 is 200 "$C/readyz"
for ep in "$W" "$C"; do
  who=worker; [ "$ep" = "$C" ] && who=controller
  check "$who /metrics 200" is 200 "$ep/metrics"
  check "$who /metrics passes promtool check metrics" lint "$ep/metrics"
  check "$who /healthz 200 ok" eval '[ "$(body "$ep/healthz")" = ok ]'
  check "$who /readyz?probe=1 200 ready" eval '[ "$(body "$ep/readyz?probe=1")" = ready ]'
  check "$who /nope 404" is 404 "$ep/nope"
  check "$who / 404" is 404 "$ep/"
  check "$who POST /metrics 405" is 405 -X POST -d x=1 "$ep/metrics"
  check "$who POST /readyz 405" is 405 -X POST "$ep/readyz"
  check "  saying Allow: GET" eval 'curl -s -m 5 -i -X POST "$ep/readyz" | grep -q "^Allow: GET"'
  check "$who: a request line that does not parse is 400" eval \
    '[ "$(printf "BROKEN\r\n\r\n" | timeout 5 "$PY" -c "import socket,sys
s = socket.create_connection((\"127.0.0.1\", int(sys.argv[1])))
s.sendall(sys.stdin.buffer.read()); print(s.recv(64).split()[1].decode())" "${ep##*:}")" = 400 ]'
done

# The build the metrics name is the one --version prints.
read -r _ _ ver_commit _ < <("$BIN/cnx-downsample" --version)
want_dirty=false; case "$ver_commit" in *-dirty) want_dirty=true ;; esac
body "$W/metrics" >"$WORK/worker.prom"
body "$C/metrics" >"$WORK/controller.prom"
for f in worker controller; do
  check "$f: cnx_build_info has --version's commit ($ver_commit)" \
    grep -q "^cnx_build_info{version=\"[^\"]*\",commit=\"${ver_commit%-dirty}\",dirty=\"$want_dirty\"} 1$" "$WORK/$f.prom"
  for s in process_cpu_seconds_total process_resident_memory_bytes \
           process_virtual_memory_bytes process_start_time_seconds \
           process_open_fds process_max_fds; do
    check "$f: $s" grep -q "^$s [0-9.e+]*$" "$WORK/$f.prom"
  done
  check "$f: cnx_ready 1" grep -qx "cnx_ready 1" "$WORK/$f.prom"
done
check "worker: its own series too" grep -q '^cnx_tasks_total{stage="downsample"' "$WORK/worker.prom"
check "controller: its own series too" grep -q '^cnx_controller_messages_applied_total ' "$WORK/controller.prom"
# The process start time agrees with ps (whole seconds).
pst=$(sed -n 's/^process_start_time_seconds \([0-9]*\).*/\1/p' "$WORK/worker.prom")
pss=$(date -d "$(ps -o lstart= -p "$W1")" +%s)
check "process_start_time_seconds $pst is ps's start $pss (+-2 s)" \
  [ $((pst - pss)) -le 2 -a $((pss - pst)) -le 2 ]

# ---- run 1: the broker goes away for good ----------------------------------
kill -9 "$BROKER_PID"
check "worker /readyz turns 503 within 3 + 12 s" wait_for 15 is 503 "$W/readyz"
check "  naming the broker" eval 'body "$W/readyz" | grep -q "^broker unreachable for [0-9]* s (bootstrap $BOOT)$"'
check "controller /readyz turns 503 within 3 + 12 s" wait_for 15 is 503 "$C/readyz"
check "  naming the broker" eval 'body "$C/readyz" | grep -q "^broker unreachable"'
check "worker cnx_ready 0" eval 'body "$W/metrics" | grep -qx "cnx_ready 0"'
# /healthz until the worker is gone: 200 every time it answers.
ok=0; bad=0
end=$((SECONDS + 45))
while alive "$W1" && [ $SECONDS -lt $end ]; do
  c=$(code "$W/healthz")
  # No answer (000) is fine only from a worker on its way out.
  if [ "$c" = 200 ]; then ok=$((ok + 1))
  elif [ "$c" != 000 ]; then bad=$((bad + 1)); echo "  /healthz answered $c"
  else sleep 0.5; alive "$W1" && { bad=$((bad + 1)); echo "  /healthz: no answer"; }
  fi
  sleep 0.5
done
check "worker gives up (exits) within $BT + 25 s" gone "$W1"
check "/healthz answered 200 while it waited ($ok times), nothing else ($bad)" \
  [ "$ok" -gt 0 -a "$bad" -eq 0 ]
set +e; wait "$W1"; W1RC=$?; set -e
check "worker exit status 1 ($W1RC)" [ "$W1RC" = 1 ]
check "  saying why in one line" grep -q "^cnx-downsample: broker unreachable for $BT s (bootstrap $BOOT)" "$WORK/w1.log"

# A worker started now, with no broker, is never ready: first joining its
# groups, then the broker unreachable.
start_worker w0 --metrics-port "$W0M" --ready-timeout 3 --broker-timeout "$BT"
W0=$WPID
saw_ready=0
unready() {
  local b; b=$(body "http://127.0.0.1:$W0M/readyz")
  [ "$b" = ready ] && saw_ready=1
  case "$b" in "broker unreachable for "*) return 0 ;; esac
  return 1
}
# Its metrics server answers from the start (503 "starting" while its
# clients make their first, unanswered, metadata requests: about 15 s under
# the sanitizers); the broker clock starts at its loop's first poll.
check "a worker started without a broker answers /healthz 200 while starting" \
  wait_for 10 is 200 "http://127.0.0.1:$W0M/healthz"
check "a worker started without a broker: /readyz says the broker is unreachable" wait_for 60 unready
check "  and never said ready" [ "$saw_ready" = 0 ]
check "  (503)" is 503 "http://127.0.0.1:$W0M/readyz"
kill -9 "$W0" 2>/dev/null || true

# ---- run 2: the broker comes back before the give-up ------------------------
broker_up
check "the broker came back on the same port" [ "$BOOT" = "127.0.0.1:$PORT" ]
start_worker w2 --metrics-port "$WM" --ready-timeout 3 --broker-timeout "$BT" \
  --slow-ms 4000
W2=$WPID
check "new worker /readyz 200" wait_for 60 is 200 "$W/readyz"
kill -9 "$BROKER_PID"
T0=$SECONDS
check "worker /readyz turns 503 within 3 + 12 s" wait_for 15 is 503 "$W/readyz"
broker_up
check "the broker came back on the same port" [ "$BOOT" = "127.0.0.1:$PORT" ]
check "worker /readyz is 200 again" wait_for 20 is 200 "$W/readyz"
check "controller /readyz is 200 again" wait_for 60 is 200 "$C/readyz"
check "worker cnx_ready 1 again" eval 'body "$W/metrics" | grep -qx "cnx_ready 1"'
# Past the moment it would have given up had the broker stayed away.
left=$((T0 + BT + 5 - SECONDS)); [ "$left" -gt 0 ] && sleep "$left"
check "the worker is still running $((SECONDS - T0)) s after the kill" alive "$W2"
check "  and ready" is 200 "$W/readyz"
check "  and alive" is 200 "$W/healthz"
check "  and never said it gave up" eval '! grep -q "broker unreachable for $BT s" "$WORK/w2.log"'

# ---- draining: SIGTERM while a task runs ------------------------------------
"$BIN/cnx-synth" --out "$WORK/data" --shape 128,128,128 --quiet
"$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow pyramid \
  --workflows "$SRC/workflows" --dataset "file://$WORK/data" \
  --roi 0,0,0,128,128,128 --request rq1 --timeout 60 --quiet >/dev/null
check "the worker takes a task" wait_for 30 eval \
  'body "$W/metrics" | grep -qx "cnx_tasks_in_flight{stage=\"downsample\"} 1"'
kill -TERM "$W2"
check "after SIGTERM, during the grace: /readyz 503 draining" wait_for 3 eval \
  'body "$W/readyz" | grep -q "^draining: stop requested"'
check "  /healthz still 200" is 200 "$W/healthz"
check "  cnx_ready 0" eval 'body "$W/metrics" | grep -qx "cnx_ready 0"'
check "the worker finishes its task and exits 0" wait_for 30 gone "$W2"
set +e; wait "$W2"; W2RC=$?; set -e
check "  (exit status $W2RC)" [ "$W2RC" = 0 ]
if [ "$failed" -ne 0 ]; then
  tail -n 15 "$WORK/w1.log" "$WORK/w2.log" "$WORK/controller.log" 2>/dev/null || true
fi
finish
