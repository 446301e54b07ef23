#!/usr/bin/env bash
# Lineage signatures checked without cnx code: sign_fixture writes a key pair
# and N signed provenance envelopes; acceptance/verify_openssl.sh verifies
# every one with base64(1), printf and `openssl pkeyutl -verify -rawin`; one
# flipped payload byte, one flipped signature byte, another payloadType and
# another key must each make verification fail. The keyid is checked against
# openssl's DER public key, cnx-keygen's behaviour (modes, no overwrite,
# usage), and every envelope, decoded statement and embedded task against
# schemas/ with python3-jsonschema.
set -euo pipefail

SUPPORT=${CNX_SUPPORT:?CNX_SUPPORT must name build/tests/support}
BIN=${CNX_BIN:?CNX_BIN must name the directory of the built tools}
SRC=${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=${CNX_PYTHON:-/usr/bin/python3}
VERIFY="$SRC/acceptance/verify_openssl.sh"
N=24
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

passed=0
failed=0
pass() { passed=$((passed + 1)); }
fail() {
    echo "lineage_openssl.sh: FAILED: $*" >&2
    failed=$((failed + 1))
}
# expect WHY COMMAND...: one check, passed if COMMAND succeeds.
expect() {
    local why=$1
    shift
    if "$@"; then pass; else fail "$why"; fi
}

# Rewrite envelope $1 into $2 with python (test side only): "payload" or
# "sig" gets one bit of decoded byte $4 flipped, or "type" is replaced.
tamper() {
    "$PY" - "$@" <<'EOF'
import base64, json, sys
src, dst, what = sys.argv[1], sys.argv[2], sys.argv[3]
env = json.load(open(src))
def flip(text, at):
    text = text.replace("-", "+").replace("_", "/")
    raw = bytearray(base64.b64decode(text + "=" * (-len(text) % 4)))
    raw[at % len(raw)] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()
if what == "payload":
    env["payload"] = flip(env["payload"], int(sys.argv[4]))
elif what == "sig":
    s = env["signatures"][0]
    s["sig"] = flip(s["sig"], int(sys.argv[4]))
elif what == "type":
    env["payloadType"] = "application/json"
json.dump(env, open(dst, "w"), sort_keys=True, separators=(",", ":"))
EOF
}

fx="$tmp/fx"
"$SUPPORT/sign_fixture" "$fx" "$N"
mkdir "$tmp/payloads"

# 1. Every envelope verifies with openssl; payloads are the statements.
if VERIFY_PAYLOAD_DIR="$tmp/payloads" bash "$VERIFY" "$fx/cnx.pub" \
    "$fx"/envelope-*.json >"$tmp/verify.out" 2>"$tmp/verify.err"; then
    pass
else
    fail "verify_openssl.sh refused the fixture envelopes:"
    cat "$tmp/verify.out" >&2
fi
for ((i = 0; i < N; i++)); do
    name=$(printf 'envelope-%03d.json' "$i")
    if grep -qx "OK $fx/$name" "$tmp/verify.out" &&
        cmp -s "$tmp/payloads/$name.payload" \
            "$fx/$(printf 'statement-%03d.json' "$i")"; then
        pass
    else
        fail "$name: not verified, or payload differs from its statement"
    fi
done
if [ "$(wc -l <"$tmp/verify.out")" -eq "$N" ]; then
    pass
else
    fail "verify_openssl.sh printed other than one line per envelope"
fi

# 2. Tampering is detected: payload byte, signature byte, payloadType.
cases="payload:0 payload:17 payload:-1 sig:0 sig:63 type:0"
for c in $cases; do
    what=${c%%:*}
    at=${c#*:}
    tamper "$fx/envelope-005.json" "$tmp/bad.json" "$what" "$at"
    if bash "$VERIFY" "$fx/cnx.pub" "$tmp/bad.json" >"$tmp/bad.out" \
        2>/dev/null; then
        fail "tampered $what (byte $at) still verifies"
    elif grep -q "^FAIL $tmp/bad.json" "$tmp/bad.out"; then
        pass
    else
        fail "tampered $what: no FAIL line"
    fi
done
# One bad envelope among good ones fails the batch and is the only FAIL.
tamper "$fx/envelope-007.json" "$tmp/bad.json" payload 3
if bash "$VERIFY" "$fx/cnx.pub" "$fx/envelope-000.json" "$tmp/bad.json" \
    "$fx/envelope-001.json" >"$tmp/mixed.out" 2>/dev/null; then
    fail "a batch with a tampered envelope verified"
elif [ "$(grep -c '^OK ' "$tmp/mixed.out")" -eq 2 ] &&
    [ "$(grep -c '^FAIL ' "$tmp/mixed.out")" -eq 1 ]; then
    pass
else
    fail "mixed batch: expected 2 OK and 1 FAIL lines"
fi

# 3. Another key verifies none of them.
"$BIN/cnx-keygen" --out "$tmp/other" >/dev/null
if bash "$VERIFY" "$tmp/other/cnx.pub" "$fx"/envelope-00*.json \
    >"$tmp/other.out" 2>/dev/null; then
    fail "envelopes verified with an unrelated key"
elif [ "$(grep -c '^FAIL ' "$tmp/other.out")" -eq 10 ]; then
    pass
else
    fail "unrelated key: expected 10 FAIL lines"
fi
# Usage errors exit 2.
set +e
bash "$VERIFY" "$fx/cnx.pub" >/dev/null 2>&1
rc=$?
bash "$VERIFY" "$fx/statement-000.json" "$fx/envelope-000.json" \
    >/dev/null 2>&1
rc2=$?
set -e
expect "verify_openssl.sh without envelopes: exit $rc, not 2" [ $rc -eq 2 ]
expect "verify_openssl.sh with a non-key: exit $rc2, not 2" [ $rc2 -eq 2 ]

# 4. keyid = sha256 of the DER SubjectPublicKeyInfo, as openssl sees it.
kid=$("$BIN/cnx-keygen" --out "$tmp/k")
der="sha256:$(openssl pkey -pubin -in "$tmp/k/cnx.pub" -outform DER |
    sha256sum | cut -d' ' -f1)"
expect "cnx-keygen keyid $kid, openssl $der" \
    [ "$kid" = "$der" ]
fxkid=$("$PY" -c 'import json, sys
print(json.load(open(sys.argv[1]))["signatures"][0]["keyid"])' \
    "$fx/envelope-000.json")
fxder="sha256:$(openssl pkey -pubin -in "$fx/cnx.pub" -outform DER |
    sha256sum | cut -d' ' -f1)"
expect "envelope keyid $fxkid, openssl $fxder" \
    [ "$fxkid" = "$fxder" ]
# openssl reads the private key and derives the same public key.
if cmp -s <(openssl pkey -in "$tmp/k/cnx.key" -pubout) "$tmp/k/cnx.pub"; then
    pass
else
    fail "openssl derives another public key from cnx.key"
fi

# 5. cnx-keygen: modes, no overwrite, usage.
expect "cnx.key not 0600" \
    [ "$(stat -c %a "$tmp/k/cnx.key")" = 600 ]
expect "cnx.pub not 0644" \
    [ "$(stat -c %a "$tmp/k/cnx.pub")" = 644 ]
before=$(sha256sum "$tmp/k/cnx.key" "$tmp/k/cnx.pub")
set +e
"$BIN/cnx-keygen" --out "$tmp/k" >"$tmp/kg.out" 2>"$tmp/kg.err"
rc=$?
set -e
after=$(sha256sum "$tmp/k/cnx.key" "$tmp/k/cnx.pub")
if [ $rc -eq 1 ] && [ "$before" = "$after" ] && [ ! -s "$tmp/kg.out" ] &&
    [ "$(wc -l <"$tmp/kg.err")" -eq 1 ] &&
    grep -q "refusing to overwrite" "$tmp/kg.err"; then
    pass
else
    fail "cnx-keygen over an existing key: rc $rc, $(cat "$tmp/kg.err")"
fi
for args in "" "--out" "--bogus" "--out a --out b" "--out="; do
    set +e
    # shellcheck disable=SC2086
    "$BIN/cnx-keygen" $args >/dev/null 2>"$tmp/usage.err"
    rc=$?
    set -e
    if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/usage.err")" -eq 1 ]; then
        pass
    else
        fail "cnx-keygen '$args': exit $rc, expected 2 with one line"
    fi
done
if "$BIN/cnx-keygen" --help | grep -q "usage: cnx-keygen --out DIR"; then
    pass
else
    fail "cnx-keygen --help"
fi
if "$BIN/cnx-keygen" --out="$tmp/eq" >/dev/null &&
    [ -f "$tmp/eq/cnx.key" ]; then
    pass
else
    fail "cnx-keygen --out=DIR"
fi

# 6. Schemas: envelopes, decoded statements, embedded tasks; and the
# schemas are not vacuous (spoiled copies must fail).
if "$PY" - "$SRC/schemas" "$fx" "$N" <<'EOF'; then
import base64, copy, json, sys
from jsonschema import Draft202012Validator

schemas, fx, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def validator(name):
    with open("%s/%s" % (schemas, name)) as f:
        schema = json.load(f)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(
        schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
env_v = validator("envelope.schema.json")
st_v = validator("statement.schema.json")
task_v = validator("task.schema.json")
bad = 0
def check(v, doc, what, want_valid=True):
    global bad
    errors = list(v.iter_errors(doc))
    if want_valid and errors:
        print("%s: %s" % (what, errors[0].message[:200]))
        bad += 1
    if not want_valid and not errors:
        print("%s: spoiled copy validated" % what)
        bad += 1
for i in range(n):
    env = json.load(open("%s/envelope-%03d.json" % (fx, i)))
    check(env_v, env, "envelope %d" % i)
    text = env["payload"].replace("-", "+").replace("_", "/")
    payload = base64.b64decode(text + "=" * (-len(text) % 4))
    st = json.loads(payload)
    check(st_v, st, "statement %d" % i)
    task = st["predicate"]["buildDefinition"]["externalParameters"]["task"]
    check(task_v, task, "task of statement %d" % i)
env = json.load(open("%s/envelope-000.json" % fx))
st = json.load(open("%s/statement-000.json" % fx))
spoil_env = [
    lambda e: e.pop("payload"),
    lambda e: e.__setitem__("payloadType", "text/plain"),
    lambda e: e.__setitem__("signatures", []),
    lambda e: e.__setitem__("signatures", e["signatures"] * 17),
    lambda e: e["signatures"][0].__setitem__("sig", "not base64!"),
    lambda e: e["signatures"][0].__setitem__("sig", 5),
    lambda e: e.__setitem__("extra", 1),
]
for k, spoil in enumerate(spoil_env):
    e = copy.deepcopy(env)
    spoil(e)
    check(env_v, e, "envelope spoil %d" % k, want_valid=False)
bd = lambda s: s["predicate"]["buildDefinition"]
md = lambda s: s["predicate"]["runDetails"]["metadata"]
spoil_st = [
    lambda s: s.__setitem__("subject", []),
    lambda s: s["subject"][0]["digest"].__setitem__("sha256", "ABC"),
    lambda s: s.__setitem__("predicateType",
                            "https://slsa.dev/provenance/v0.2"),
    lambda s: bd(s).__setitem__("resolvedDependencies", [
        d for d in bd(s)["resolvedDependencies"] if d["name"] != "git+cnx"]),
    lambda s: bd(s)["resolvedDependencies"].extend([
        d for d in bd(s)["resolvedDependencies"] if d["name"] == "git+cnx"]),
    lambda s: bd(s)["resolvedDependencies"][-1]["digest"].__setitem__(
        "sha512", "00"),
    lambda s: bd(s)["externalParameters"].__setitem__("kernelVersion", 0),
    lambda s: md(s).__setitem__("startedOn", "2026-11-22T10:00:00Z"),
    lambda s: md(s).__setitem__("invocationId", "sha256:00/1"),
    lambda s: s["predicate"]["runDetails"]["builder"].__setitem__("id", "x"),
]
for k, spoil in enumerate(spoil_st):
    s = copy.deepcopy(st)
    spoil(s)
    check(st_v, s, "statement spoil %d" % k, want_valid=False)
sys.exit(1 if bad else 0)
EOF
    pass
else
    fail "schema validation"
fi

echo "lineage vs openssl: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
