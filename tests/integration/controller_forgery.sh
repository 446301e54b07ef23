#!/usr/bin/env bash
# Forged claims on manifests at a live cnx-controller (issue 13, defects 1
# and 2). A `succeeded` event is believed only with a verified manifest of
# that very task (its task key and request, its stage and box, every
# output the task must write); a `reused` decision only with the verified
# manifest of the same task key that it reuses. Anything else changes no
# task and becomes a `rejected` row with the reason.
#
# Request r0 (pyramid over x 0-128 of a 256x128x128 cnx-synth dataset) is
# run by a worker; the worker stops; r1 (x 128-256: other task keys) is
# submitted and its tasks wait, released. Then, with kcat and openssl:
#   cnx.events   a `succeeded` for r1's ds1 task naming r0's ds1 manifest
#                (another task's); one naming a manifest that does not
#                exist (it waits in `held`, changing nothing); one naming
#                an envelope signed by the trusted key whose statement
#                carries r1's real task but no output of it; one whose
#                statement's task is r1's moved to another box; a
#                `reused` decision naming no
#                manifest; one naming r0's manifest (another key);
#   cnx.lineage  the two crafted envelopes (verified: the key is trusted).
# r1's task stays `released` with no manifest, every forgery is one
# `rejected` row naming why, and no succeeded attempt is recorded for it.
# A worker then runs r1 (done); r2 repeats r0's region with --reuse: its
# tasks are done as reused, each naming r0's verified manifest. Finally a
# ledger rebuilt from the topics (--rebuild) dumps exactly the live one,
# held and rejected rows included; and a copy taken back to ledger
# revision 1 is migrated to revision 4 by the controller that opens it.
# Reuses acceptance/lib.sh; about 30 s.
source "$(dirname "$0")/../../acceptance/lib.sh"
for tool in kcat sqlite3 openssl; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 1; }
done

"$BIN/cnx-synth" --out "$WORK/data" --shape 256,128,128 --quiet
start_broker 2
make_key
mkdir -p "$WORK/trust"
cp "$PUB" "$WORK/trust/workers.pem"
start_controller() {
  CNX_LOG=info "$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/ledger.db" \
    --trust "$WORK/trust" --key "$CKEY" --progress 0.5 >>"$WORK/controller.log" 2>&1 &
  CPID=$!
  PIDS+=($CPID)
}
q() { sqlite3 -readonly "$WORK/ledger.db" "$1" 2>/dev/null || true; }
reprocess() { # id, x0, x1, extra args...
  local id=$1 x0=$2 x1=$3
  shift 3
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow pyramid \
    --workflows "$SRC/workflows" --dataset "file://$WORK/data" \
    --roi "$x0,0,0,$x1,128,128" --request "$id" --timeout 120 --quiet "$@" \
    >"$WORK/$id.out" 2>"$WORK/$id.err" || echo "cnx-reprocess $id: exit $?" >&2
}
start_controller
start_worker w1
reprocess r0 0 128 --wait
check "r0 is done by a worker" [ "$(q "SELECT outcome FROM requests WHERE id = 'r0'")" = done ]
kill -TERM "$WPID"
wait "$WPID" 2>/dev/null || true

reprocess r1 128 256
released() { [ "$(q "SELECT state FROM tasks WHERE request = 'r1' AND idx = 0")" = released ]; }
check "r1 is accepted and its ds1 task released, with no worker to run it" \
  wait_for 30 released
K0=$(q "SELECT task_key FROM tasks WHERE request = 'r0' AND idx = 0")
M0=$(q "SELECT manifest FROM tasks WHERE request = 'r0' AND idx = 0")
K1=$(q "SELECT task_key FROM tasks WHERE request = 'r1' AND idx = 0")
check "r0 and r1 have different task keys" test -n "$K1" -a "$K0" != "$K1"
topic_dump cnx.tasks.downsample | grep '"request":"r1"' >"$WORK/r1-tasks.jsonl" || true

# The forged documents, built with Python's json module.
mkdir -p "$WORK/msg"
"$PY" - "$WORK" "$K0" "$M0" "$K1" <<'PYEOF' || exit 1
import copy, json, os, sys
work, k0, m0, k1 = sys.argv[1:5]
out = os.path.join(work, "msg")
task = next(t for t in map(json.loads, open(os.path.join(work, "r1-tasks.jsonl")))
            if t["roi"]["min"] == [128, 0, 0] and t["output"]["scale"] == "16_16_16")
NOW = "2026-01-01T00:00:00.000Z"


def statement(t, subjects):
    return {"_type": "https://in-toto.io/Statement/v1", "subject": subjects,
            "predicateType": "https://slsa.dev/provenance/v1",
            "predicate": {"buildDefinition": {
                "buildType": "https://cnx.dev/cnx-worker/v1",
                "externalParameters": {"taskKey": k1, "stage": "downsample",
                                       "kernelVersion": 1, "task": t}},
                "runDetails": {"builder": {"id": "cnx-worker:forger"},
                               "metadata": {"invocationId": k1 + "/1"}}}}


# r1's real task, but naming only an object of r0 as its output.
other = {"name": "file://" + os.path.join(work, "data", "pyramid/v1/16_16_16/0-64_0-64_0-64"),
         "digest": {"sha256": "0" * 64}}
docs = {"stmt-no-outputs": statement(task, [other])}
# r1's task moved to another box (taskKey and request left as they were).
moved = copy.deepcopy(task)
moved["roi"] = {"min": [0, 0, 0], "max": [128, 128, 128]}
docs["stmt-moved"] = statement(moved, [other])


def event(manifest):
    return {"schema": "cnx.event/1", "type": "succeeded", "stage": "downsample",
            "task_key": k1, "request": "r1", "attempt": 1, "worker": "forger",
            "time": NOW, "roi": task["roi"],
            "timings": {"read_s": 0, "kernel_s": 0, "write_s": 0, "total_s": 0},
            "bytes_read": 0, "bytes_written": 0, "voxels": 0, "outputs": 1,
            "cpu_s": 0, "manifest": manifest}


def control(**kw):
    m = {"schema": "cnx.control/1", "type": "reused", "request": "r1",
         "stage": "ds1", "index": 0, "task_key": k1, "attempt": 0,
         "lane": "bulk", "time": NOW, "reason": "forged"}
    m.update(kw)
    return m


docs["ev-other-task"] = event(m0)
docs["ev-unknown"] = event("sha256:" + "e" * 64)
docs["reused-none"] = control()
docs["reused-other-key"] = control(manifest=m0)
docs["event-template"] = event("MANIFEST")
for name, doc in docs.items():
    with open(os.path.join(out, name), "w") as f:
        f.write(json.dumps(doc, separators=(",", ":"), sort_keys=True))
PYEOF

# A DSSE envelope of a statement file signed with the trusted key, made
# with the openssl CLI only (as tests/integration/controller_poison.sh).
TYPE=application/vnd.in-toto+json
sign_envelope() { # statement file, envelope file
  local d=$WORK/sign kid
  mkdir -p "$d"
  {
    printf 'DSSEv1 %d %s %d ' "${#TYPE}" "$TYPE" "$(wc -c <"$1")"
    cat "$1"
  } >"$d/pae"
  openssl pkeyutl -sign -inkey "$KEY" -rawin -in "$d/pae" -out "$d/sig" || return 1
  kid=sha256:$(openssl pkey -pubin -in "$PUB" -outform DER | sha256sum | cut -d' ' -f1)
  printf '{"payload":"%s","payloadType":"%s","signatures":[{"keyid":"%s","sig":"%s"}]}' \
    "$(base64 -w0 <"$1")" "$TYPE" "$kid" "$(base64 -w0 <"$d/sig")" >"$2"
}
produce_file() { # topic, key, file
  kcat -P -b "$BOOT" -t "$1" -k "$2" "$3" 2>>"$WORK/kcat.err" ||
    echo "kcat -P to $1 failed: $(cat "$WORK/kcat.err")" >&2
}
for s in no-outputs moved; do
  sign_envelope "$WORK/msg/stmt-$s" "$WORK/msg/env-$s.json"
  digest=sha256:$(sha256sum <"$WORK/msg/env-$s.json" | cut -d' ' -f1)
  sed "s/MANIFEST/$digest/" "$WORK/msg/event-template" >"$WORK/msg/ev-$s"
  eval "M_${s//-/_}=\$digest"
  produce_file cnx.lineage "$K1" "$WORK/msg/env-$s.json"
done
lineage_in() { [ "$(q "SELECT count(*) FROM lineage WHERE verified = 1 AND
  envelope_digest IN ('$M_no_outputs', '$M_moved')")" = 2 ]; }
check "the crafted envelopes are lineage rows, verified (the key is trusted)" \
  wait_for 20 lineage_in
# The claims carry valid signatures (events the workers' key, decisions
# the controller's): what is tested here is the check past the signature
# (tests/integration/topic_forgery.sh tests the signatures themselves).
for f in ev-other-task ev-unknown ev-no-outputs ev-moved; do
  produce_signed cnx.events "$K1" "$WORK/msg/$f" "$KEY"
done
for f in reused-none reused-other-key; do
  produce_signed cnx.events "$K1" "$WORK/msg/$f" "$CKEY"
done
all_in() {
  [ "$(q "SELECT count(*) FROM rejected WHERE topic = 'cnx.events'")" = 5 ] &&
    [ "$(q "SELECT count(*) FROM held")" = 1 ]
}
check "five forgeries rejected, the claim on an unknown manifest held" wait_for 20 all_in
sleep 1 # a progress tick: nothing may have moved meanwhile

check "r1's task is still released, with no manifest" \
  [ "$(q "SELECT state || '|' || coalesce(manifest, '-') || '|' || reused
          FROM tasks WHERE request = 'r1' AND idx = 0")" = "released|-|0" ]
check "no succeeded attempt recorded for it" \
  [ "$(q "SELECT count(*) FROM attempts WHERE task_key = '$K1' AND state = 'succeeded'")" = 0 ]
check "no reused decision recorded for it" \
  [ "$(q "SELECT count(*) FROM releases WHERE request = 'r1' AND type = 'reused'")" = 0 ]
q "SELECT error FROM rejected WHERE topic = 'cnx.events' ORDER BY offset" >"$WORK/rejected.txt"
rejected_with() { # substrings that one rejected row holds together
  "$PY" - "$WORK/rejected.txt" "$@" <<'PYEOF'
import sys
rows = open(sys.argv[1]).read().splitlines()
want = sys.argv[2:]
hits = [r for r in rows if all(w in r for w in want)]
if len(hits) != 1:
    print(f"{len(hits)} rejected rows hold {want}", file=sys.stderr)
    sys.exit(1)
PYEOF
}
check "succeeded with another task's manifest: rejected, naming both tasks" \
  rejected_with "succeeded: manifest $M0 is of task $K0 in request r0" "not of this task ($K1 in request r1)"
check "succeeded with a manifest missing the task's output: rejected, naming it" \
  rejected_with "succeeded: manifest $M_no_outputs does not name 1 of the 1 outputs" \
  "pyramid/v1/16_16_16/64-128_0-64_0-64"
check "succeeded with a manifest of another box: rejected, naming both boxes" \
  rejected_with "succeeded: manifest $M_moved is of stage downsample box 0-128_0-128_0-128" \
  "this task is stage downsample box 128-256_0-128_0-128"
check "reused without a manifest: rejected" \
  rejected_with "control: reused: manifest: required"
check "reused naming another key's manifest: rejected, naming both keys" \
  rejected_with "control: reused: manifest $M0 is of task $K0, not of this task ($K1)"
check "the held claim is the one on the unknown manifest" \
  [ "$(q "SELECT manifest FROM held")" = "sha256:$(printf 'e%.0s' $(seq 64))" ]

# The real work still completes, and a real reuse is accepted.
start_worker w2
done_r1() { [ "$(q "SELECT outcome FROM requests WHERE id = 'r1'")" = done ]; }
check "r1 is done once a worker runs it" wait_for 60 done_r1
check "r1's ds1 task is done by a verified manifest of its own" \
  [ "$(q "SELECT count(*) FROM tasks t JOIN lineage l ON l.envelope_digest = t.manifest
          AND l.verified = 1 AND l.task_key = t.task_key AND l.request = 'r1'
          WHERE t.request = 'r1' AND t.idx = 0 AND t.state = 'done'")" = 1 ]
reprocess r2 0 128 --reuse --wait
check "r2 (--reuse of r0's region) is done" \
  [ "$(q "SELECT outcome FROM requests WHERE id = 'r2'")" = done ]
check "r2's tasks are reused, each naming r0's verified manifest of its key" \
  [ "$(q "SELECT count(*) || '|' || sum(t.reused) || '|' || sum(t.manifest = u.manifest)
          FROM tasks t JOIN tasks u ON u.request = 'r0' AND u.idx = t.idx
          WHERE t.request = 'r2' AND t.state = 'done'")" = "2|2|2" ]
check "PRAGMA integrity_check: ok" [ "$(q "PRAGMA integrity_check")" = ok ]

# The same rows from the log alone.
kill -TERM "$CPID"
crc=0
wait "$CPID" || crc=$?
check "the controller stops with exit 0 (got $crc)" [ "$crc" -eq 0 ]
check "no sanitizer report from the controller" \
  bash -c '! grep -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$1"' _ "$WORK/controller.log"
sqlite3 "$WORK/ledger.db" .dump >"$WORK/live.sql"
"$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/rebuilt.db" --trust "$WORK/trust" --key "$CKEY" \
  --rebuild >>"$WORK/controller.log" 2>&1
sqlite3 "$WORK/rebuilt.db" .dump >"$WORK/rebuilt.sql"
check "a rebuilt ledger dumps the live one ($(wc -l <"$WORK/live.sql") lines)" \
  cmp "$WORK/live.sql" "$WORK/rebuilt.sql"

# A ledger of revision 1 (no releases.manifest, no held table) is brought
# up to revision 2 by the controller that opens it: its reused rows take
# the manifest of the task done before under the same key.
cp "$WORK/rebuilt.db" "$WORK/old.db"
sqlite3 "$WORK/old.db" "ALTER TABLE releases DROP COLUMN manifest; DROP TABLE held;
  ALTER TABLE lineage DROP COLUMN archive; DROP TABLE archives;
  DROP INDEX attempts_by_stage; DELETE FROM meta WHERE key = 'revision'"
crc=0
CNX_LOG=info "$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/old.db" \
  --trust "$WORK/trust" --key "$CKEY" --idle-exit 1 >"$WORK/migrate.log" 2>&1 || crc=$?
check "a revision-1 ledger opens (exit $crc) and says it is migrated" \
  grep -q "revision 1 -> 2" "$WORK/migrate.log"
check "  it is revision 4, with the held table" \
  [ "$(sqlite3 -readonly "$WORK/old.db" "SELECT value FROM meta WHERE key = 'revision'")|$(
      sqlite3 -readonly "$WORK/old.db" "SELECT count(*) FROM held")" = "4|0" ]
check "  r2's reused rows name r0's manifests" \
  [ "$(sqlite3 -readonly "$WORK/old.db" "SELECT count(*) FROM releases r JOIN tasks u
        ON u.request = 'r0' AND u.task_key = r.task_key AND u.manifest = r.manifest
        WHERE r.request = 'r2' AND r.type = 'reused'")" = 2 ]
if [ "$failed" -ne 0 ]; then
  echo "--- rejected:"; cat "$WORK/rejected.txt"
  echo "--- controller log:"; tail -n 30 "$WORK/controller.log"
  diff "$WORK/live.sql" "$WORK/rebuilt.sql" | head -20
fi
finish
