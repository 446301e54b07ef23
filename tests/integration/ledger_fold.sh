#!/usr/bin/env bash
# The ledger is a fold over the log: a real run (broker, controller, a
# worker, cnx-reprocess twice, a refused request) is captured with kcat and
# applied again by tests/support/fold_replay through the controller's own
# fold, in eight scrambled interleavings of the partitions (FOLD_SEEDS) with
# transactions rolled back and replayed from the stored positions (as when
# a controller dies), and with the controller's own decisions now and then
# applied early, as it applies them live. Every replay must dump
# (`sqlite3 .dump`) exactly the live ledger.
set -euo pipefail
BIN=${CNX_BIN:?}
SUP=${CNX_SUPPORT:?}
SRC=${CNX_SOURCE:?}
DIRTY=${CNX_ALLOW_DIRTY:+--allow-dirty}
W=$(mktemp -d /tmp/cnx-fold-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

"$BIN/cnx-synth" --out "$W/data" --shape 256,256,128 --quiet
"$BIN/cnx-broker" --partitions 3 >"$W/broker.out" 2>"$W/broker.err" &
PIDS+=($!)
for _ in $(seq 100); do BOOT=$(head -n1 "$W/broker.out" 2>/dev/null || true); [ -n "$BOOT" ] && break; sleep 0.1; done
[ -n "$BOOT" ] || { echo "broker did not start"; exit 1; }
"$BIN/cnx-keygen" --out "$W/keys" >/dev/null
"$BIN/cnx-keygen" --out "$W/ckeys" >/dev/null
mkdir "$W/trust" && cp "$W/keys/cnx.pub" "$W/trust/worker.pem"
"$BIN/cnx-controller" --brokers "$BOOT" --ledger "$W/live.db" --trust "$W/trust" --key "$W/ckeys/cnx.key" \
  --progress 0.2 -q 2>"$W/controller.log" &
CPID=$!
PIDS+=($CPID)
"$BIN/cnx-downsample" --brokers "$BOOT" --key "$W/keys/cnx.key" --instance w1 \
  --session-timeout-ms 6000 --slow-ms 200 -q $DIRTY 2>"$W/worker.log" &
PIDS+=($!)

run() { # id, extra args
  local id=$1; shift
  "$BIN/cnx-reprocess" --controller-key "$W/ckeys/cnx.pub" --brokers "$BOOT" --workflow pyramid --workflows "$SRC/workflows" \
    --request "$id" --roi 0,0,0,256,256,128 --wait --quiet --timeout 120 "$@"
}
run req-a --dataset "file://$W/data"
run req-b --dataset "file://$W/data"
set +e
run req-missing --dataset "file://$W/nowhere"
rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "FAIL: a request for a missing dataset: exit $rc, want 2"; exit 1; }

kill -TERM "$CPID"
wait "$CPID" || { echo "FAIL: controller exit status"; cat "$W/controller.log"; exit 1; }
sqlite3 "$W/live.db" .dump >"$W/live.sql"
for t in cnx.requests cnx.events cnx.lineage; do
  timeout 30 kcat -b "$BOOT" -C -t "$t" -o beginning -e -q -J
done >"$W/log.jsonl"
echo "captured $(wc -l <"$W/log.jsonl") messages; live ledger: $(wc -l <"$W/live.sql") lines"
grep -q "req-b" "$W/live.sql" || { echo "FAIL: live ledger lacks req-b"; exit 1; }
# Slow tasks give each request several progress messages: the replays
# must keep the last, whichever order they are applied in.
np=$(grep -c 'request-state/1.*\\"type\\":\\"progress\\"' "$W/log.jsonl" || true)
echo "$np progress messages"
[ "$np" -ge 4 ] || { echo "FAIL: too few progress messages ($np) to test their order"; exit 1; }

fails=0
for seed in $(seq "${FOLD_SEEDS:-8}"); do
  "$SUP/fold_replay" "$W/replay$seed.db" "$W/trust" "$W/ckeys/cnx.key" "$seed" "$W/log.jsonl"
  sqlite3 "$W/replay$seed.db" .dump >"$W/replay$seed.sql"
  # The broker's cluster id is recorded by a controller connected to it;
  # the replay has no broker: that row aside, the dumps must be equal.
  grep -v "^INSERT INTO meta VALUES('cluster_id'" "$W/live.sql" >"$W/live-nc.sql" || true
  grep -v "^INSERT INTO meta VALUES('cluster_id'" "$W/replay$seed.sql" >"$W/replay-nc.sql" || true
  if cmp -s "$W/live-nc.sql" "$W/replay-nc.sql"; then
    echo "ok: replay $seed dumps the live ledger"
  else
    echo "FAIL: replay $seed differs from the live ledger:"
    diff "$W/live.sql" "$W/replay$seed.sql" | head -20
    fails=$((fails + 1))
  fi
done
[ "$fails" -eq 0 ]
