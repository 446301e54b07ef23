#!/usr/bin/env bash
# The forgery suite (issue 13): for every topic the controller or
# cnx-reprocess reads and every message type on it, a forged (unsigned),
# a re-signed-with-an-untrusted-key, a signed-by-the-wrong-party, an
# altered, a replayed and a cross-task (or cross-request) message. Each
# must change nothing, leave a `rejected` row saying why (the lineage
# topic: an unverified row), and leave the ledger verifiable by cnx-verify;
# cnx-reprocess --wait must ignore forged request states. Signatures here
# are made with the openssl CLI only (acceptance/lib.sh sign_message), so
# the scheme of docs/security.md is checked independently of our code.
#
# Request r0 (pyramid over x 0-128 of a 256x128x128 cnx-synth dataset) is
# run by a worker; the worker stops; r1 (x 128-256) is submitted by a
# cnx-reprocess --wait that stays running, and its tasks wait, released.
# Real messages of r0 are captured with kcat -J (payload, key, headers)
# for the replays. After the forgeries, r1's first task is still released,
# r0 is as it was, every forgery is one rejected row with its reason, and
# cnx-reprocess is still waiting; a worker then finishes r1, cnx-reprocess
# exits 0, cnx-verify finds nothing, and a ledger rebuilt from the topics
# dumps exactly the live one. Reuses acceptance/lib.sh; about 40 s.
source "$(dirname "$0")/../../acceptance/lib.sh"
for tool in kcat sqlite3 openssl; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 1; }
done

"$BIN/cnx-synth" --out "$WORK/data" --shape 256,128,128 --quiet
start_broker 2
make_key
"$BIN/cnx-keygen" --out "$WORK/untrusted" >/dev/null
UKEY=$WORK/untrusted/cnx.key
mkdir -p "$WORK/trust"
cp "$PUB" "$WORK/trust/workers.pem"
CNX_LOG=info "$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/ledger.db" \
  --trust "$WORK/trust" --key "$CKEY" --progress 0.5 >>"$WORK/controller.log" 2>&1 &
CPID=$!
PIDS+=($CPID)
q() { sqlite3 -readonly "$WORK/ledger.db" "$1" 2>/dev/null || true; }
reprocess() { # id, x0, x1, extra args...
  local id=$1 x0=$2 x1=$3
  shift 3
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow pyramid \
    --workflows "$SRC/workflows" --dataset "file://$WORK/data" \
    --roi "$x0,0,0,$x1,128,128" --request "$id" --timeout 180 "$@" \
    >"$WORK/$id.out" 2>"$WORK/$id.err"
}
start_worker w1
reprocess r0 0 128 --wait --quiet || echo "cnx-reprocess r0: exit $?" >&2
check "r0 is done by a worker" [ "$(q "SELECT outcome FROM requests WHERE id = 'r0'")" = done ]
kill -TERM "$WPID"
wait "$WPID" 2>/dev/null || true
R0_BEFORE=$(q "SELECT group_concat(state || ':' || manifest, ',') FROM tasks WHERE request = 'r0' ORDER BY idx")

reprocess r1 128 256 --wait &
RPID=$!
PIDS+=($RPID)
released() { [ "$(q "SELECT state FROM tasks WHERE request = 'r1' AND idx = 0")" = released ]; }
check "r1 is accepted and its first task released, with no worker to run it" \
  wait_for 30 released
K1=$(q "SELECT task_key FROM tasks WHERE request = 'r1' AND idx = 0")
M0=$(q "SELECT manifest FROM tasks WHERE request = 'r0' AND idx = 0")
for t in cnx.events cnx.requests cnx.lineage; do
  timeout 30 kcat -b "$BOOT" -C -t "$t" -o beginning -e -q -J 2>/dev/null
done >"$WORK/log.jsonl"

# The forged bodies and the captured real messages, one directory each:
# body, key, and (for replays) the captured signature.
mkdir -p "$WORK/f"
"$PY" - "$WORK" "$K1" "$M0" <<'PYEOF' || exit 1
import json, os, sys
work, k1, m0 = sys.argv[1:4]
out = os.path.join(work, "f")
log = [json.loads(l) for l in open(os.path.join(work, "log.jsonl"))]


def headers(m):
    h = m.get("headers") or []
    return dict(zip(h[0::2], h[1::2]))


def first(topic, pred):
    for m in log:
        if m["topic"] != topic or m.get("payload") is None:
            continue
        d = json.loads(m["payload"])
        if pred(d):
            return m, d
    sys.exit(f"no {topic} message found for a replay")


def put(name, key, body, sig=None):
    d = os.path.join(out, name)
    os.makedirs(d)
    open(os.path.join(d, "key"), "w").write(key)
    open(os.path.join(d, "body"), "w").write(body)
    if sig is not None:
        open(os.path.join(d, "sig"), "w").write(sig)


NOW = "2026-01-01T00:00:00.000Z"
ev, evd = first("cnx.events", lambda d: d.get("schema") == "cnx.event/1"
                and d["type"] == "succeeded" and d["request"] == "r0")
ct, ctd = first("cnx.events", lambda d: d.get("schema") == "cnx.control/1"
                and d["type"] == "released" and d["request"] == "r0")
st, std = first("cnx.requests", lambda d: d.get("schema") == "cnx.request-state/1"
                and d["type"] == "finished" and d["request"] == "r0")
rq, rqd = first("cnx.requests", lambda d: d.get("schema") == "cnx.request/1"
                and d["request"] == "r0")
ln = next(m for m in log if m["topic"] == "cnx.lineage")

claim = dict(evd, task_key=k1, request="r1", worker="forger", time=NOW, manifest=m0)
claim.pop("run", None)
reuse = dict(ctd, type="reused", request="r1", task_key=k1, index=0, time=NOW,
             manifest=m0, reason="forged")
finished = dict(std, request="r1", time=NOW)
canon = lambda d: json.dumps(d, separators=(",", ":"), sort_keys=True)

# Forged bodies (signed below by the script, or not).
put("ev-unsigned", k1, canon(claim))
put("ev-untrusted", k1, canon(claim))
put("ev-controller", k1, canon(claim))
put("ctl-unsigned", k1, canon(reuse))
put("ctl-untrusted", k1, canon(reuse))
put("ctl-worker", k1, canon(reuse))
put("st-unsigned", "r1", canon(finished))
put("st-untrusted", "r1", canon(finished))
put("st-worker", "r1", canon(finished))
# Real messages replayed as they are, moved to another task or request,
# or altered under their signature.
put("ev-replayed", ev["key"], ev["payload"], headers(ev)["cnx-sig"])
put("ev-moved", k1, ev["payload"], headers(ev)["cnx-sig"])
put("ev-altered", ev["key"], ev["payload"].replace('"worker":"', '"worker":"x'),
    headers(ev)["cnx-sig"])
put("ctl-replayed", ct["key"], ct["payload"], headers(ct)["cnx-sig"])
put("ctl-moved", k1, ct["payload"], headers(ct)["cnx-sig"])
put("st-replayed", st["key"], st["payload"], headers(st)["cnx-sig"])
put("st-moved", "r1", st["payload"], headers(st)["cnx-sig"])
put("req-replayed", rq["key"], rq["payload"])
put("lin-replayed", ln["key"], ln["payload"])
PYEOF

send() { # name, topic, [signing key]: sign the body (or use the captured sig)
  local d=$WORK/f/$1 h=()
  if [ -f "$d/sig" ]; then h=(-H "cnx-sig=$(cat "$d/sig")")
  elif [ -n "${3:-}" ]; then
    h=(-H "cnx-sig=$(sign_message "$3" "$2" "$(cat "$d/key")" "$d/body")" -H "cnx-keyid=$(key_id "$3")")
  fi
  kcat -P -b "$BOOT" -t "$2" -k "$(cat "$d/key")" "${h[@]}" "$d/body" 2>>"$WORK/kcat.err" ||
    echo "kcat -P $1 failed: $(cat "$WORK/kcat.err")" >&2
}
send ev-unsigned cnx.events
send ev-untrusted cnx.events "$UKEY"
send ev-controller cnx.events "$CKEY"
send ev-replayed cnx.events
send ev-moved cnx.events
send ev-altered cnx.events
send ctl-unsigned cnx.events
send ctl-untrusted cnx.events "$UKEY"
send ctl-worker cnx.events "$KEY"
send ctl-replayed cnx.events
send ctl-moved cnx.events
send st-unsigned cnx.requests
send st-untrusted cnx.requests "$UKEY"
send st-worker cnx.requests "$KEY"
send st-replayed cnx.requests
send st-moved cnx.requests
send req-replayed cnx.requests
send lin-replayed cnx.lineage
# A lineage envelope signed by an untrusted key, made with openssl.
TYPE=application/vnd.in-toto+json
printf '{"_type":"https://in-toto.io/Statement/v1","subject":[]}' >"$WORK/stmt"
{ printf 'DSSEv1 %d %s %d ' "${#TYPE}" "$TYPE" "$(stat -c %s "$WORK/stmt")"; cat "$WORK/stmt"; } >"$WORK/pae"
openssl pkeyutl -sign -inkey "$UKEY" -rawin -in "$WORK/pae" -out "$WORK/sig"
printf '{"payload":"%s","payloadType":"%s","signatures":[{"keyid":"x","sig":"%s"}]}' \
  "$(base64 -w0 <"$WORK/stmt")" "$TYPE" "$(base64 -w0 <"$WORK/sig")" >"$WORK/env.json"
kcat -P -b "$BOOT" -t cnx.lineage -k "$K1" "$WORK/env.json" 2>>"$WORK/kcat.err"

all_in() {
  [ "$(q "SELECT count(*) FROM rejected WHERE topic IN ('cnx.events', 'cnx.requests')")" -ge 17 ] &&
    [ "$(q "SELECT count(*) FROM lineage WHERE verified = 0")" -ge 1 ]
}
check "every forgery on cnx.events and cnx.requests is rejected, the untrusted envelope unverified" \
  wait_for 30 all_in
sleep 1.5 # progress ticks: nothing may have moved meanwhile
q "SELECT topic || ' ' || error FROM rejected ORDER BY topic, offset" >"$WORK/rejected.txt"
rejected_with() { # how many rows, then substrings each of them holds
  "$PY" - "$WORK/rejected.txt" "$@" <<'PYEOF'
import sys
rows = open(sys.argv[1]).read().splitlines()
n, want = int(sys.argv[2]), sys.argv[3:]
hits = [r for r in rows if all(w in r for w in want)]
if len(hits) != n:
    print(f"{len(hits)} rejected rows (want {n}) hold {want}", file=sys.stderr)
    sys.exit(1)
PYEOF
}
check "events: unsigned rejected" \
  rejected_with 1 "cnx.events" "not a trusted worker's: unsigned"
check "events: untrusted key and the controller's key rejected, naming the key" \
  rejected_with 2 "cnx.events" "not a trusted worker's: signed by key" "not trusted for cnx.events"
check "decisions: unsigned rejected" \
  rejected_with 1 "cnx.events" "not the controller's: unsigned"
check "decisions: an untrusted key and a worker's key rejected" \
  rejected_with 2 "cnx.events" "not the controller's: signed by key"
check "events and decisions moved to another task, and an altered event: do not verify" \
  rejected_with 3 "cnx.events" "signature does not verify"
check "events and decisions replayed: rejected, naming the first" \
  rejected_with 2 "cnx.events" "replay: the same signed message was applied at cnx.events["
check "request states: unsigned rejected" \
  rejected_with 1 "cnx.requests" "not the controller's: unsigned"
check "request states: an untrusted key and a worker's key rejected" \
  rejected_with 2 "cnx.requests" "not the controller's: signed by key"
check "request states: moved to another request: does not verify" \
  rejected_with 1 "cnx.requests" "signature does not verify"
check "request states: replayed: rejected" \
  rejected_with 1 "cnx.requests" "replay: the same signed message was applied at cnx.requests["
check "requests (unsigned by design): a replayed one is rejected, its id taken" \
  rejected_with 1 "cnx.requests" "request r0: the id is taken"

check "r1's first task is still released, with no manifest and no success" \
  [ "$(q "SELECT state || '|' || coalesce(manifest, '-') FROM tasks WHERE request = 'r1' AND idx = 0")|$(
      q "SELECT count(*) FROM attempts WHERE request = 'r1' AND state = 'succeeded'")" = "released|-|0" ]
check "no reused decision for r1; r1 still accepted" \
  [ "$(q "SELECT count(*) FROM releases WHERE request = 'r1' AND type = 'reused'")|$(
      q "SELECT state FROM requests WHERE id = 'r1'")" = "0|accepted" ]
check "r0 is as it was" \
  [ "$(q "SELECT group_concat(state || ':' || manifest, ',') FROM tasks WHERE request = 'r0' ORDER BY idx")" = "$R0_BEFORE" ]
check "cnx-reprocess --wait for r1 ignored the forged finished states (still running)" \
  kill -0 "$RPID"

# Tasks: a worker given the controller's key runs only tasks it signed. A
# copy of r1's first task, unsigned, is dead-lettered, not run.
timeout 30 kcat -b "$BOOT" -C -t cnx.tasks.downsample -o beginning -e -q 2>/dev/null |
  grep '"request":"r1"' | head -n1 >"$WORK/task.json"
produce_signed cnx.tasks.downsample "$K1" "$WORK/task.json"
start_worker w2 --controller-key "$CPUB"
forged_task_dlq() { topic_dump cnx.dlq | grep -q "is not the controller's: unsigned"; }
check "tasks: an unsigned task is dead-lettered by a worker that checks" \
  wait_for 30 forged_task_dlq
rrc=0
wait "$RPID" || rrc=$?
check "a worker finishes r1 and cnx-reprocess exits 0 (got $rrc)" [ "$rrc" -eq 0 ]
check "cnx-reprocess said it skipped answers not signed by the controller" \
  grep -q "unsigned" "$WORK/r1.err"
set +e
"$BIN/cnx-verify" --trust "$WORK/trust" --repo "$SRC" --ledger "$WORK/ledger.db" \
  --layer "file://$WORK/data/pyramid/v1" >"$WORK/verify.out" 2>&1
vrc=$?
set -e
check "cnx-verify finds nothing (exit $vrc: $(tail -n1 "$WORK/verify.out"))" [ "$vrc" -eq 0 ]

kill -TERM "$CPID"
crc=0
wait "$CPID" || crc=$?
check "the controller stops with exit 0 (got $crc)" [ "$crc" -eq 0 ]
check "no sanitizer report from the controller" \
  bash -c '! grep -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$1"' _ "$WORK/controller.log"
sqlite3 "$WORK/ledger.db" .dump | grep -v "^INSERT INTO meta VALUES('cluster_id'" >"$WORK/live.sql"
"$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/rebuilt.db" --trust "$WORK/trust" \
  --key "$CKEY" --rebuild >>"$WORK/controller.log" 2>&1
sqlite3 "$WORK/rebuilt.db" .dump | grep -v "^INSERT INTO meta VALUES('cluster_id'" >"$WORK/rebuilt.sql"
check "a rebuilt ledger dumps the live one, rejected rows included ($(wc -l <"$WORK/live.sql") lines)" \
  cmp "$WORK/live.sql" "$WORK/rebuilt.sql"
if [ "$failed" -ne 0 ]; then
  echo "--- rejected:"; cat "$WORK/rejected.txt"
  echo "--- r1.err:"; tail -n 20 "$WORK/r1.err"
  echo "--- controller log:"; tail -n 30 "$WORK/controller.log"
  diff "$WORK/live.sql" "$WORK/rebuilt.sql" | head -20
fi
finish
