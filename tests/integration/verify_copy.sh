#!/usr/bin/env bash
# Lineage survives a copy. A real run (cnx-broker, cnx-controller, two
# cnx-downsample workers, cnx-reprocess with the pyramid workflow over a
# 256x128x128 cnx-synth image: ds1 2 tasks reading the raw image, ds2 1 task
# reading ds1's outputs) writes pyramid/v1 with manifests that name every
# object by its absolute file:// URL. The dataset is then copied as a whole
# to each destination, and the original deleted, so nothing can be read
# from it; at each destination:
#  1. cnx-verify --layer <copy>/pyramid/v1 --ledger: exit 0, no finding,
#     the relocation named (one info line, and in --json);
#  2. one envelope alone (--manifest) verifies with --relocate OLD=NEW, and
#     without it does not (its objects are not where it says);
#  3. one chunk's bytes copied over another's in the copy: exit 1, a
#     subject finding naming that chunk at the copy and whose bytes it holds;
#     restored, it verifies again.
# Destinations are DESTS below: each has a URL and a way to copy the dataset
# there, read an object and write one: a directory (file://), and a bucket
# of a local S3 server (s3rver, when node and npm are here); another is one
# more dest_<name>_* set of functions and its name in DESTS.
source "${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}/acceptance/lib.sh"
DATA=$WORK/data
LAYER=pyramid/v1
"$BIN/cnx-synth" --out "$DATA" --shape 256,128,128 --seed 5 --quiet
start_broker 4
make_key
mkdir -p "$WORK/trust"
cp "$PUB" "$WORK/trust/workers.pub"
CNX_LOG=info "$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/ledger.db" \
  --trust "$WORK/trust" --key "$CKEY" >>"$WORK/controller.log" 2>&1 &
CPID=$!
PIDS+=($CPID)
for i in 1 2; do start_stage_worker cnx-downsample downsample "ds-$i"; done
set +e
"$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow pyramid --workflows "$SRC/workflows" \
  --dataset "file://$DATA" --roi 0,0,0,256,128,128 --request copy --wait --json \
  --timeout 300 >"$WORK/run.json" 2>"$WORK/run.err"
RC=$?
set -e
check "the run is done (cnx-reprocess exit $RC)" [ "$RC" -eq 0 ]
stop_workers
kill -TERM "$CPID" 2>/dev/null || true
wait "$CPID" 2>/dev/null || true
[ "$RC" -eq 0 ] || { cat "$WORK/run.err"; finish; exit 1; }

verify() { # args...: output in $WORK/verify.out, exit status in VRC
  set +e
  "$BIN/cnx-verify" --trust "$WORK/trust" --ledger "$WORK/ledger.db" -q "$@" \
    >"$WORK/verify.out" 2>&1
  VRC=$?
  set -e
  echo "  exit $VRC: $(tail -n1 "$WORK/verify.out")"
}
clean() { verify "$@"; [ "$VRC" -eq 0 ]; }

check "the original verifies where it was written" clean --layer "file://$DATA/$LAYER"
# Two chunks of ds1's scale, and one envelope of the layer, named relative
# to the dataset (the same names at every destination).
mapfile -t CHUNKS < <(cd "$DATA/$LAYER" && find 16_16_16 -type f | sort)
ENV_REL=$(cd "$DATA" && find "$LAYER/lineage" -name '*.dsse.json' | sort | head -n1)
check "ds1 wrote two chunks, and the layer holds envelopes (${#CHUNKS[@]}, $ENV_REL)" \
  [ "${#CHUNKS[@]}" -ge 2 -a -n "$ENV_REL" ]
A=$LAYER/${CHUNKS[0]}
B=$LAYER/${CHUNKS[1]}

# ---- destinations -------------------------------------------------------
# dest_<name>_url: the copy's URL; _copy: copy $DATA there; _get REL FILE
# and _put FILE REL: read or overwrite one object of the copy; _envelope
# REL: a local file holding that object (for --manifest).
dest_file_url() { echo "file://$WORK/elsewhere/ds-copy"; }
dest_file_copy() { mkdir -p "$WORK/elsewhere" && cp -a "$DATA" "$WORK/elsewhere/ds-copy"; }
dest_file_get() { cp "$WORK/elsewhere/ds-copy/$1" "$2"; }
dest_file_put() { chmod u+w "$WORK/elsewhere/ds-copy/$2" && cp "$1" "$WORK/elsewhere/ds-copy/$2"; }
dest_file_envelope() { echo "$WORK/elsewhere/ds-copy/$1"; }
DESTS=(file)

# s3://: a bucket of s3rver (tests/support/s3rver.sh), written and read
# with store_tool; skipped (this destination only) without node and npm.
S3=s3://cnx-copy/elsewhere/ds-copy
TOOL=${CNX_SUPPORT:-$BIN/../tests/support}/store_tool
dest_s3_url() { echo "$S3"; }
dest_s3_copy() {
  local rel
  (cd "$DATA" && find . -type f ! -name '.tmp.*' -printf '%P\n') | while read -r rel; do
    "$TOOL" put "$S3" "$rel" "$DATA/$rel" >/dev/null || return 1
  done
}
dest_s3_get() { "$TOOL" get "$S3" "$1" >"$2"; }
# s3rver ignores If-None-Match: with the check before a put off, the
# write-once store lets other bytes over an object, as a tamperer would
dest_s3_put() { CNX_S3_CHECK_BEFORE_PUT=0 "$TOOL" put "$S3" "$2" "$1" >/dev/null; }
dest_s3_envelope() { "$TOOL" get "$S3" "$1" >"$WORK/s3-envelope.json" && echo "$WORK/s3-envelope.json"; }
mkdir -p "$WORK/s3"
if [ -x "$TOOL" ] && bash "$SRC/tests/support/s3rver.sh" start "$WORK/s3" cnx-copy \
     >"$WORK/s3rver.log" 2>&1; then
  PIDS+=("$(cat "$WORK/s3/pid")")
  unset AWS_PROFILE AWS_SESSION_TOKEN AWS_DEFAULT_REGION AWS_ENDPOINT_URL_S3 \
        CNX_S3_CHECK_BEFORE_PUT CNX_S3_ADDRESSING CNX_CACHE_DIR
  export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
  export AWS_ENDPOINT_URL=$(cat "$WORK/s3/endpoint")
  export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
  DESTS+=(s3)
else
  echo "s3rver did not start: the s3:// destination is skipped ($(tail -n1 "$WORK/s3rver.log"))"
fi

for d in "${DESTS[@]}"; do
  check "copied to $d ($(dest_${d}_url))" dest_${d}_copy
done
rm -rf "$DATA"
check "the original is gone" [ ! -e "$DATA" ]

for d in "${DESTS[@]}"; do
  URL=$(dest_${d}_url)
  echo "-- $d: $URL"
  # 1. The copy verifies where it is, and says how it was relocated.
  check "$d: the copy verifies (exit 0, no finding)" clean --layer "$URL/$LAYER"
  check "$d: the relocation is reported" \
    grep -qF "cnx-verify: relocated file://$DATA -> $URL (layer $URL/$LAYER was written as file://$DATA/$LAYER)" \
    "$WORK/verify.out"
  verify --json --layer "$URL/$LAYER"
  check "$d: ... and in --json" [ "$(jq_py "$WORK/verify.out" \
    '[d["ok"], [(r["from"], r["to"]) for r in d["relocations"]]]')" = \
    "[True, [('file://$DATA', '$URL')]]" ]

  # 2. One envelope alone needs to be told where the dataset went.
  ENV=$(dest_${d}_envelope "$ENV_REL")
  check "$d: one envelope verifies with --relocate" \
    clean --manifest "$ENV" --relocate "file://$DATA=$URL"
  check "$d: ... and names the relocation" \
    grep -qF "cnx-verify: relocated file://$DATA -> $URL (--relocate)" "$WORK/verify.out"
  verify --manifest "$ENV"
  check "$d: ... but not without it (its objects are not where it says)" \
    grep -q ": subject: missing from storage" "$WORK/verify.out"

  # 3. A chunk of the copy swapped for another's bytes.
  dest_${d}_get "$B" "$WORK/saved"
  dest_${d}_get "$A" "$WORK/other"
  dest_${d}_put "$WORK/other" "$B"
  verify --layer "$URL/$LAYER"
  check "$d: a swapped chunk is a subject finding naming it at the copy" \
    bash -c '[ "$1" -eq 1 ] && grep -qF "$2: subject: storage now holds" "$3" &&
             grep -F "$2: subject:" "$3" | grep -qF "the bytes of $4 written by task"' _ \
    "$VRC" "$URL/$B" "$WORK/verify.out" "$URL/$A"
  dest_${d}_put "$WORK/saved" "$B"
  check "$d: restored, the copy verifies again" clean --layer "$URL/$LAYER"
done
finish
