#!/usr/bin/env bash
# verify_openssl.sh PUBKEY ENVELOPE... - check cnx lineage envelopes (DSSE,
# Ed25519) with shell tools and the openssl CLI only: no cnx code is on the
# verification path. python3's json module only pulls the strings out of
# each envelope; base64(1) decodes them (URL-safe and unpadded text is
# normalised first), printf rebuilds the DSSE PAE
#   "DSSEv1" SP len(type) SP type SP len(payload) SP payload
# and `openssl pkeyutl -verify -rawin` checks each signature against PUBKEY
# (a PEM public key, e.g. a worker's cnx.pub). An envelope passes if any of
# its signatures verifies and its payloadType is $CNX_DSSE_TYPE (default
# application/vnd.in-toto+json).
#
# Prints one line per envelope, "OK <file>" or "FAIL <file>: <why>", and a
# count on stderr. With VERIFY_PAYLOAD_DIR set, each verified payload is
# written to that directory as <envelope file name>.payload.
# Exit status: 0 if every envelope verifies, 1 if any fails, 2 bad usage.
set -uo pipefail

PY=${CNX_PYTHON:-/usr/bin/python3}
WANT_TYPE=${CNX_DSSE_TYPE:-application/vnd.in-toto+json}

if [ $# -lt 2 ] || [ "$1" = "--help" ] || [ "$1" = "-h" ]; then
    echo "usage: verify_openssl.sh PUBKEY ENVELOPE..." >&2
    exit 2
fi
pub=$1
shift
if ! openssl pkey -pubin -in "$pub" -noout 2>/dev/null; then
    echo "verify_openssl.sh: $pub is not a PEM public key" >&2
    exit 2
fi
if [ -n "${VERIFY_PAYLOAD_DIR:-}" ] && [ ! -d "$VERIFY_PAYLOAD_DIR" ]; then
    echo "verify_openssl.sh: VERIFY_PAYLOAD_DIR $VERIFY_PAYLOAD_DIR is not" \
         "a directory" >&2
    exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Strings out of the envelope, into files: type, payload.b64, sig<i>.b64.
# Prints the number of signatures. No decoding happens here.
extract() {
    "$PY" - "$1" "$2" <<'EOF'
import json, sys
with open(sys.argv[1], "rb") as f:
    env = json.load(f)
out = sys.argv[2]
def text(v):
    if not isinstance(v, str):
        sys.exit(1)
    return v.encode("utf-8")
sigs = env["signatures"]
if not isinstance(sigs, list) or not 1 <= len(sigs) <= 16:
    sys.exit(1)
with open(out + "/type", "wb") as f:
    f.write(text(env["payloadType"]))
with open(out + "/payload.b64", "wb") as f:
    f.write(text(env["payload"]))
for i, s in enumerate(sigs):
    with open("%s/sig%d.b64" % (out, i), "wb") as f:
        f.write(text(s["sig"]))
print(len(sigs))
EOF
}

# Standard or URL-safe base64, padding optional, from file $1 into $2.
decode() {
    local t
    t=$(tr -- '-_' '+/' <"$1")
    case $((${#t} % 4)) in
    1) return 1 ;;
    2) t="$t==" ;;
    3) t="$t=" ;;
    esac
    printf '%s' "$t" | base64 -d >"$2" 2>/dev/null
}

# Verify one envelope; prints its line; returns 0 if it verifies.
check() {
    local env=$1 d nsigs i
    d=$(mktemp -d "$work/e.XXXXXX")
    if ! nsigs=$(extract "$env" "$d" 2>/dev/null); then
        echo "FAIL $env: not a DSSE envelope (payload, payloadType," \
             "signatures[].sig)"
        return 1
    fi
    if [ "$(cat "$d/type")" != "$WANT_TYPE" ]; then
        echo "FAIL $env: payloadType is not $WANT_TYPE"
        return 1
    fi
    if ! decode "$d/payload.b64" "$d/payload"; then
        echo "FAIL $env: payload is not base64"
        return 1
    fi
    {
        printf 'DSSEv1 %d ' "$(($(wc -c <"$d/type")))"
        cat "$d/type"
        printf ' %d ' "$(($(wc -c <"$d/payload")))"
        cat "$d/payload"
    } >"$d/pae"
    for ((i = 0; i < nsigs; i++)); do
        decode "$d/sig$i.b64" "$d/sig$i" || continue
        if openssl pkeyutl -verify -pubin -inkey "$pub" -rawin \
            -in "$d/pae" -sigfile "$d/sig$i" >/dev/null 2>&1; then
            if [ -n "${VERIFY_PAYLOAD_DIR:-}" ]; then
                cp "$d/payload" \
                   "$VERIFY_PAYLOAD_DIR/$(basename "$env").payload"
            fi
            echo "OK $env"
            return 0
        fi
    done
    echo "FAIL $env: no signature verifies with $pub"
    return 1
}

ok=0
bad=0
for env in "$@"; do
    if check "$env"; then
        ok=$((ok + 1))
    else
        bad=$((bad + 1))
    fi
done
echo "verify_openssl.sh: $ok verified, $bad failed" >&2
[ "$bad" -eq 0 ]
