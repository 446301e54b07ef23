#!/usr/bin/env bash
# Kill test: cnx-broker and 3 cnx-downsample workers downsample a
# 512x512x256 cnx-synth image in 128^3 tasks while a random worker is
# kill -9'd and restarted 5 times. Then: every task has exactly one
# output set, the outputs are byte-identical to a clean single-worker run,
# every output object is named by a manifest, and every manifest verifies
# with the openssl CLI alone (acceptance/verify_openssl.sh).
source "$(dirname "$0")/lib.sh"
make_key
"$BIN/cnx-synth" --out "$WORK/synth" --shape 512,512,256 --seed 7 --quiet >/dev/null
cp -r "$WORK/synth/image" "$WORK/clean"
cp -r "$WORK/synth/image" "$WORK/chaos"
start_broker 6

# The reference: one worker, no faults.
"$BIN/cnx-submit" --brokers "$BOOT" --layer "file://$WORK/clean" --request clean >/dev/null
start_worker clean-1 --idle-exit 4
wait "$WPID"
ntasks=$("$BIN/cnx-submit" --dry-run --layer "file://$WORK/clean" --scale 8_8_8 | wc -l)
scale=$(ls "$WORK/clean" | grep -v '^8_8_8$' | grep -v info | grep -v '^lineage$')
# A static member does not leave its group on close, and the mock does not
# know static members: clean-1 stays in cnx.downsample until its session
# (6 s) ends. Let it, so that the run under fire starts with one rebalance.
sleep 7

# The run under fire: 3 workers, each task slowed so the run lasts.
"$BIN/cnx-submit" --brokers "$BOOT" --layer "file://$WORK/chaos" --request chaos --reverse >/dev/null
declare -A WP
for i in 1 2 3; do start_worker "chaos-$i" --slow-ms 3500; WP[$i]=$WPID; done
done_chaos() {
  [ "$(topic_dump cnx.events | grep '"request":"chaos"' | grep '"type":"succeeded"' \
       | grep -o '"task_key":"[^"]*"' | sort -u | wc -l)" -ge "$ntasks" ]
}
# Five kills, 7-9 s apart, then let the run finish. Each kill costs the
# group a rebalance once the dead member's session (6 s) times out; kills
# closer together than that overlap rebalances, which librdkafka 2.0.2's
# mock cluster (the test broker) does not always survive: its coordinator
# was seen to wedge the group for minutes (docs/kafka.md). A real broker
# is not the subject here; the worker's behaviour under kill -9 is.
kills=0
end=$((SECONDS + 300))
while ! done_chaos && [ $SECONDS -lt $end ]; do
  if [ "$kills" -ge 5 ]; then sleep 1; continue; fi
  sleep "$(awk -v r=$RANDOM 'BEGIN{printf "%.1f", 7 + (r % 21) / 10}')"
  done_chaos && break
  i=$((RANDOM % 3 + 1))
  kill -9 "${WP[$i]}" 2>/dev/null || true
  wait "${WP[$i]}" 2>/dev/null || true
  kills=$((kills + 1))
  start_worker "chaos-$i" --slow-ms 3500
  WP[$i]=$WPID
done
for i in 1 2 3; do kill -TERM "${WP[$i]}" 2>/dev/null || true; done
for i in 1 2 3; do wait "${WP[$i]}" 2>/dev/null || true; done

check "workers were kill -9'd $kills times during the run (>= 5)" [ "$kills" -ge 5 ]
check "all $ntasks tasks finished under fire" done_chaos
topic_dump cnx.events >"$WORK/events.jsonl"
topic_dump cnx.lineage >"$WORK/lineage.jsonl"
check "outputs byte-identical to the clean single-worker run" \
  diff <(cd "$WORK/clean/$scale" && sha256sum * | sort) <(cd "$WORK/chaos/$scale" && sha256sum * | sort)
check "run check (one output set per task, manifests name every object)" \
  "$PY" "$SRC/acceptance/run_check.py" --events "$WORK/events.jsonl" \
  --lineage "$WORK/lineage.jsonl" --request chaos --layer "$WORK/chaos" \
  --scale "$scale" --tasks "$ntasks" --schemas "$SRC/schemas"
mkdir -p "$WORK/envelopes"
split -l 1 -d -a 4 "$WORK/lineage.jsonl" "$WORK/envelopes/env-"
check "every envelope verifies with the openssl CLI" \
  bash "$SRC/acceptance/verify_openssl.sh" "$PUB" "$WORK"/envelopes/env-* >"$WORK/verify.out"
# One changed byte in one payload must make the openssl check fail.
"$PY" - "$WORK/envelopes/env-0000" "$WORK/tampered.json" <<'PY'
import base64, json, sys
e = json.load(open(sys.argv[1]))
p = bytearray(base64.b64decode(e["payload"]))
p[len(p) // 2] ^= 0x01
e["payload"] = base64.b64encode(bytes(p)).decode()
json.dump(e, open(sys.argv[2], "w"))
PY
tampered_fails() { ! bash "$SRC/acceptance/verify_openssl.sh" "$PUB" "$WORK/tampered.json" >/dev/null 2>&1; }
check "a payload with one byte changed fails the openssl check" tampered_fails
# kcat reads every topic the run used; task messages validate too.
topic_dump cnx.tasks.downsample >"$WORK/tasks.jsonl"
check "kcat read $(wc -l <"$WORK/tasks.jsonl") tasks, $(wc -l <"$WORK/events.jsonl") events, $(wc -l <"$WORK/lineage.jsonl") envelopes" \
  [ -s "$WORK/tasks.jsonl" -a -s "$WORK/events.jsonl" -a -s "$WORK/lineage.jsonl" ]
check "every task message validates against task.schema.json" \
  "$PY" -c "
import json, sys, jsonschema
v = jsonschema.Draft202012Validator(json.load(open('$SRC/schemas/task.schema.json')))
bad = [l for l in open('$WORK/tasks.jsonl') if l.strip() and not v.is_valid(json.loads(l))]
sys.exit(1 if bad else 0)"
tmp=$(find "$WORK/chaos" -name '.tmp.*' | wc -l)
echo "note: $tmp temporary file(s) left by kill -9 (never objects; see docs/operations.md)"
finish
