#!/usr/bin/env bash
# Bad input at a live cnx-controller (run under ASan/UBSan in CI): a broker
# (cnx-broker --partitions 2), a trusted key pair, the controller, one
# cnx-downsample worker and a 128^3 cnx-synth dataset. kcat, an independent
# Kafka client, produces what a broken or hostile client could:
#   cnx.requests  not JSON; a JSON array; no schema; an unknown schema; a
#                 cnx.request/1 with an unknown key, with the id "../x",
#                 with a malformed deadline, with a workflow that is not an
#                 object; a request-state of unknown type;
#   cnx.events    truncated JSON; an event with attempt 0; a control
#                 message of unknown type;
#   cnx.lineage   garbage; an envelope signed by an untrusted key; an
#                 envelope signed by the trusted key whose payload has one
#                 byte flipped (both crafted with the openssl CLI: DSSE PAE
#                 + `openssl pkeyutl -sign -rawin`, checked with
#                 acceptance/verify_openssl.sh before the flip);
# and two well-formed requests the controller must refuse: a dataset
# directory that does not exist (the error names the missing layer) and a
# workflow with a cycle (the error names the cycle).
# Checked with the sqlite3 shell on the ledger: one `rejected` row per
# malformed message, each naming the field or problem; the two envelopes
# are lineage rows with verified = 0 and an error saying why (untrusted,
# altered); the two requests are `refused` with their reasons; PRAGMA
# integrity_check is ok. Then the controller is still alive and answers: a
# real request through workflows/pyramid.json (cnx-reprocess --wait) is
# done with verified manifests, and SIGTERM stops the controller with exit
# 0 (no leak or error reports under ASan). Everything started is killed on
# exit; the test takes well under 60 s.
set -uo pipefail

BIN=${CNX_BIN:?CNX_BIN must name the directory of the built tools}
SRC=${CNX_SOURCE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
PY=${CNX_PYTHON:-/usr/bin/python3}
DIRTY=${CNX_ALLOW_DIRTY:+--allow-dirty}
tmp=$(mktemp -d)
pids=()
passed=0
failed=0

cleanup() { # SIGTERM, newest first; SIGKILL whatever is left after 5 s
    local i p
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill -TERM "${pids[$i]}" 2>/dev/null
    done
    for _ in $(seq 1 50); do
        for p in "${pids[@]}"; do
            kill -0 "$p" 2>/dev/null && break
            p=""
        done
        [ -z "$p" ] && break
        sleep 0.1
    done
    {
        for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
        wait
    } 2>/dev/null
    if [ -n "${KEEP_WORK:-}" ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

check() {
    local what=$1
    shift
    if "$@"; then
        echo "ok: $what"
        passed=$((passed + 1))
    else
        echo "FAILED: $what" >&2
        failed=$((failed + 1))
    fi
}

for tool in kcat sqlite3 openssl; do
    command -v "$tool" >/dev/null || {
        echo "controller_poison.sh: $tool is not installed" >&2
        exit 1
    }
done
# Workers refuse a dirty build unless told otherwise (as acceptance/lib.sh).
if [ -z "$DIRTY" ] && "$BIN/cnx-downsample" --version | grep -qE -- '-dirty( |$)'; then
    DIRTY=--allow-dirty
fi

# ---- broker, keys, dataset, controller, one worker -------------------------

"$BIN/cnx-broker" --partitions 2 >"$tmp/broker.out" 2>"$tmp/broker.err" &
pids+=($!)
B=""
for _ in $(seq 1 200); do
    B=$(head -n 1 "$tmp/broker.out" 2>/dev/null)
    [ -n "$B" ] && break
    sleep 0.1
done
[ -n "$B" ] || {
    echo "cnx-broker printed no bootstrap list: $(cat "$tmp/broker.err")" >&2
    exit 1
}

"$BIN/cnx-keygen" --out "$tmp/keys" >/dev/null || exit 1
"$BIN/cnx-keygen" --out "$tmp/ckeys" >/dev/null || exit 1
"$BIN/cnx-keygen" --out "$tmp/untrusted" >/dev/null || exit 1
mkdir -p "$tmp/trust"
cp "$tmp/keys/cnx.pub" "$tmp/trust/workers.pem"

"$BIN/cnx-synth" --out "$tmp/data" --shape 128,128,128 --quiet || exit 1

LEDGER=$tmp/ledger.db
CNX_LOG=info "$BIN/cnx-controller" --brokers "$B" --ledger "$LEDGER" \
    --trust "$tmp/trust" --key "$tmp/ckeys/cnx.key" --progress 0.5 >"$tmp/controller.log" 2>&1 &
CPID=$!
pids+=($CPID)
CNX_LOG=info "$BIN/cnx-downsample" --brokers "$B" --key "$tmp/keys/cnx.key" \
    --instance poison-w1 --session-timeout-ms 6000 $DIRTY \
    >"$tmp/worker.log" 2>&1 &
WPID=$!
pids+=($WPID)

# ---- the messages ------------------------------------------------------------

# One message per call: produce TOPIC KEY VALUE (the value has no newline).
produce() {
    printf '%s' "$3" | kcat -P -b "$B" -t "$1" -k "$2" 2>>"$tmp/kcat.err" ||
        echo "kcat -P to $1 failed: $(cat "$tmp/kcat.err")" >&2
}

# The JSON documents, built with Python's json module: $tmp/msg/<name>.
mkdir -p "$tmp/msg"
"$PY" - "$SRC/workflows/pyramid.json" "$tmp" <<'EOF' || exit 1
import copy, json, os, sys
wf = json.load(open(sys.argv[1]))
out = os.path.join(sys.argv[2], "msg")
NOW, LATER = "2026-01-01T00:00:00Z", "2099-01-01T00:00:00Z"


def request(rid, **kw):
    m = {"schema": "cnx.request/1", "request": rid, "workflow": wf,
         "dataset": "file://" + os.path.join(sys.argv[2], "data"),
         "roi": {"min": [0, 0, 0], "max": [128, 128, 128]},
         "deadline": LATER, "submitted": NOW, "reuse": False,
         "submitter": "poison@test"}
    m.update(kw)
    return m


cycle = copy.deepcopy(wf)
cycle["name"] = "loop"
cycle["stages"][0]["depends_on"] = ["ds2"]
cycle["stages"][0]["inputs"] = {"source": {"stage": "ds2"}}
docs = {
    "unknown-key": dict(request("poison-key"), color="red"),
    "bad-id": request("../x"),
    "bad-deadline": request("poison-deadline", deadline="tomorrow noon"),
    "wf-not-object": request("poison-wf", workflow="pyramid"),
    "state-unknown": {"schema": "cnx.request-state/1",
                      "request": "poison-state", "type": "exploded",
                      "time": NOW},
    "attempt-0": {"schema": "cnx.event/1", "type": "started",
                  "stage": "downsample", "task_key": "sha256:" + "a" * 64,
                  "request": "poison-event", "attempt": 0,
                  "worker": "poison", "time": NOW},
    "control-unknown": {"schema": "cnx.control/1", "type": "teleported",
                        "request": "poison-control",
                        "task_key": "sha256:" + "b" * 64, "index": 0,
                        "attempt": 1, "lane": "bulk", "time": NOW},
    "no-dataset": request("poison-nodataset", dataset="file://" +
                          os.path.join(sys.argv[2], "no-such-dataset")),
    "cycle": request("poison-cycle", workflow=cycle),
    # What the envelopes sign: a statement shaped like a worker's.
    "statement": {"_type": "https://in-toto.io/Statement/v1",
                  "subject": [{"name": "file:///nowhere/16_16_16/0-64_0-64_0-64",
                               "digest": {"sha256": "c" * 64}}],
                  "predicateType": "https://slsa.dev/provenance/v1",
                  "predicate": {"buildDefinition": {"externalParameters": {
                      "taskKey": "sha256:" + "d" * 64, "stage": "ds1",
                      "task": {"request": "poison-lineage"}}}}},
}
for name, doc in docs.items():
    with open(os.path.join(out, name), "w") as f:
        f.write(json.dumps(doc, separators=(",", ":"), sort_keys=True))
EOF

# A DSSE envelope of $tmp/msg/statement signed with KEY and carrying PUB's
# keyid, made with the openssl CLI only (the PAE is built as
# acceptance/verify_openssl.sh rebuilds it to verify).
TYPE=application/vnd.in-toto+json
sign_envelope() { # key, pub, output file
    local d=$tmp/sign.$$ kid
    mkdir -p "$d"
    {
        printf 'DSSEv1 %d %s %d ' "${#TYPE}" "$TYPE" \
            "$(wc -c <"$tmp/msg/statement")"
        cat "$tmp/msg/statement"
    } >"$d/pae"
    openssl pkeyutl -sign -inkey "$1" -rawin -in "$d/pae" -out "$d/sig" ||
        return 1
    kid=sha256:$(openssl pkey -pubin -in "$2" -outform DER |
        sha256sum | cut -d' ' -f1)
    printf '{"payload":"%s","payloadType":"%s","signatures":[{"keyid":"%s","sig":"%s"}]}' \
        "$(base64 -w0 <"$tmp/msg/statement")" "$TYPE" "$kid" \
        "$(base64 -w0 <"$d/sig")" >"$3"
    rm -rf "$d"
}
sign_envelope "$tmp/untrusted/cnx.key" "$tmp/untrusted/cnx.pub" \
    "$tmp/msg/env-untrusted.json"
sign_envelope "$tmp/keys/cnx.key" "$tmp/keys/cnx.pub" \
    "$tmp/msg/env-trusted.json"
# The same envelope with one byte of its payload flipped ("c" -> "e" in
# the subject's digest), signature and keyid unchanged.
"$PY" - "$tmp/msg/env-trusted.json" "$tmp/msg/env-tampered.json" <<'EOF'
import base64, json, sys
env = json.load(open(sys.argv[1]))
body = bytearray(base64.b64decode(env["payload"]))
i = body.index(b"c" * 64)
body[i] ^= ord("c") ^ ord("e")
env["payload"] = base64.b64encode(bytes(body)).decode()
open(sys.argv[2], "w").write(json.dumps(env, separators=(",", ":")))
EOF
check "crafted envelopes: openssl verifies the signed one, not the tampered or untrusted" \
    bash -c '"$1" "$2" "$3" >/dev/null 2>&1 &&
             ! "$1" "$2" "$4" >/dev/null 2>&1 &&
             ! "$1" "$2" "$5" >/dev/null 2>&1' _ \
    "$SRC/acceptance/verify_openssl.sh" "$tmp/keys/cnx.pub" \
    "$tmp/msg/env-trusted.json" "$tmp/msg/env-tampered.json" \
    "$tmp/msg/env-untrusted.json"

# One message per file (kcat -P sends each file as one message).
produce_file() { # topic, key, file
    kcat -P -b "$B" -t "$1" -k "$2" "$3" 2>>"$tmp/kcat.err" ||
        echo "kcat -P to $1 failed: $(cat "$tmp/kcat.err")" >&2
}
# The same, signed as docs/security.md says (with the openssl CLI): the
# malformed events and decisions below carry a valid signature, so that the
# checks past it are what rejects them.
produce_signed_file() { # topic, key, file, signing key file
    local type="application/vnd.cnx.message+json;topic=$1;key=$2"
    { printf 'DSSEv1 %d %s %d ' "${#type}" "$type" "$(stat -c %s "$3")"
      cat "$3"; } >"$tmp/pae"
    kcat -P -b "$B" -t "$1" -k "$2" \
        -H "cnx-sig=$(openssl pkeyutl -sign -inkey "$4" -rawin -in "$tmp/pae" | base64 -w0)" \
        "$3" 2>>"$tmp/kcat.err" ||
        echo "kcat -P to $1 failed: $(cat "$tmp/kcat.err")" >&2
}
printf '\x01\x02 garbage, not an envelope' >"$tmp/msg/garbage"
# Malformed: each must become one `rejected` row.
produce cnx.requests p-notjson 'this is not JSON {'
produce cnx.requests p-array '[1,2,3]'
produce cnx.requests p-noschema '{"request":"poison-noschema","type":"accepted"}'
produce cnx.requests p-badschema '{"schema":"cnx.teapot/7","request":"poison-teapot"}'
produce_file cnx.requests poison-key "$tmp/msg/unknown-key"
produce_file cnx.requests ../x "$tmp/msg/bad-id"
produce_file cnx.requests poison-deadline "$tmp/msg/bad-deadline"
produce_file cnx.requests poison-wf "$tmp/msg/wf-not-object"
produce_signed_file cnx.requests poison-state "$tmp/msg/state-unknown" "$tmp/ckeys/cnx.key"
produce cnx.events p-truncated '{"schema":"cnx.event/1","type":"succ'
produce_signed_file cnx.events poison-event "$tmp/msg/attempt-0" "$tmp/keys/cnx.key"
produce_signed_file cnx.events poison-control "$tmp/msg/control-unknown" "$tmp/ckeys/cnx.key"
N_MALFORMED=12
# Lineage: recorded, never trusted.
produce_file cnx.lineage p-garbage "$tmp/msg/garbage"
produce_file cnx.lineage p-untrusted "$tmp/msg/env-untrusted.json"
produce_file cnx.lineage p-tampered "$tmp/msg/env-tampered.json"
# Well-formed requests that must be refused.
produce_file cnx.requests poison-nodataset "$tmp/msg/no-dataset"
produce_file cnx.requests poison-cycle "$tmp/msg/cycle"

# ---- the ledger ----------------------------------------------------------------

q() { sqlite3 -readonly "$LEDGER" "$1" 2>/dev/null; }
all_applied() {
    [ "$(q "SELECT count(*) FROM rejected")" = "$N_MALFORMED" ] &&
        [ "$(q "SELECT count(*) FROM lineage")" = 3 ] &&
        [ "$(q "SELECT count(*) FROM requests WHERE state = 'refused'")" = 2 ]
}
for _ in $(seq 1 60); do
    all_applied && break
    sleep 0.5
done
check "all $N_MALFORMED malformed messages, 3 lineage messages and 2 refusals in the ledger" \
    all_applied
q "SELECT topic, partition, offset, error FROM rejected ORDER BY 1, 2, 3" \
    >"$tmp/rejected.txt"

rejected_once() { # topic, substring: exactly one rejected row of topic with it
    local n
    n=$(awk -F'|' -v t="$1" -v s="$2" \
        '$1 == t && index(substr($0, length($1 $2 $3) + 4), s) { n++ }
         END { print n + 0 }' "$tmp/rejected.txt")
    [ "$n" = 1 ] || {
        echo "rejected rows of $1 whose error contains '$2': $n" >&2
        return 1
    }
}
check "requests: not JSON is rejected as such" \
    rejected_once cnx.requests "malformed JSON at line 1 column 4"
check "requests: a JSON array is rejected (not an object)" \
    rejected_once cnx.requests "not a JSON object"
check "requests: no schema is rejected naming the field" \
    rejected_once cnx.requests "schema: missing"
check "requests: an unknown schema is rejected naming it" \
    rejected_once cnx.requests "schema 'cnx.teapot/7' does not belong"
check "requests: an unknown key is rejected naming it" \
    rejected_once cnx.requests "unknown key 'color'"
check "requests: the id ../x is rejected naming the field" \
    rejected_once cnx.requests "cnx.request/1: request: must be 1-128 of"
check "requests: a malformed deadline is rejected naming the field" \
    rejected_once cnx.requests "deadline: must be RFC 3339"
check "requests: a workflow that is not an object is rejected" \
    rejected_once cnx.requests "workflow: must be a workflow document"
check "requests: a request-state of unknown type is rejected" \
    rejected_once cnx.requests "request-state: type: must be one of"
check "events: truncated JSON is rejected as such" \
    rejected_once cnx.events "premature end of input"
check "events: attempt 0 is rejected naming attempt" \
    rejected_once cnx.events "attempt: must be an integer >= 1"
check "events: a control message of unknown type is rejected" \
    rejected_once cnx.events "control: type: must be released, reused or"
check "no request row for a rejected request" \
    [ "$(q "SELECT count(*) FROM requests WHERE id IN ('poison-key',
        '../x', 'poison-deadline', 'poison-wf', 'poison-state')")" = 0 ]

lineage_row() { # file sent, substring of the error
    local digest got
    digest=sha256:$(sha256sum <"$1" | cut -d' ' -f1)
    got=$(sqlite3 -readonly "$LEDGER" "SELECT verified, signer IS NULL,
        task_key IS NULL, error FROM lineage WHERE
        envelope_digest = '$digest'")
    case $got in
    "0|1|1|"*"$2"*) return 0 ;;
    *)
        echo "lineage row of $(basename "$1") ($digest): '$got'," \
            "want 0|1|1|...$2..." >&2
        return 1
        ;;
    esac
}
check "lineage: garbage is a row with verified = 0 and why" \
    lineage_row "$tmp/msg/garbage" "envelope: malformed JSON"
check "lineage: an untrusted signer: verified = 0, 'untrusted key'" \
    lineage_row "$tmp/msg/env-untrusted.json" "untrusted key"
check "lineage: a flipped payload byte: verified = 0, 'altered'" \
    lineage_row "$tmp/msg/env-tampered.json" "altered"
check "lineage: no output recorded from an unverified envelope" \
    [ "$(q "SELECT count(*) FROM outputs")" = 0 ]

refused() { # request id, substrings of the error...
    local id=$1 err
    shift
    [ "$(q "SELECT state FROM requests WHERE id = '$id'")" = refused ] || {
        echo "$id: state '$(q "SELECT state FROM requests WHERE id = '$id'")'" >&2
        return 1
    }
    err=$(q "SELECT error FROM requests WHERE id = '$id'")
    for s in "$@"; do
        case $err in
        *"$s"*) ;;
        *)
            echo "$id: error '$err' does not name '$s'" >&2
            return 1
            ;;
        esac
    done
}
check "a dataset that does not exist: refused, naming the layer" \
    refused poison-nodataset "image" "no-such-dataset"
check "a workflow with a cycle: refused, naming the cycle" \
    refused poison-cycle "cycle" "ds1" "ds2"
check "refused requests have no tasks" \
    [ "$(q "SELECT count(*) FROM tasks WHERE request LIKE 'poison-%'")" = 0 ]
check "PRAGMA integrity_check: ok" \
    [ "$(q "PRAGMA integrity_check")" = ok ]

# ---- the controller still answers ---------------------------------------------

check "the controller is still running" kill -0 "$CPID"
kill -0 "$WPID" 2>/dev/null || {
    echo "the worker is not running: $(tail -n 5 "$tmp/worker.log")" >&2
    failed=$((failed + 1))
}
"$BIN/cnx-reprocess" --controller-key "$tmp/ckeys/cnx.pub" --brokers "$B" --workflow pyramid \
    --workflows "$SRC/workflows" --dataset "file://$tmp/data" \
    --roi 0,0,0,128,128,128 --request poison-after --wait --json \
    --timeout 30 >"$tmp/after.json" 2>"$tmp/after.err"
rc=$?
check "a real request afterwards is done (cnx-reprocess exit $rc)" \
    [ "$rc" -eq 0 ]
check "its tasks are done with verified manifests" \
    [ "$(q "SELECT count(*) || '|' || sum(t.state = 'done') || '|' ||
            sum(l.verified = 1) FROM tasks t LEFT JOIN lineage l ON
            l.envelope_digest = t.manifest WHERE t.request = 'poison-after'")" = "2|2|2" ]
check "still exactly $N_MALFORMED rejected rows" \
    [ "$(q "SELECT count(*) FROM rejected")" = "$N_MALFORMED" ]

kill -TERM "$CPID"
crc=0
for _ in $(seq 1 100); do
    kill -0 "$CPID" 2>/dev/null || break
    sleep 0.1
done
wait "$CPID"
crc=$?
check "SIGTERM stops the controller with exit 0 (got $crc)" [ "$crc" -eq 0 ]
check "no sanitizer report from the controller" \
    bash -c '! grep -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$1"' _ \
    "$tmp/controller.log"
check "PRAGMA integrity_check after the stop: ok" \
    [ "$(q "PRAGMA integrity_check")" = ok ]

if [ "$failed" -ne 0 ]; then
    echo "--- rejected rows:" >&2
    cat "$tmp/rejected.txt" >&2
    echo "--- controller log (last 40 lines):" >&2
    tail -n 40 "$tmp/controller.log" >&2
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
