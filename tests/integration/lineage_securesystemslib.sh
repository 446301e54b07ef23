#!/usr/bin/env bash
# Lineage signatures checked with Debian's python3-securesystemslib key API
# over a hand-built DSSE PAE, no cnx code: sign_fixture writes a key pair and
# N signed provenance envelopes; acceptance/verify_securesystemslib.py must
# verify every one (payload = the statement), and a flipped payload byte, a
# flipped signature byte, another payloadType and another key must each make
# it fail. Then both independent verifiers (this one and
# acceptance/verify_openssl.sh) run over one set of good, tampered, re-signed
# and malformed envelopes and must accept exactly the same ones, with the
# same exit status. Skipped (77) when securesystemslib is not importable.
set -euo pipefail

SUPPORT=${CNX_SUPPORT:?CNX_SUPPORT must name build/tests/support}
SRC=${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=${CNX_PYTHON:-/usr/bin/python3}
SSL="$SRC/acceptance/verify_securesystemslib.py"
OSSL="$SRC/acceptance/verify_openssl.sh"
N=24

if ! "$PY" -c 'import securesystemslib.keys' 2>/dev/null; then
    echo "lineage_securesystemslib.sh: skipped: $PY cannot import" \
         "securesystemslib (apt-get install python3-securesystemslib)"
    exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

passed=0
failed=0
pass() { passed=$((passed + 1)); }
fail() {
    echo "lineage_securesystemslib.sh: FAILED: $*" >&2
    failed=$((failed + 1))
}
expect() {
    local why=$1
    shift
    if "$@"; then pass; else fail "$why"; fi
}
# verify TOOL PUBKEY ENVELOPE...: runs one verifier; stdout to $tmp/v.out,
# its exit status to $rc.
verify() {
    local tool=$1
    shift
    set +e
    if [ "$tool" = ssl ]; then
        "$PY" "$SSL" "$@" >"$tmp/v.out" 2>"$tmp/v.err"
    else
        CNX_PYTHON="$PY" bash "$OSSL" "$@" >"$tmp/v.out" 2>"$tmp/v.err"
    fi
    rc=$?
    set -e
}

fx="$tmp/fx"
"$SUPPORT/sign_fixture" "$fx" "$N"
openssl genpkey -algorithm ed25519 -out "$tmp/other.key" 2>/dev/null
openssl pkey -in "$tmp/other.key" -pubout -out "$tmp/other.pub"

# 1. Every fixture envelope verifies; payloads are the statements.
mkdir "$tmp/payloads"
set +e
VERIFY_PAYLOAD_DIR="$tmp/payloads" "$PY" "$SSL" "$fx/cnx.pub" \
    "$fx"/envelope-*.json >"$tmp/all.out" 2>"$tmp/all.err"
rc=$?
set -e
if [ $rc -eq 0 ]; then
    pass
else
    fail "verify_securesystemslib.py refused the fixture envelopes (exit $rc):"
    cat "$tmp/all.out" "$tmp/all.err" >&2
fi
for ((i = 0; i < N; i++)); do
    name=$(printf 'envelope-%03d.json' "$i")
    if grep -qx "OK $fx/$name" "$tmp/all.out" &&
        cmp -s "$tmp/payloads/$name.payload" \
            "$fx/$(printf 'statement-%03d.json' "$i")"; then
        pass
    else
        fail "$name: not verified, or payload differs from its statement"
    fi
done
expect "not one line per envelope" [ "$(wc -l <"$tmp/all.out")" -eq "$N" ]
expect "no count on stderr" \
    grep -qx "verify_securesystemslib.py: $N verified, 0 failed" "$tmp/all.err"

# 2. Test cases, written by python (test side only; `openssl pkeyutl
# -sign -rawin` re-signs): NAME EXPECTED per line in $tmp/cases/expected.
mkdir "$tmp/cases"
"$PY" - "$fx" "$tmp/cases" "$tmp/other.key" <<'EOF'
import base64, hashlib, json, os, subprocess, sys

fx, out, other_key = sys.argv[1:4]
TYPE = "application/vnd.in-toto+json"
class Key:
    def __init__(self, path):
        self.path = path
        self.der = subprocess.run(["openssl", "pkey", "-in", path, "-pubout",
                                   "-outform", "DER"], check=True,
                                  capture_output=True).stdout
    def sign(self, data):
        with open(out + "/.tbs", "wb") as f:
            f.write(data)
        return subprocess.run(["openssl", "pkeyutl", "-sign", "-rawin",
                               "-inkey", self.path, "-in", out + "/.tbs"],
                              check=True, capture_output=True).stdout
mine, other = Key(fx + "/cnx.key"), Key(other_key)
def keyid(k):
    return "sha256:" + hashlib.sha256(k.der).hexdigest()
def pae(t, body):
    t = t.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)
def b64(raw):
    return base64.b64encode(raw).decode()
def unb64(text):
    text = text.replace("-", "+").replace("_", "/")
    return base64.b64decode(text + "=" * (-len(text) % 4))
def sign(k, body, t=TYPE, sign_type=None):
    return {"keyid": keyid(k),
            "sig": b64(k.sign(pae(sign_type or t, body)))}
def envelope(body, sigs, t=TYPE):
    return {"payload": b64(body), "payloadType": t, "signatures": sigs}
def load(i):
    with open("%s/envelope-%03d.json" % (fx, i)) as f:
        return json.load(f)
def flip(text, at):
    raw = bytearray(unb64(text))
    raw[at % len(raw)] ^= 0x01
    return b64(bytes(raw))
expected = []
def case(name, env, want, raw=None):
    with open("%s/%s.json" % (out, name), "w") as f:
        if raw is not None:
            f.write(raw)
        else:
            json.dump(env, f, sort_keys=True, separators=(",", ":"))
    expected.append("%s %s" % (name, want))

with open("%s/statement-006.json" % fx, "rb") as f:
    stmt = f.read()
for src in (5, 4):  # 4 is URL-safe, unpadded
    for at in (0, 17, -1):
        e = load(src)
        e["payload"] = flip(e["payload"], at)
        case("payload-%d-at%d" % (src, at), e, "FAIL")
    for at in (0, 31, 63):
        e = load(src)
        e["signatures"][0]["sig"] = flip(e["signatures"][0]["sig"], at)
        case("sig-%d-at%d" % (src, at), e, "FAIL")
    e = load(src)
    e["payloadType"] = "application/json"
    case("type-%d" % src, e, "FAIL")
# Re-signed: another key; a valid signature over another type; a good one
# made outside cnx; a bad signature before a good one; the keyid hint of
# another key on a good signature; only a bad signature twice.
case("other-key", envelope(stmt, [sign(other, stmt)]), "FAIL")
case("other-type-signed", envelope(stmt, [sign(mine, stmt,
     "application/json")], "application/json"), "FAIL")
case("signed-for-other-type", envelope(stmt, [sign(mine, stmt,
     sign_type="application/json")]), "FAIL")
case("resigned", envelope(stmt + b"\n", [sign(mine, stmt + b"\n")]), "OK")
case("second-sig-good", envelope(stmt, [sign(other, stmt),
     sign(mine, stmt)]), "OK")
s = sign(mine, stmt)
s["keyid"] = keyid(other)
case("keyid-is-a-hint", envelope(stmt, [s]), "OK")
case("two-bad-sigs", envelope(stmt, [sign(other, stmt)] * 2), "FAIL")
e = load(6)
e["signatures"][0]["sig"] = b64(unb64(e["signatures"][0]["sig"])[:63])
case("sig-short", e, "FAIL")
# A signature over the payload alone, not over the PAE.
case("sig-over-payload", envelope(stmt, [{"keyid": keyid(mine),
     "sig": b64(mine.sign(stmt))}]), "FAIL")
# Malformed.
e = load(6)
e["payload"] = "@@@@"
case("payload-not-base64", e, "FAIL")
e = load(6)
e["signatures"] = []
case("no-signatures", e, "FAIL")
e = load(6)
del e["payloadType"]
case("no-type", e, "FAIL")
case("not-json", None, "FAIL", raw="{\"payload\":")
with open(out + "/expected", "w") as f:
    f.write("\n".join(expected) + "\n")
os.remove(out + "/.tbs")
EOF
for ((i = 0; i < N; i++)); do
    name=$(printf 'envelope-%03d' "$i")
    cp "$fx/$name.json" "$tmp/cases/$name.json"
    echo "$name OK" >>"$tmp/cases/expected"
done
sort -o "$tmp/cases/expected" "$tmp/cases/expected"
ncases=$(wc -l <"$tmp/cases/expected")

# 3. Each case alone, with securesystemslib: the expected line and status.
while read -r name want; do
    verify ssl "$fx/cnx.pub" "$tmp/cases/$name.json"
    if [ "$want" = OK ]; then
        want_rc=0
    else
        want_rc=1
    fi
    if [ $rc -eq $want_rc ] &&
        grep -q "^$want $tmp/cases/$name.json\(: .*\)\?\$" "$tmp/v.out" &&
        [ "$(wc -l <"$tmp/v.out")" -eq 1 ]; then
        pass
    else
        fail "$name: expected $want (exit $want_rc), got exit $rc:" \
             "$(cat "$tmp/v.out")"
    fi
done <"$tmp/cases/expected"

# 4. Cross-check: both verifiers over all cases accept and refuse exactly
# the same envelopes, and both agree with the expectation.
summary() { sed -e 's/: .*//' -e "s|$tmp/cases/||" -e 's/\.json$//' |
    awk '{print $2, $1}' | sort; }
verify ssl "$fx/cnx.pub" "$tmp/cases"/*.json
ssl_rc=$rc
summary <"$tmp/v.out" >"$tmp/ssl.sum"
verify openssl "$fx/cnx.pub" "$tmp/cases"/*.json
ossl_rc=$rc
summary <"$tmp/v.out" >"$tmp/ossl.sum"
if cmp -s "$tmp/ssl.sum" "$tmp/ossl.sum"; then
    pass
else
    fail "securesystemslib and openssl disagree:" \
         "$(diff "$tmp/ssl.sum" "$tmp/ossl.sum" | grep '^[<>]' | tr '\n' ' ')"
fi
expect "securesystemslib verdicts differ from the expected ones" \
    cmp -s "$tmp/ssl.sum" "$tmp/cases/expected"
expect "cross-check exit status: securesystemslib $ssl_rc, openssl $ossl_rc" \
    [ "$ssl_rc.$ossl_rc" = 1.1 ]
expect "cross-check: fewer than $ncases verdicts" \
    [ "$(wc -l <"$tmp/ssl.sum")" -eq "$ncases" ]

# 5. Another key verifies none of the fixture envelopes, in either verifier.
for tool in ssl openssl; do
    verify "$tool" "$tmp/other.pub" "$fx"/envelope-*.json
    if [ $rc -eq 1 ] && [ "$(grep -c '^FAIL ' "$tmp/v.out")" -eq "$N" ] &&
        ! grep -q '^OK ' "$tmp/v.out"; then
        pass
    else
        fail "$tool with an unrelated key: exit $rc," \
             "$(grep -c '^OK ' "$tmp/v.out") OK lines"
    fi
done

# 6. The DSSE reference vector: a signature over exactly
# "DSSEv1 29 http://example.com/HelloWorld 11 hello world" verifies in both.
printf 'DSSEv1 29 http://example.com/HelloWorld 11 hello world' \
    >"$tmp/hello.pae"
openssl pkeyutl -sign -rawin -inkey "$fx/cnx.key" -in "$tmp/hello.pae" \
    -out "$tmp/hello.sig"
"$PY" - "$tmp/hello.sig" "$tmp/hello.json" <<'EOF'
import base64, json, sys
with open(sys.argv[1], "rb") as f:
    sig = f.read()
with open(sys.argv[2], "w") as f:
    json.dump({"payload": base64.b64encode(b"hello world").decode(),
               "payloadType": "http://example.com/HelloWorld",
               "signatures": [{"keyid": "",
                               "sig": base64.b64encode(sig).decode()}]}, f)
EOF
for tool in ssl openssl; do
    CNX_DSSE_TYPE=http://example.com/HelloWorld \
        verify "$tool" "$fx/cnx.pub" "$tmp/hello.json"
    expect "$tool: the DSSE reference vector does not verify" [ $rc -eq 0 ]
done

# 7. Usage: no envelope, a private key, a non-Ed25519 key, no such key.
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
    -out "$tmp/ec.key" 2>/dev/null
openssl pkey -in "$tmp/ec.key" -pubout -out "$tmp/ec.pub"
for args in "$fx/cnx.pub" "$fx/cnx.key $fx/envelope-000.json" \
    "$tmp/ec.pub $fx/envelope-000.json" "$tmp/none.pub $fx/envelope-000.json" \
    "--help"; do
    # shellcheck disable=SC2086
    verify ssl $args
    expect "verify_securesystemslib.py $args: exit $rc, not 2" [ $rc -eq 2 ]
done

echo "lineage vs securesystemslib: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
