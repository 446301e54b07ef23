#!/usr/bin/env bash
# cnx-reprocess against a real broker (cnx-broker), with kcat playing the
# controller. Every scenario runs at once, each with its own request id on
# the shared cnx.requests topic: the request cnx-reprocess produces is read
# back with kcat and validated against schemas/request.schema.json; the
# controller's answers (accepted, progress, slo, finished, refused) are
# validated against schemas/request-state.schema.json before kcat produces
# them, and a deliberately malformed answer must fail that schema and be
# skipped by cnx-reprocess. Checked: the exit status of each outcome (0,
# 3, 4, 5; refused 2; no controller 1 after --timeout 5; without --wait,
# the id on stdout) and the --json summary. Everything started is killed on
# exit; the whole test takes well under 60 s.
set -uo pipefail

BIN=${CNX_BIN:?CNX_BIN must name the directory of the built tools}
SRC=${CNX_SOURCE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
PY=${CNX_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
pids=()
passed=0
failed=0

cleanup() {
    local p
    for p in "${pids[@]:-}"; do
        [ -n "$p" ] && kill -KILL "$p" 2>/dev/null
    done
    wait 2>/dev/null
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

command -v kcat >/dev/null || {
    echo "reprocess_cli.sh: kcat is not installed" >&2
    exit 1
}
"$PY" -c 'import jsonschema' 2>/dev/null || {
    echo "reprocess_cli.sh: python3-jsonschema is not installed" >&2
    exit 1
}

# ---- a broker, a workflow, a dataset directory ----------------------------

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

mkdir -p "$tmp/wf" "$tmp/ds"
"$BIN/cnx-keygen" --out "$tmp/ckeys" >/dev/null || exit 1
"$BIN/cnx-keygen" --out "$tmp/untrusted" >/dev/null || exit 1
cat >"$tmp/wf/pyr.json" <<'EOF'
{
  "schema": "cnx.workflow/1",
  "name": "pyr",
  "description": "one mip of a pyramid",
  "stages": [
    {"name": "ds1", "worker": "downsample", "kind": "map",
     "kernel_version": 1, "inputs": {"source": {"layer": "raw/v1"}},
     "output": {"layer": "pyramid/v1"}, "halo": 0, "parameters": {}}
  ]
}
EOF

# ---- the controller's answers, validated before they are sent ---------------

# Writes $tmp/msgs/<scenario>: one message per line, "good" or "bad" (must
# fail the schema), a tab, the JSON.
"$PY" - "$SRC/schemas/request-state.schema.json" "$tmp" <<'EOF' || exit 1
import json, os, sys
import jsonschema

schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
val = jsonschema.Draft202012Validator(schema)
out = os.path.join(sys.argv[2], "msgs")
os.makedirs(out)
KEY = "sha256:" + "a" * 64
D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
T0, DL = "2026-11-22T12:00:00Z", "2026-11-23T12:00:00Z"


def head(rid, kind, t="2026-11-22T12:00:01Z"):
    return {"schema": "cnx.request-state/1", "request": rid, "type": kind,
            "time": t}


def accepted(rid):
    m = head(rid, "accepted")
    m.update(deadline=DL, tasks=36, notes=[
        "ds1: region [0,0,0]-[256,256,128] widened to [0,0,0]-[256,256,128]"
        " (whole chunks)"], stages=[
        {"stage": "ds1", "worker": "downsample", "kind": "map", "tasks": 36,
         "region": {"min": [0, 0, 0], "max": [256, 256, 128]},
         "scale": "8_8_8", "output": {"layer": "file:///ds/pyramid/v1",
                                      "scale": "16_16_16"}}])
    return m


def progress(rid, done, slo="ok", dead=0):
    m = head(rid, "progress", "2026-11-22T12:00:02Z")
    m.update(deadline=DL, eta="2026-11-22T12:10:00Z", slo=slo,
             urgent=slo != "ok", stages=[
                 {"stage": "ds1", "total": 36, "done": done, "running": 2,
                  "failed": 1, "dead": dead, "reused": 0}])
    return m


def slo(rid, level):
    m = head(rid, "slo", "2026-11-22T12:00:03Z")
    m.update(slo=level, eta=None, deadline=DL)
    return m


def finished(rid, outcome="done", slo="met", identical=36, dead=0, never=0,
             violations=(), failures=()):
    m = head(rid, "finished", "2026-11-22T12:00:13Z")
    m.update(outcome=outcome, submitted=T0, deadline=DL, elapsed_s=12.5,
             slo=slo, repeated=36, identical=identical, stages=[
                 {"stage": "ds1", "worker": "downsample", "total": 36,
                  "done": 36 - dead - never, "dead": dead,
                  "never_run": never, "reused": 0, "attempts": 38,
                  "voxels": 75497472, "cpu_s": 3.2, "wall_s": 4.1,
                  "bytes_read": 75497472, "bytes_written": 9437184,
                  "mvx_per_s": 18.4, "core_hours": 0.00089, "mm3": 0.0386,
                  "gb_per_mm3": 2.2, "usd_per_mm3": None}],
             violations=list(violations), failures=list(failures),
             price_per_core_hour=None)
    return m


ROI = {"min": [0, 0, 0], "max": [128, 128, 128]}
violation = {"kind": "reproducibility", "task_key": KEY, "stage": "ds1", "roi": ROI,
             "object": "file:///ds/pyramid/v1/16_16_16/0-64_0-64_0-64",
             "expected": D1, "got": D2}
failure = {"task_key": KEY, "stage": "ds1", "roi": ROI,
           "error": "EDIGEST: input 8_8_8/0-128_0-128_0-128 does not match"}
malformed = progress("it-ok", 5)
malformed["stages"][0]["done"] = -1

scenarios = {
    "ok": [accepted("it-ok"), ("bad", malformed), progress("it-ok", 10),
           slo("it-ok", "at_risk"), progress("it-ok", 30, "at_risk"),
           slo("it-ok", "ok"), finished("it-ok")],
    "violation": [accepted("it-violation"), progress("it-violation", 20),
                  finished("it-violation", outcome="failed", slo="missed",
                           identical=35, dead=1, violations=[violation],
                           failures=[failure])],
    "failed": [accepted("it-failed"), progress("it-failed", 20, dead=1),
               finished("it-failed", outcome="failed", slo="missed", dead=1,
                        never=4, failures=[failure])],
    "missed": [accepted("it-missed"), slo("it-missed", "missed"),
               finished("it-missed", slo="missed")],
    "refused": [dict(head("it-refused", "refused"),
                     error="workflow pyr: dataset file:///ds has no raw/v1")],
    "nowait": [accepted("it-nowait")],
}
for name, msgs in scenarios.items():
    with open(os.path.join(out, name), "w") as f:
        for m in msgs:
            want = "good"
            if isinstance(m, tuple):
                want, m = m
            errors = list(val.iter_errors(m))
            if (want == "good") != (not errors):
                sys.exit(f"{name}: {want} message: schema says "
                         f"{errors[0].message if errors else 'valid'}: {m}")
            f.write(want + "\t" + json.dumps(m, separators=(",", ":")) + "\n")
EOF

# ---- run every scenario at once ---------------------------------------------

declare -A want_rc=([ok]=0 [violation]=3 [failed]=4 [missed]=5 [refused]=2
                    [nowait]=0 [nocontroller]=1)
declare -A rpid
scenarios="ok violation failed missed refused nowait nocontroller"
for s in $scenarios; do
    args=(--brokers "$B" --controller-key "$tmp/ckeys/cnx.pub"
          --workflows "$tmp/wf" --workflow pyr
          --dataset "$tmp/ds" --roi 0,0,0,256,256,128 --deadline 2h
          --request "it-$s")
    case $s in
    nowait) ;;
    nocontroller) args+=(--wait --json --timeout 5) ;;
    *) args+=(--wait --json --timeout 45) ;;
    esac
    "$BIN/cnx-reprocess" "${args[@]}" >"$tmp/$s.out" 2>"$tmp/$s.err" &
    rpid[$s]=$!
    pids+=($!)
done
t_start=$SECONDS

# Wait until every request is on the topic; keep them for validation.
have_all_requests() {
    local s
    kcat -C -b "$B" -t cnx.requests -o beginning -e -q \
        -f '%k\t%s\n' >"$tmp/requests" 2>/dev/null || return 1
    for s in $scenarios; do
        grep -q "^it-$s"$'\t'"{\"dataset\"" "$tmp/requests" || return 1
    done
}
for _ in $(seq 1 100); do
    have_all_requests && break
    sleep 0.2
done
check "every cnx-reprocess produced its request, keyed by its id" \
    have_all_requests

# Play the controller: every scenario's messages, in order, keyed by id,
# each signed with openssl as docs/security.md says (Ed25519 over the DSSE
# PAE of the body under a type naming the topic and key), the signature in
# the cnx-sig header. Before them, for "failed", two forged `finished ...
# done` answers cnx-reprocess must skip: one signed by a key it does not
# trust, one unsigned.
sign() { # key file, message key, body file -> base64 signature
    local type="application/vnd.cnx.message+json;topic=cnx.requests;key=$2"
    { printf 'DSSEv1 %d %s %d ' "${#type}" "$type" "$(stat -c %s "$3")"
      cat "$3"; } >"$tmp/pae"
    openssl pkeyutl -sign -inkey "$1" -rawin -in "$tmp/pae" | base64 -w0
}
produce() { # message key, body file, [signing key file]
    local h=()
    [ -n "${3:-}" ] && h=(-H "cnx-sig=$(sign "$3" "$1" "$2")")
    kcat -P -b "$B" -t cnx.requests -k "$1" "${h[@]}" "$2" \
        2>"$tmp/kcat.err" || echo "kcat -P failed: $(cat "$tmp/kcat.err")" >&2
}
forged='{"schema":"cnx.request-state/1","request":"it-failed","type":"finished","time":"2026-11-22T10:00:00Z","outcome":"done"}'
printf '%s' "$forged" >"$tmp/forged.json"
produce it-failed "$tmp/forged.json" "$tmp/untrusted/cnx.key"
produce it-failed "$tmp/forged.json"
for s in ok violation failed missed refused nowait; do
    i=0
    while IFS= read -r line; do
        i=$((i + 1))
        printf '%s' "$line" >"$tmp/body.$s.$i"
        produce "it-$s" "$tmp/body.$s.$i" "$tmp/ckeys/cnx.key"
    done < <(cut -f 2 "$tmp/msgs/$s")
done

# Collect exit statuses (each cnx-reprocess has its own --timeout).
declare -A rc
for s in $scenarios; do
    wait "${rpid[$s]}"
    rc[$s]=$?
done
elapsed=$((SECONDS - t_start))

exit_is() {
    [ "${rc[$1]}" -eq "${want_rc[$1]}" ] || {
        echo "$1: exit ${rc[$1]}, want ${want_rc[$1]}; stderr:" >&2
        cat "$tmp/$1.err" >&2
        return 1
    }
}
for s in $scenarios; do
    check "$s: exit status ${want_rc[$s]}" exit_is "$s"
done

nocontroller_waited() {
    [ "$elapsed" -ge 5 ] && [ "$elapsed" -lt 30 ] &&
        grep -q "no answer from the controller within 5 s" \
            "$tmp/nocontroller.err"
}
check "no controller: gives up after --timeout 5 with one line" \
    nocontroller_waited
check "without --wait: the request id on stdout" \
    test "$(cat "$tmp/nowait.out")" = "it-nowait"
check "without --wait: the plan and its note on stderr" \
    grep -q "request it-nowait: 36 tasks in 1 stage" "$tmp/nowait.err"
check "refused: the controller's error on stderr" \
    grep -q "refused: workflow pyr: dataset file:///ds has no raw/v1" \
        "$tmp/refused.err"
check "malformed answer reported once and skipped" \
    grep -q "ignoring a malformed message.*stages\[0\].done" "$tmp/ok.err"
check "plain progress lines and SLO changes on stderr (not a terminal)" \
    grep -q "SLO AT RISK" "$tmp/ok.err"
check "plain progress lines carry the ETA and the deadline" \
    grep -q "^cnx-reprocess: ETA 2026-11-22T12:10:00Z, deadline " "$tmp/ok.err"
check "summary text on stderr" \
    grep -q "35 of 36 repeated tasks bit-identical" "$tmp/violation.err"

# The requests against their schema and what was asked; the --json answers.
json_checks() {
    "$PY" - "$SRC/schemas/request.schema.json" "$tmp" <<'EOF'
import json, os, re, sys
from datetime import datetime
import jsonschema

schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
val = jsonschema.Draft202012Validator(schema)
tmp = sys.argv[2]
workflow = json.load(open(os.path.join(tmp, "wf", "pyr.json")))
dataset = "file://" + os.path.realpath(os.path.join(tmp, "ds"))
bad = []
seen = set()
for line in open(os.path.join(tmp, "requests")):
    key, _, value = line.rstrip("\n").partition("\t")
    doc = json.loads(value)
    if doc.get("schema") != "cnx.request/1":
        continue
    seen.add(key)
    for e in val.iter_errors(doc):
        bad.append(f"{key}: schema: {e.message}")
    if doc["request"] != key or not re.fullmatch(r"[A-Za-z0-9._:-]{1,128}",
                                                 key):
        bad.append(f"{key}: request id {doc['request']}")
    if doc["workflow"] != workflow:
        bad.append(f"{key}: embedded workflow differs from the file")
    if doc["dataset"] != dataset:
        bad.append(f"{key}: dataset {doc['dataset']}, want {dataset}")
    if doc["roi"] != {"min": [0, 0, 0], "max": [256, 256, 128]}:
        bad.append(f"{key}: roi {doc['roi']}")
    t = lambda s: datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ")
    if (t(doc["deadline"]) - t(doc["submitted"])).total_seconds() != 7200:
        bad.append(f"{key}: deadline is not submitted + 2h")
    if doc["reuse"] is not False or "@" not in doc["submitter"]:
        bad.append(f"{key}: reuse/submitter {doc['reuse']} {doc['submitter']}")
want = {"ok", "violation", "failed", "missed", "refused", "nowait",
        "nocontroller"}
if seen != {"it-" + s for s in want}:
    bad.append(f"requests seen: {sorted(seen)}")

expect = {
    "ok": dict(exit_code=0, type="finished", outcome="done", identical=36),
    "violation": dict(exit_code=3, type="finished", identical=35),
    "failed": dict(exit_code=4, type="finished", outcome="failed"),
    "missed": dict(exit_code=5, type="finished", slo="missed"),
    "refused": dict(exit_code=2, type="refused"),
    "nocontroller": dict(exit_code=1, request="it-nocontroller"),
}
for s, fields in expect.items():
    text = open(os.path.join(tmp, s + ".out")).read()
    lines = [l for l in text.splitlines() if l.strip()]
    if len(lines) != 1:
        bad.append(f"{s}: stdout is not one JSON line: {text!r}")
        continue
    doc = json.loads(lines[0])
    for k, v in fields.items():
        if doc.get(k) != v:
            bad.append(f"{s}: {k} = {doc.get(k)!r}, want {v!r}")
    if doc.get("type") == "finished":
        if doc.get("request") != "it-" + s or "schema" in doc:
            bad.append(f"{s}: request/schema fields")
        if doc.get("tasks") != 36 or len(doc.get("notes", [])) != 1:
            bad.append(f"{s}: the plan's tasks and notes are missing")
        st = doc["stages"][0]
        if st["mvx_per_s"] != 18.4 or st["core_hours"] != 0.00089:
            bad.append(f"{s}: figures {st}")
    if s == "violation" and (len(doc["violations"]) != 1 or
                             doc["violations"][0]["got"] != "sha256:" + "2" * 64):
        bad.append(f"{s}: violations {doc.get('violations')}")
    if s == "failed" and (doc["stages"][0]["never_run"] != 4 or
                          len(doc["failures"]) != 1):
        bad.append(f"{s}: failures {doc.get('failures')}")
    if s == "nocontroller" and "no answer" not in doc.get("error", ""):
        bad.append(f"{s}: error {doc.get('error')}")
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
}
check "requests valid and as asked; --json summaries as answered" json_checks

usage_is_2() {
    local out
    "$BIN/cnx-reprocess" "$@" >/dev/null 2>"$tmp/usage.err"
    out=$?
    [ "$out" -eq 2 ] && [ "$(wc -l <"$tmp/usage.err")" -eq 1 ] || {
        echo "$*: exit $out, stderr: $(cat "$tmp/usage.err")" >&2
        return 1
    }
}
common=(--brokers "$B" --controller-key "$tmp/ckeys/cnx.pub"
        --workflows "$tmp/wf" --dataset "$tmp/ds")
check "bad --roi is a usage error" \
    usage_is_2 "${common[@]}" --workflow pyr --roi 0,0,0,1,1
check "bad --deadline is a usage error" \
    usage_is_2 "${common[@]}" --workflow pyr --roi 0,0,0,1,1,1 --deadline 5y
check "missing workflow is a usage error" \
    usage_is_2 "${common[@]}" --workflow nope --roi 0,0,0,1,1,1
check "unknown option is a usage error" usage_is_2 --bogus
check "--help documents the exit statuses" \
    bash -c '"$1" --help | grep -q "Where several of 3, 4 and 5 apply"' _ \
    "$BIN/cnx-reprocess"

# A mistyped workflow name: exit 2 with one line that names the file looked
# for and every workflow of that directory (truth: its listing).
unknown_workflow() {
    local rc=0 want
    "$BIN/cnx-reprocess" --brokers 127.0.0.1:1 --controller-key /dev/null \
        --workflow segmentaton --workflows "$SRC/workflows" \
        --dataset "file://$tmp/ds" --roi 0,0,0,8,8,8 \
        >"$tmp/unknown.out" 2>"$tmp/unknown.err" || rc=$?
    want=$(cd "$SRC/workflows" && ls *.json | sed 's/\.json$//' | LC_ALL=C sort | paste -sd, | sed 's/,/, /g')
    cat "$tmp/unknown.err"
    [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/unknown.err")" -eq 1 ] &&
        grep -qF "segmentaton.json: no such file; the workflows there: $want" "$tmp/unknown.err"
}
check "unknown workflow: exit 2, one line listing the workflows there" unknown_workflow

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
