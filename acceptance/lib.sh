# Shared helpers for the acceptance scripts (sourced). They start real
# processes on this machine: cnx-broker (librdkafka's mock cluster on
# loopback), workers, kcat; everything started is killed on exit.
set -euo pipefail
BIN=${CNX_BIN:?CNX_BIN must name the directory of the built tools}
SRC=${CNX_SOURCE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
PY=${CNX_PYTHON:-/usr/bin/python3}
DIRTY=${CNX_ALLOW_DIRTY:+--allow-dirty}
WORK=$(mktemp -d /tmp/cnx-acceptance-XXXXXX)
PIDS=()
passed=0
failed=0

cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

check() { # description, then a command that must succeed
  local what=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "ok: $what"
  else failed=$((failed + 1)); echo "FAILED: $what"; fi
}

finish() {
  echo "$(basename "$0" .sh): $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}

start_broker() { # [partitions] -> sets BOOT
  "$BIN/cnx-broker" --partitions "${1:-4}" >"$WORK/broker.out" 2>"$WORK/broker.err" &
  PIDS+=($!)
  BROKER_PID=$!
  for _ in $(seq 100); do
    BOOT=$(head -n1 "$WORK/broker.out" 2>/dev/null || true)
    [ -n "$BOOT" ] && return 0
    sleep 0.1
  done
  echo "broker did not start: $(cat "$WORK/broker.err")" >&2
  return 1
}

make_key() { # -> KEY, PUB (the workers'), CKEY, CPUB (the controller's)
  "$BIN/cnx-keygen" --out "$WORK/keys" >/dev/null
  KEY=$WORK/keys/cnx.key
  PUB=$WORK/keys/cnx.pub
  "$BIN/cnx-keygen" --out "$WORK/ckeys" >/dev/null
  CKEY=$WORK/ckeys/cnx.key
  CPUB=$WORK/ckeys/cnx.pub
}

start_controller() { # [controller args...] -> KEY, PUB, CKEY, CPUB, CTL_PID
  # Fresh keys (make_key), a trust directory holding the workers' key, and
  # cnx-controller on $BOOT (start_broker first) with its ledger in $WORK,
  # logging to $WORK/controller.log; extra arguments go to the controller.
  make_key
  mkdir -p "$WORK/trust"
  cp "$PUB" "$WORK/trust/workers.pem"
  CNX_LOG=info "$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/ledger.db" \
    --trust "$WORK/trust" --key "$CKEY" --progress 0.5 "$@" >>"$WORK/controller.log" 2>&1 &
  CTL_PID=$!
  PIDS+=($CTL_PID)
}

sign_message() { # key file, topic, message key, body file -> base64 signature
  # docs/security.md: Ed25519 over the DSSE PAE of the body, under a type
  # naming the topic and the key; made here with the openssl CLI only.
  local type="application/vnd.cnx.message+json;topic=$2;key=$3"
  { printf 'DSSEv1 %d %s %d ' "${#type}" "$type" "$(stat -c %s "$4")"
    cat "$4"; } >"$WORK/.pae"
  openssl pkeyutl -sign -inkey "$1" -rawin -in "$WORK/.pae" | base64 -w0
}

key_id() { # key file (private or public) -> sha256:<hex> of its public DER
  local pub=(-pubin)
  grep -q "PRIVATE KEY" "$1" && pub=(-pubout)
  echo "sha256:$(openssl pkey "${pub[@]}" -in "$1" -outform DER | sha256sum | cut -d' ' -f1)"
}

produce_signed() { # topic, message key, body file, [signing key file]
  local h=()
  [ -n "${4:-}" ] && h=(-H "cnx-sig=$(sign_message "$4" "$1" "$2" "$3")"
                        -H "cnx-keyid=$(key_id "$4")")
  kcat -P -b "$BOOT" -t "$1" -k "$2" "${h[@]}" "$3" 2>>"$WORK/kcat.err" ||
    echo "kcat -P to $1 failed: $(cat "$WORK/kcat.err")" >&2
}

start_worker() { # instance, extra args... -> sets WPID
  local inst=$1; shift
  CNX_LOG=${CNX_WORKER_LOG:-info} "$BIN/cnx-downsample" --brokers "$BOOT" --key "$KEY" --instance "$inst" \
    --session-timeout-ms 6000 $DIRTY "$@" >>"$WORK/$inst.log" 2>&1 &
  WPID=$!
  PIDS+=($WPID)
}

topic_dump() { # topic -> one message per line on stdout
  timeout 30 kcat -b "$BOOT" -C -t "$1" -o beginning -e -q -D '\n' 2>/dev/null || true
}

count_events() { # type -> number of events of that type
  topic_dump cnx.events | grep -c "\"type\":\"$1\"" || true
}

take_first_task() { # request: submit a pyramid request over $WORK/data
  # (128^3) and take its first task's message off cnx.tasks.downsample
  # with a consumer of the workers' own group that commits it and runs
  # nothing (as good as lost); checks both steps. Needs start_broker, the
  # controller's keys and kcat.
  local req=$1
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow pyramid \
    --workflows "$SRC/workflows" --dataset "file://$WORK/data" \
    --roi 0,0,0,128,128,128 --request "$req" --timeout 90 --quiet >/dev/null
  check "the request is accepted and its ds1 task released" \
    wait_for 30 bash -c '[ "$(sqlite3 -readonly "$1" "SELECT state FROM tasks
      WHERE request = '"'$req'"' AND idx = 0" 2>/dev/null)" = released ]' _ "$WORK/ledger.db"
  timeout 60 kcat -b "$BOOT" -G cnx.downsample -X auto.offset.reset=earliest \
    -X session.timeout.ms=6000 -c 1 -q cnx.tasks.downsample \
    >"$WORK/taken.json" 2>"$WORK/kcat.err" || true
  check "the task message was taken off the workers' topic" \
    grep -q '"request":"'"$req"'"' "$WORK/taken.json"
}

wait_for() { # seconds, command: poll until the command succeeds
  local secs=$1; shift
  local end=$((SECONDS + secs))
  while [ $SECONDS -lt $end ]; do
    if "$@"; then return 0; fi
    sleep 0.5
  done
  return 1
}

WORKERS=()
start_stage_worker() { # binary, stage, instance: one worker of a multi-stage binary
  CNX_LOG=${CNX_WORKER_LOG:-info} "$BIN/$1" --stage "$2" --brokers "$BOOT" \
    --key "$KEY" --instance "$3" --session-timeout-ms 6000 $DIRTY \
    >>"$WORK/$3.log" 2>&1 &
  WORKERS+=($!)
  PIDS+=($!)
}

start_pipeline_pool() { # workers per map stage, tag: the workers of workflows/pipeline.json
  # (one per reduce stage), instances named STAGE-TAG-I
  local i
  for i in $(seq "$1"); do
    start_stage_worker cnx-montage montage "montage-$2-$i"
    start_stage_worker cnx-align align-match "match-$2-$i"
    start_stage_worker cnx-align align-render "render-$2-$i"
    start_stage_worker cnx-segment segment "seg-$2-$i"
    start_stage_worker cnx-segment segment-relabel "relabel-$2-$i"
    start_stage_worker cnx-mesh mesh "mesh-$2-$i"
  done
  start_stage_worker cnx-align align-solve "solve-$2"
  start_stage_worker cnx-segment segment-join "join-$2"
  start_stage_worker cnx-mesh mesh-manifest "manifest-$2"
}

start_segmentation_pool() { # [fragment workers]: the workers of workflows/segmentation*.json
  local i
  for i in $(seq "${1:-2}"); do start_stage_worker cnx-segment segment "seg-$i"; done
  start_stage_worker cnx-segment segment-join join
  start_stage_worker cnx-segment segment-relabel relabel
  start_stage_worker cnx-mesh mesh mesh
  start_stage_worker cnx-mesh mesh-manifest manifest
}

stop_workers() { # SIGTERM every worker start_stage_worker started, and wait
  for w in "${WORKERS[@]:-}"; do [ -n "$w" ] && kill -TERM "$w" 2>/dev/null || true; done
  for w in "${WORKERS[@]:-}"; do [ -n "$w" ] && wait "$w" 2>/dev/null || true; done
  WORKERS=()
}

request_over() { # roi, timeout s, workflow, request id: cnx-reprocess --wait of a
  # workflow of $WORK/wf over file://$DATA -> RC, $WORK/<id>.json and .err
  set +e
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow "$3" \
    --workflows "$WORK/wf" --dataset "file://$DATA" --roi "$1" \
    --request "$4" --wait --json --timeout "$2" >"$WORK/$4.json" 2>"$WORK/$4.err"
  RC=$?
  set -e
}

same_tree() { # dir a, dir b: the same files (lineage/ manifests, which name
  # their tasks, and put temporaries aside), more than 8, with the same bytes
  local a=$1 b=$2 n
  (cd "$a" && find . -type f ! -name '.tmp.*' ! -path './lineage/*' | LC_ALL=C sort) >"$WORK/tree.a"
  (cd "$b" && find . -type f ! -name '.tmp.*' ! -path './lineage/*' | LC_ALL=C sort) >"$WORK/tree.b"
  n=$(wc -l <"$WORK/tree.a")
  echo "  ${a#"$WORK"/}: $n objects; ${b#"$WORK"/}: $(wc -l <"$WORK/tree.b")"
  diff "$WORK/tree.a" "$WORK/tree.b" >&2 || return 1
  [ "$n" -gt 8 ] || return 1
  while read -r f; do
    cmp -s "$a/$f" "$b/$f" || { echo "  differs: $f" >&2; return 1; }
  done <"$WORK/tree.a"
}

jq_py() { # file, python expression over d (the parsed JSON)
  "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

reason_of() { # request -> the reason of its dead letter on cnx.dlq
  topic_dump cnx.dlq | "$PY" -c 'import json, sys
for l in sys.stdin:
    d = json.loads(l)
    if d.get("task", {}).get("request") == sys.argv[1]:
        print(d["reason"]); break' "$1"
}

expect() { # request, text its dead letter's reason must contain
  local why; why=$(reason_of "$1")
  echo "  $1: $why"
  case "$why" in *"$2"*) return 0 ;; *) return 1 ;; esac
}
