#!/usr/bin/env bash
# `cnx-controller archive` (docs/ledger.md, "Archiving a request"): two
# pyramid requests run through a broker, the controller and a worker;
# req-a is archived while the controller runs. Checked with sqlite3, with
# acceptance/ledger_check.py (Python's own hashlib: the live chain with its
# stubs, the archive's rows against those stubs) and with cnx-verify:
# the rows moved, both chains hold, the archive verifies as the live
# ledger did, the live ledger still verifies req-b, an edited archive row
# is found, an unfinished request is refused, a second run changes
# nothing, a run stopped between writing the archive and changing the
# live ledger finishes when run again, and the controller goes on (a
# request after the archive completes). Reuses acceptance/lib.sh; ~40 s.
source "$(dirname "$0")/../../acceptance/lib.sh"
for tool in kcat sqlite3; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done

"$BIN/cnx-synth" --out "$WORK/data" --shape 256,256,128 --quiet
start_broker 3
start_controller
start_worker w1
L=$WORK/ledger.db
A=$WORK/arc/req-a.db
mkdir -p "$WORK/arc"
q() { sqlite3 -readonly "$1" "$2"; }
run() { # id [--no-wait]: a pyramid request over the whole volume
  local id=$1 wait=--wait
  [ "${2:-}" = --no-wait ] && wait=
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow pyramid \
    --workflows "$SRC/workflows" --dataset "file://$WORK/data" --request "$id" \
    --roi 0,0,0,256,256,128 $wait --quiet --timeout 120 >"$WORK/$id.out" 2>"$WORK/$id.err"
}
archive() { # args -> RC, $WORK/arc.out, $WORK/arc.err
  RC=0
  "$BIN/cnx-controller" archive "$@" >"$WORK/arc.out" 2>"$WORK/arc.err" || RC=$?
}
verify() { # ledger, request -> exit status of cnx-verify
  "$BIN/cnx-verify" --trust "$WORK/trust" --ledger "$1" --request "$2" --quiet \
    >"$WORK/verify.out" 2>&1
}

check "req-a done" run req-a
check "req-b done" run req-b
ta=$(q "$L" "SELECT count(*) FROM tasks WHERE request = 'req-a'")
la=$(q "$L" "SELECT count(*) FROM lineage WHERE request = 'req-a'")
aa=$(q "$L" "SELECT count(*) FROM attempts WHERE request = 'req-a'")
echo "req-a: $ta tasks, $la lineage rows, $aa attempts"
check "req-a has tasks and lineage rows" eval '[ "$ta" -gt 0 ] && [ "$la" -gt 0 ]'
check "cnx-verify passes req-a on the live ledger before" verify "$L" req-a

# An unfinished request: no worker, its tasks stay released.
kill -TERM "$WPID"; wait "$WPID" 2>/dev/null || true
run req-c --no-wait || true
state_is() { [ "$(q "$L" "SELECT state FROM requests WHERE id = '$1'")" = "$2" ]; }
wait_for 30 state_is req-c accepted
archive --ledger "$L" --request req-c --out "$WORK/arc/req-c.db"
check "an unfinished request is refused (exit 1, one line)" \
  eval '[ "$RC" -eq 1 ] && [ "$(wc -l <"$WORK/arc.err")" -eq 1 ] && grep -q "not finished" "$WORK/arc.err"'
check "  and no archive written" eval '[ ! -e "$WORK/arc/req-c.db" ] && [ ! -e "$WORK/arc/req-c.db.tmp" ]'
archive --ledger "$L" --request nope --out "$WORK/arc/nope.db"
check "an unknown request is refused (exit 1)" eval '[ "$RC" -eq 1 ] && grep -q "no request nope" "$WORK/arc.err"'
archive --ledger "$L" --request req-a
check "a missing --out is a usage error (exit 2)" [ "$RC" -eq 2 ]

# The snapshot of the ledger before, for the interrupted run below.
sqlite3 "$L" ".backup '$WORK/before.db'"
sqlite3 "$L" ".backup '$WORK/before2.db'"

archive --ledger "$L" --request req-a --out "$A"
check "req-a archived (exit $RC)" eval '[ "$RC" -eq 0 ] && [ -s "$A" ] && [ ! -e "$A.tmp" ]'
cat "$WORK/arc.out" "$WORK/arc.err"
for t in requests stages tasks releases attempts slo_events; do
  check "live $t has no row of req-a" \
    [ "$(q "$L" "SELECT count(*) FROM $t WHERE $( [ $t = requests ] && echo id || echo request) = 'req-a'")" = 0 ]
done
check "the archive holds req-a's $ta tasks and $aa attempts" \
  [ "$(q "$A" "SELECT count(*) FROM tasks WHERE request = 'req-a'")|$(q "$A" "SELECT count(*) FROM attempts")" = "$ta|$aa" ]
check "the archive holds its $la lineage rows, envelopes included" \
  [ "$(q "$A" "SELECT count(*) FROM lineage WHERE request = 'req-a' AND length(envelope) > 100")" = "$la" ]
check "the live ledger keeps $la stubs without envelopes, naming the archive" \
  [ "$(q "$L" "SELECT count(*) FROM lineage WHERE archive = '$A' AND envelope = '' AND request IS NULL")" = "$la" ]
check "the archive's rows are the stubs' rows (partition, offset, digests)" \
  [ "$(q "$A" "SELECT group_concat(partition || offset || row_digest || prev, ',') FROM
        (SELECT * FROM lineage ORDER BY partition, offset)")" = \
    "$(q "$L" "SELECT group_concat(partition || offset || row_digest || prev, ',') FROM
        (SELECT * FROM lineage WHERE archive IS NOT NULL ORDER BY partition, offset)")" ]
check "both record what was archived" \
  [ "$(q "$L" "SELECT tasks || '|' || lineage FROM archives WHERE request = 'req-a'")|$(
       q "$A" "SELECT value FROM meta WHERE key = 'archive'")" = "$ta|$la|req-a" ]
check "ledger_check.py: the archive (req-a) against the live stubs, both chains" \
  "$PY" "$SRC/acceptance/ledger_check.py" "$A" req-a --live "$L"
check "ledger_check.py: the live ledger still checks req-b" \
  "$PY" "$SRC/acceptance/ledger_check.py" "$L" req-b
check "cnx-verify passes req-a on the archive" verify "$A" req-a
check "cnx-verify passes req-b on the live ledger" verify "$L" req-b
rc=0; verify "$L" req-a || rc=$?
check "cnx-verify of req-a on the live ledger names the archive (exit $rc)" \
  eval '[ "$rc" -ne 0 ] && grep -q "archived in $A" "$WORK/verify.out"'

# Edited archives are found.
cp "$A" "$WORK/t1.db"
sqlite3 "$WORK/t1.db" "UPDATE lineage SET envelope = replace(envelope, '\"payload\":\"', '\"payload\":\"A')
  WHERE offset = (SELECT min(offset) FROM lineage)"
rc=0; verify "$WORK/t1.db" req-a || rc=$?
check "an edited envelope in the archive: cnx-verify exit 1" eval '[ "$rc" -eq 1 ] && grep -q "envelope" "$WORK/verify.out"'
check "  and ledger_check.py fails" bash -c \
  "! '$PY' '$SRC/acceptance/ledger_check.py' '$WORK/t1.db' req-a --live '$L' >'$WORK/t1.out'"
cp "$A" "$WORK/t2.db"
sqlite3 "$WORK/t2.db" "UPDATE lineage SET verified = 0 WHERE offset = (SELECT max(offset) FROM lineage)"
rc=0; verify "$WORK/t2.db" req-a || rc=$?
check "an edited chain field in the archive: cnx-verify exit 1" eval '[ "$rc" -eq 1 ] && grep -q "row digest" "$WORK/verify.out"'
check "  and ledger_check.py fails" bash -c \
  "! '$PY' '$SRC/acceptance/ledger_check.py' '$WORK/t2.db' req-a --live '$L' >'$WORK/t2.out'"
sqlite3 "$L" ".backup '$WORK/t3.db'"
sqlite3 "$WORK/t3.db" "DELETE FROM lineage WHERE archive IS NOT NULL AND offset =
  (SELECT max(offset) FROM lineage WHERE archive IS NOT NULL)"
check "a stub deleted from the live ledger: ledger_check.py fails" bash -c \
  "! '$PY' '$SRC/acceptance/ledger_check.py' '$A' req-a --live '$WORK/t3.db' >'$WORK/t3.out'"

# A second run is a no-op.
sum=$(sha256sum <"$A")
stubs=$(q "$L" "SELECT count(*) FROM lineage WHERE archive IS NOT NULL")
archive --ledger "$L" --request req-a --out "$A"
check "a second run: exit 0, nothing to do" eval '[ "$RC" -eq 0 ] && grep -q "already archived" "$WORK/arc.out"'
check "  the archive and the stubs are unchanged" \
  [ "$(sha256sum <"$A")|$(q "$L" "SELECT count(*) FROM lineage WHERE archive IS NOT NULL")" = "$sum|$stubs" ]
archive --ledger "$L" --request req-b --out "$A"
check "another request cannot overwrite req-a's archive" eval '[ "$RC" -eq 1 ] && grep -q "not an archive of request req-b" "$WORK/arc.err"'

# Stopped between the phases: the archive is complete, the live ledger
# untouched (before2.db is before.db as it was). Running again finishes.
archive --ledger "$WORK/before.db" --request req-a --out "$WORK/arc/x.db"
check "archive from a copy" [ "$RC" -eq 0 ]
mv "$WORK/arc/x.db" "$WORK/arc/y.db"
cp "$WORK/arc/y.db" "$WORK/arc/x.db"
archive --ledger "$WORK/before2.db" --request req-a --out "$WORK/arc/x.db"
check "run again over the archive left by a stopped run: exit 0" [ "$RC" -eq 0 ]
check "  the same lineage stubs as the uninterrupted run" \
  [ "$(q "$WORK/before.db" "SELECT count(*), group_concat(row_digest) FROM lineage WHERE archive IS NOT NULL")" = \
    "$(q "$WORK/before2.db" "SELECT count(*), group_concat(row_digest) FROM lineage WHERE archive IS NOT NULL")" ]
check "  ledger_check.py passes" \
  "$PY" "$SRC/acceptance/ledger_check.py" "$WORK/arc/x.db" req-a --live "$WORK/before2.db"

# The controller goes on: req-c finishes, a new request completes.
start_worker w2
check "req-c finishes after the archive" \
  wait_for 120 state_is req-c done
check "req-d done after the archive" run req-d
check "ledger_check.py: req-d on the live ledger, chain through the stubs" \
  "$PY" "$SRC/acceptance/ledger_check.py" "$L" req-d
check "the controller is still running" kill -0 "$CTL_PID"
finish
