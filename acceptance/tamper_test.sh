#!/usr/bin/env bash
# The auditor's tamper suite. A finished run on the real stack (broker,
# controller, cnx-downsample workers; the pyramid workflow over a
# 256x128x128 cnx-synth image: ds1 2 tasks reading the raw image, ds2 1 task
# reading ds1's outputs) verifies cleanly with cnx-verify (exit 0), and with the
# openssl CLI and python3-securesystemslib alone (no cnx code). Then each
# kind of tampering, applied to that run and undone after, must make
# cnx-verify exit 1 with a finding of the right check naming the object:
#  1. a byte flipped in an output chunk                   -> subject
#  2. a parameter edited in a stored payload              -> signature
#  3. a payload re-signed with an untrusted key (openssl) -> signature
#  4. an input chunk swapped for another with a valid
#     manifest of its own                                 -> subject, naming
#                                                            whose bytes it holds
#  5. a ledger row deleted, and one edited                -> ledger
#  6. a stored manifest removed                           -> coverage
#  7. a code commit that is not in the repository         -> commit
# The independent verifiers must also reject the envelopes of 2 and 3.
source "$(dirname "$0")/lib.sh"
DATA=$WORK/data
"$BIN/cnx-synth" --out "$DATA" --shape 256,128,128 --seed 3 --quiet
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
  --dataset "file://$DATA" --roi 0,0,0,256,128,128 --request tamper --wait --json \
  --timeout 300 >"$WORK/run.json" 2>"$WORK/run.err"
RC=$?
set -e
check "the run is done (cnx-reprocess exit $RC)" [ "$RC" -eq 0 ]
stop_workers
kill -TERM "$CPID" 2>/dev/null || true
wait "$CPID" 2>/dev/null || true

LAYER=$DATA/pyramid/v1
LEDGER=$WORK/ledger.db
verify() { # extra args...; output in $WORK/verify.out, exit status in VRC
  set +e
  "$BIN/cnx-verify" --trust "$WORK/trust" --repo "$SRC" --ledger "$LEDGER" \
    --layer "file://$LAYER" "$@" >"$WORK/verify.out" 2>&1
  VRC=$?
  set -e
}
finds() { # check, pattern: cnx-verify exits 1 with a finding "<object>: check: <reason>"
  # whose line (object or reason) matches the extended regular expression
  verify
  echo "  exit $VRC: $(grep -m1 ": $1: " "$WORK/verify.out" || head -n1 "$WORK/verify.out")"
  [ "$VRC" -eq 1 ] && grep ": $1: " "$WORK/verify.out" | grep -qE -- "$2"
}
clean() { verify "$@"; [ "$VRC" -eq 0 ]; }

# The clean run.
check "the untouched run verifies (cnx-verify exit 0: $(verify; tail -n1 "$WORK/verify.out"))" clean
mapfile -t ENVS < <(find "$LAYER/lineage" -name '*.dsse.json' | sort)
check "every stored envelope verifies with the openssl CLI alone (${#ENVS[@]})" \
  bash "$SRC/acceptance/verify_openssl.sh" "$PUB" "${ENVS[@]}"
check "every stored envelope verifies with python3-securesystemslib alone" \
  "$PY" "$SRC/acceptance/verify_securesystemslib.py" "$PUB" "${ENVS[@]}"

# The ds2 task's envelope (it reads ds1's outputs) and two ds1 outputs.
read -r DS2_ENV A B <<<"$("$PY" - "$LAYER" <<'PY'
import base64, glob, json, os, sys
layer = sys.argv[1]
ds2 = None
for f in sorted(glob.glob(os.path.join(layer, "lineage", "*", "*.dsse.json"))):
    st = json.loads(base64.b64decode(json.load(open(f))["payload"]))
    if st["subject"][0]["name"].split("/")[-2] == "32_32_32":
        ds2 = f
chunks = sorted(os.listdir(os.path.join(layer, "16_16_16")))
print(ds2, "16_16_16/" + chunks[0], "16_16_16/" + chunks[1])
PY
)"
keep() { cp -p "$1" "$WORK/saved"; }
restore() { cp -p "$WORK/saved" "$1"; }

# 1. A byte flipped in an output chunk.
keep "$LAYER/$A"
printf '\xff' | dd of="$LAYER/$A" bs=1 seek=4096 conv=notrunc 2>/dev/null
check "1. flipped byte in $A: subject" finds subject "$A"
restore "$LAYER/$A"

# 2. A parameter edited in a stored payload (signature kept).
keep "$DS2_ENV"
"$PY" - "$DS2_ENV" <<'PY'
import base64, json, sys
f = sys.argv[1]
env = json.load(open(f))
st = json.loads(base64.b64decode(env["payload"]))
st["predicate"]["buildDefinition"]["externalParameters"]["task"]["parameters"] = {"mode": "mode"}
env["payload"] = base64.b64encode(json.dumps(st, sort_keys=True, separators=(",", ":")).encode()).decode()
json.dump(env, open(f, "w"), sort_keys=True, separators=(",", ":"))
PY
check "2. parameter edited in a payload: signature" finds signature "does not verify"
check "2. ... and openssl rejects it too" bash -c '! bash "$1" "$2" "$3" >/dev/null 2>&1' _ \
  "$SRC/acceptance/verify_openssl.sh" "$PUB" "$DS2_ENV"
restore "$DS2_ENV"

# 3. The payload re-signed with a key nobody trusts (openssl CLI).
keep "$DS2_ENV"
openssl genpkey -algorithm ed25519 -out "$WORK/rogue.pem" 2>/dev/null
"$PY" - "$DS2_ENV" "$WORK/pae.bin" <<'PY'
import base64, json, sys
env = json.load(open(sys.argv[1]))
body = base64.b64decode(env["payload"])
t = env["payloadType"].encode()
open(sys.argv[2], "wb").write(b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body))
PY
openssl pkeyutl -sign -inkey "$WORK/rogue.pem" -rawin -in "$WORK/pae.bin" -out "$WORK/rogue.sig"
"$PY" - "$DS2_ENV" "$WORK/rogue.sig" <<'PY'
import base64, json, sys
env = json.load(open(sys.argv[1]))
env["signatures"] = [{"keyid": "rogue", "sig": base64.b64encode(open(sys.argv[2], "rb").read()).decode()}]
json.dump(env, open(sys.argv[1], "w"), sort_keys=True, separators=(",", ":"))
PY
check "3. re-signed with an untrusted key: signature" finds signature "untrusted"
check "3. ... and securesystemslib rejects it too" bash -c '! "$1" "$2" "$3" "$4" >/dev/null 2>&1' _ \
  "$PY" "$SRC/acceptance/verify_securesystemslib.py" "$PUB" "$DS2_ENV"
restore "$DS2_ENV"

# 4. An input chunk swapped for another that has a valid manifest of its own.
keep "$LAYER/$B"
cp "$LAYER/$A" "$LAYER/$B"
check "4. $B swapped for $A: subject, naming the chunk whose bytes it now holds" \
  finds subject "the bytes of file://$LAYER/$A"
restore "$LAYER/$B"

# 5. A ledger row deleted; another edited.
cp "$LEDGER" "$WORK/ledger.saved"
sqlite3 "$LEDGER" "DELETE FROM lineage WHERE (partition, offset) IN
  (SELECT partition, offset FROM lineage ORDER BY partition, offset LIMIT 1 OFFSET 2)"
# (the chain breaks at the next row of its partition; a partition's last
# row leaves its manifest "not in the ledger")
check "5. a ledger lineage row deleted: ledger" finds ledger "chain broken|not in the ledger"
cp "$WORK/ledger.saved" "$LEDGER"
sqlite3 "$LEDGER" "UPDATE lineage SET stage = 'forged' WHERE (partition, offset) IN
  (SELECT partition, offset FROM lineage ORDER BY partition, offset LIMIT 1 OFFSET 1)"
check "5. a ledger lineage row edited: ledger" finds ledger "the row was edited"
cp "$WORK/ledger.saved" "$LEDGER"

# 6. A stored manifest removed.
GONE=$(find "$LAYER/lineage" -name '*.dsse.json' | sort | head -n1)
keep "$GONE"
rm -f "$GONE"
check "6. a manifest removed: coverage" finds coverage "manifest covers it"
restore "$GONE"

# 7. A repository that lacks the commit the workers were built from.
git init -q "$WORK/other"
git -C "$WORK/other" -c user.name=a -c user.email=a@b commit -q --allow-empty -m other
verify_other() {
  set +e
  "$BIN/cnx-verify" --trust "$WORK/trust" --repo "$WORK/other" --layer "file://$LAYER" \
    >"$WORK/verify.out" 2>&1
  VRC=$?
  set -e
  echo "  exit $VRC: $(grep -m1 ': commit: ' "$WORK/verify.out")"
  [ "$VRC" -eq 1 ] && grep -q ": commit: .*not" "$WORK/verify.out"
}
check "7. commit not in the repository: commit" verify_other

check "restored: the run verifies again (exit 0)" clean
finish
