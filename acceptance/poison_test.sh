#!/usr/bin/env bash
# Poison: 24 kinds of bad message (not JSON, wrong types, missing fields,
# '..' in names, digests that do not match, huge sizes, ...) sent to the
# downsample workers among good tasks. Every bad one lands in cnx.dlq with a
# reason, the workers keep running and finish every good task. The dead
# letters validate against schemas/dlq.schema.json.
source "$(dirname "$0")/lib.sh"
make_key
"$BIN/cnx-synth" --out "$WORK/synth" --shape 256,256,128 --seed 4 --quiet >/dev/null
start_broker 2
layer="file://$WORK/synth/image"
"$BIN/cnx-submit" --dry-run --layer "$layer" --request good >"$WORK/good.jsonl"
ngood=$(wc -l <"$WORK/good.jsonl")
head -n1 "$WORK/good.jsonl" >"$WORK/one.json"
"$PY" "$SRC/acceptance/poison_messages.py" "$WORK/one.json" >"$WORK/poison.bin" 2>"$WORK/kinds.txt"
nbad=$(wc -l <"$WORK/kinds.txt")

port=$((20000 + RANDOM % 20000))
# A short retry window: the retriable task below is retried in place for
# 3 s after its budget, then dead-lettered (docs/worker.md).
start_worker poison-1 --metrics-port "$port" --retry-window 3
W1=$WPID
start_worker poison-2 --retry-window 3
W2=$WPID
# Let the group settle (a rebalance while a message is handled makes Kafka
# redeliver it: at-least-once), then bad messages, then good tasks behind
# them on the same topic.
sleep 4
kcat -b "$BOOT" -P -t cnx.tasks.downsample -D '\x1e' <"$WORK/poison.bin"
"$BIN/cnx-submit" --brokers "$BOOT" --layer "$layer" --request good >/dev/null

# Distinct dead-lettered source messages (a redelivery after a rebalance
# may dead-letter one twice: at-least-once).
# A retriable failure: the output directory of one task cannot be written
# (a file stands where its scale directory should be), so every attempt
# fails with EIO; after its budget of 2 retries and the retry window it is
# dead-lettered.
cp -r "$WORK/synth/image" "$WORK/blocked"
touch "$WORK/blocked/16_16_16"
"$BIN/cnx-submit" --brokers "$BOOT" --layer "file://$WORK/blocked" --request retry \
  --roi 0,0,0,128,128,128 --retry-budget 2 >/dev/null
nbad=$((nbad + 1))

dlq_count() {
  topic_dump cnx.dlq |
    grep -o '"source":{"offset":[0-9]*,"partition":[0-9]*,"topic":"[^"]*"}' |
    sort -u | wc -l
}
good_done() {
  [ "$(topic_dump cnx.events | grep '"request":"good"' | grep '"type":"succeeded"' \
       | grep -o '"task_key":"[^"]*"' | sort -u | wc -l)" -ge "$ngood" ]
}
enough_dlq() { [ "$(dlq_count)" -ge "$nbad" ]; }
check "all $nbad bad messages dead-lettered" wait_for 120 enough_dlq
check "all $ngood good tasks done beside them" wait_for 120 good_done
check "worker 1 still running" kill -0 "$W1"
check "worker 2 still running" kill -0 "$W2"
topic_dump cnx.dlq >"$WORK/dlq.jsonl"
check "exactly $nbad distinct messages dead-lettered (got $(dlq_count); $(wc -l <"$WORK/dlq.jsonl") dead letters)" \
  [ "$(dlq_count)" -eq "$nbad" ]
check "every dead letter has a reason and validates against dlq.schema.json" \
  "$PY" - "$SRC/schemas" "$WORK/dlq.jsonl" <<'PY'
import json, os, sys
import jsonschema
from jsonschema import RefResolver
d = sys.argv[1]
store = {}
for f in os.listdir(d):
    if f.endswith(".json"):
        s = json.load(open(os.path.join(d, f))); store[s["$id"]] = s
s = json.load(open(os.path.join(d, "dlq.schema.json")))
v = jsonschema.Draft202012Validator(s, resolver=RefResolver.from_schema(s, store=store))
bad = 0
for line in open(sys.argv[2], "rb").read().split(b"\n"):
    if not line.strip():
        continue
    m = json.loads(line)
    errs = list(v.iter_errors(m))
    print("  %-10s %s" % (m["error"]["code"], m["reason"][:110]))
    if errs or not m["reason"]:
        bad += 1
        print("    INVALID:", errs[0].message if errs else "no reason")
sys.exit(1 if bad else 0)
PY
# Worker 1's Prometheus metrics: valid text exposition, counters that add up.
check "metrics on :$port parse and count what worker 1 did" "$PY" - "$port" <<'PY'
import re, sys, urllib.request
text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode()
samples = {}
# Metric names as the exposition format defines them: the worker's cnx_*
# series, and the process_* series every process serves beside them.
name = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
for line in text.splitlines():
    if line.startswith("#"):
        assert re.match(r"^# (HELP|TYPE) %s " % name, line), line
        continue
    m = re.match(r'^(%s)(\{[^}]*\})? ([0-9.eE+-]+)$' % name, line)
    assert m, "bad sample line: %r" % line
    samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
assert samples["cnx_ready"] in (0, 1), samples
assert any(k.startswith("cnx_build_info{") for k in samples), samples
assert samples["process_resident_memory_bytes"] > 0, samples
ok = samples['cnx_tasks_total{stage="downsample",outcome="succeeded"}'] + \
     samples['cnx_tasks_total{stage="downsample",outcome="dead_lettered"}']
assert ok >= 1, samples
# A redelivered task whose outputs were durable is announced, not computed:
# its own outcome, outside the duration histogram.
assert 'cnx_tasks_total{stage="downsample",outcome="already_done"}' in samples
assert samples['cnx_tasks_in_flight{stage="downsample"}'] == 0
assert samples['cnx_task_duration_seconds_count{stage="downsample"}'] == \
    samples['cnx_tasks_total{stage="downsample",outcome="succeeded"}']
print("  %d samples; succeeded %d, dead-lettered %d, already done %d" % (len(samples),
      samples['cnx_tasks_total{stage="downsample",outcome="succeeded"}'],
      samples['cnx_tasks_total{stage="downsample",outcome="dead_lettered"}'],
      samples['cnx_tasks_total{stage="downsample",outcome="already_done"}']))
PY
# Attempts 1, 2 and 3 each failed (retriable). A delivery the group
# redelivered after a refused commit repeats them (at-least-once), so the
# attempts are counted, not the events.
retried() {
  [ "$(topic_dump cnx.events | grep '"request":"retry"' | grep '"type":"failed"' \
       | grep '"retriable":true' | grep -o '"attempt":[0-9]*' | sort -u \
       | tr '\n' ' ')" = '"attempt":1 "attempt":2 "attempt":3 ' ]
}
retry_dead_lettered() {
  retried && grep '"code":"EIO"' "$WORK/dlq.jsonl" | grep -q '"attempts":3'
}
check "the retriable failure was tried 3 times (budget 2), then dead-lettered with attempts 3" \
  retry_dead_lettered
kill -TERM "$W1" "$W2"
rc1=0; wait "$W1" || rc1=$?
rc2=0; wait "$W2" || rc2=$?
check "workers exit 0 on SIGTERM ($rc1, $rc2)" [ "$rc1" -eq 0 -a "$rc2" -eq 0 ]
finish
