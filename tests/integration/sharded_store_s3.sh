#!/usr/bin/env bash
# sharded_store_s3.sh - the sharded sets of tests/py/sharded_ref.py read
# back through an s3:// store on s3rver (tests/support/s3rver.sh) with
# cnx_sharded_store_read: every shard is put with cnx_store_put, then
# sharded_tool reads every chunk with ranged GETs (Range: bytes=a-b, 206)
# and compares it byte for byte with the writer's copy, reports absent
# chunks as missing, and refuses each damaged shard with the same error as
# from files (a range past the end of a shard: s3rver's short 206 or 416,
# ERANGE from the adapter, ECORRUPT from the reader). Ranged reads carry no
# digest, so with a read cache configured they neither hit it nor fill it:
# the cache directory holds no entry afterwards. The sharded volumes are
# read through cnx_layer_read over s3:// and compared with the writer's
# array. Exit 77 (skipped)
# only when node or npm is missing.
set -uo pipefail

SUPPORT=${CNX_SUPPORT:?CNX_SUPPORT must name the built test support programs}
# lib.sh: check, finish, the work directory and its clean-up.
source "${CNX_SOURCE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}/acceptance/lib.sh"
set +e
TOOL="$SUPPORT/sharded_tool"
tmp=$WORK
cleanup() {
    bash "$SRC/tests/support/s3rver.sh" stop "$tmp/s3" 2>/dev/null
    rm -rf "$WORK"
}

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "sharded_store_s3.sh: node/npm not installed: skipped" >&2
    exit 77
fi
[ -x "$TOOL" ] || { echo "sharded_store_s3.sh: $TOOL not built" >&2; exit 1; }
mkdir -p "$tmp/s3"
bash "$SRC/tests/support/s3rver.sh" start "$tmp/s3" cnx-test
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "sharded_store_s3.sh: s3rver did not start" >&2; exit 1; }
EP=$(cat "$tmp/s3/endpoint")

# Only what this test sets: no profile, file or token from the machine.
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_DEFAULT_REGION AWS_ENDPOINT_URL_S3 \
      CNX_S3_CHECK_BEFORE_PUT CNX_S3_ADDRESSING CNX_CACHE_DIR \
      CNX_STORE_TIMEOUT_S
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
export AWS_REGION=us-east-1 AWS_ENDPOINT_URL=$EP
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
export CNX_STORE_BACKOFF_MS=1 CNX_STORE_RETRIES=3
export CNX_CACHE_DIR=$tmp/cache

"$PY" "$SRC/tests/py/sharded_ref.py" write "$tmp/w" 17 >/dev/null
for set in "$tmp"/w/sets/*/; do
    name=$(basename "$set")
    u=s3://cnx-test/sets/$name
    check "$name: put the set" "$TOOL" put "${set%/}" "$u"
    check "$name: every chunk through s3:// ranged reads" "$TOOL" check "${set%/}" "$u"
done
for case in "$tmp"/w/corrupt/*/; do
    name=$(basename "$case")
    u=s3://cnx-test/corrupt/$name
    check "$name: put the damaged shard" "$TOOL" put "${case%/}" "$u"
    check "$name: refused as from files" "$TOOL" corrupt "${case%/}" "$u"
done
for vol in "$tmp"/w/volumes/*/; do
    name=$(basename "$vol")
    u=s3://cnx-test/volumes/$name
    check "$name: put the sharded volume" "$TOOL" put "${vol%/}" "$u"
    check "$name: cnx_layer_read over s3:// equals the written array" \
        "$TOOL" volume "${vol%/}" "$u"
done
check "a set not in the store: its shards are ENOTFOUND" \
    eval '! "$TOOL" check "$tmp/w/sets/murmur-gzip" s3://cnx-test/none 2>"$tmp/err" && grep -q "no such shard" "$tmp/err"'
check "ranged reads left no entry in the read cache" \
    eval '[ -z "$(find "$tmp/cache" -path "*/sha256/*" -type f 2>/dev/null)" ]'
info_digest="sha256:$(sha256sum "$tmp/w/sets/murmur-gzip/info" | cut -d' ' -f1)"
# (twice: a fresh cache directory's first put only creates DIR/tmp,
# store_cache.c's "the next put tries again")
verified_get() {
    "$SUPPORT/store_tool" get s3://cnx-test/sets/murmur-gzip info \
        "$info_digest" >/dev/null
}
check "... while verified gets of the same store fill it (the check can fail)" \
    eval 'verified_get && verified_get &&
          [ -n "$(find "$tmp/cache" -path "*/sha256/*" -type f)" ]'

finish
