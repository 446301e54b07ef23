#!/usr/bin/env bash
# Make the fuzzers' seed corpora (tests/fuzz/corpus/<parser>/) from the
# project's own outputs: a small real run (cnx-synth 128x128x64, the
# embedded broker, the controller, every worker, cnx-reprocess with the
# pyramid, pipeline and predictions workflows, and a refused request)
# captured with kcat, its ledger and its layers; the workflows and test
# fixtures in the tree; the compressed_segmentation fixtures of
# tests/support/cseg_fixture; the SigV4 test suite's requests. The workers sign with the fuzzers' test
# key (tests/fuzz/fuzz_common.h), so the captured envelopes verify in the
# harnesses. Seeds are named by the SHA-1 of their bytes (as libFuzzer
# names what it finds) and kept small; the committed corpus is what this
# wrote, minimised with `-merge=1` (docs/fuzzing.md).
#
#   tests/fuzz/make_corpus.sh BIN_DIR SUPPORT_DIR [OUT]
#
# BIN_DIR: a release build's bin/ (cmake's build/bin); SUPPORT_DIR its
# tests/support/; OUT the corpus root (default build-fuzz/corpus-new, so
# that the committed corpus is replaced only by hand). Needs kcat, sqlite3
# and python3. CNX_FUZZ_KEEP=1 keeps the run's directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BIN=$(cd "${1:?usage: make_corpus.sh BIN_DIR SUPPORT_DIR [OUT]}" && pwd)
SUP=$(cd "${2:?usage: make_corpus.sh BIN_DIR SUPPORT_DIR [OUT]}" && pwd)
OUT=${3:-$ROOT/build-fuzz/corpus-new}
W=$(mktemp -d /tmp/cnx-fuzz-corpus-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "${CNX_FUZZ_KEEP:-}" ]; then echo "make_corpus: kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT

# The fuzzers' test key, from fuzz_common.h.
mkdir -p "$W/keys" "$W/trust"
python3 - "$ROOT/tests/fuzz/fuzz_common.h" "$W" <<'EOF'
import re, sys, os
src = open(sys.argv[1]).read()
def pem(name):
    block = re.search(r'#define %s\s*\\\n(.*?)\n\n' % name, src, re.S).group(1)
    return ''.join(re.findall(r'"((?:[^"\\]|\\.)*)"', block)).replace('\\n', '\n')
w = sys.argv[2]
with open(os.open(w + '/keys/cnx.key', os.O_WRONLY | os.O_CREAT, 0o600), 'w') as f:
    f.write(pem('FUZZ_KEY_PEM'))
open(w + '/trust/fuzz.pub', 'w').write(pem('FUZZ_PUB_PEM'))
EOF

"$BIN/cnx-synth" --out "$W/data" --shape 128,128,64 --quiet
"$BIN/cnx-ingest" --tiles "$W/data/tiles/tiles.json" --out "$W/data/tileset" >/dev/null
"$BIN/cnx-broker" --partitions 2 >"$W/broker.out" 2>"$W/broker.err" &
PIDS+=($!)
BOOT=""
for _ in $(seq 100); do BOOT=$(head -n1 "$W/broker.out" 2>/dev/null || true); [ -n "$BOOT" ] && break; sleep 0.1; done
[ -n "$BOOT" ] || { echo "make_corpus: the broker did not start" >&2; exit 1; }
"$BIN/cnx-controller" --brokers "$BOOT" --ledger "$W/ledger.db" --trust "$W/trust" --key "$W/ckeys/cnx.key" \
  --progress 0.2 -q 2>"$W/controller.log" &
CPID=$!
PIDS+=($CPID)
DIRTY=--allow-dirty
"$BIN/cnx-downsample" --brokers "$BOOT" --key "$W/keys/cnx.key" --instance fz-ds \
  --session-timeout-ms 6000 $DIRTY -q 2>>"$W/workers.log" &
PIDS+=($!)
for st in montage align-match align-solve align-render segment segment-join segment-relabel \
  mesh mesh-manifest synapses synapse-edges; do
  case $st in mesh*) exe=cnx-mesh ;; montage) exe=cnx-montage ;; align-*) exe=cnx-align ;;
    syn*) exe=cnx-synapses ;; *) exe=cnx-segment ;; esac
  "$BIN/$exe" --stage "$st" --brokers "$BOOT" --key "$W/keys/cnx.key" --instance "fz-$st" \
    --session-timeout-ms 6000 $DIRTY -q 2>>"$W/workers.log" &
  PIDS+=($!)
done
run() { # workflow, request id, dataset
  "$BIN/cnx-reprocess" --controller-key "$W/ckeys/cnx.pub" --brokers "$BOOT" --workflow "$1" --workflows "$ROOT/workflows" \
    --request "$2" --dataset "$3" --roi 0,0,0,128,128,64 --deadline 24h --wait --quiet \
    --timeout 300 >/dev/null 2>&1 || echo "make_corpus: $2 exited $?"
}
run pyramid fz-pyramid "file://$W/data"
run pipeline fz-pipeline "file://$W/data"
run predictions fz-predictions "file://$W/data"
run pyramid fz-missing "file://$W/nowhere"
kill -TERM "$CPID"
wait "$CPID" || true
mkdir -p "$W/log"
for t in $(kcat -b "$BOOT" -L -J | python3 -c 'import json,sys
print(" ".join(t["topic"] for t in json.load(sys.stdin)["topics"] if t["topic"].startswith("cnx.")))'); do
  timeout 30 kcat -b "$BOOT" -C -t "$t" -o beginning -e -q -J >"$W/log/$t.jsonl" || true
done
mkdir -p "$W/cseg"
"$SUP/cseg_fixture" write "$W/cseg" >/dev/null

python3 "$ROOT/tests/fuzz/make_corpus.py" "$ROOT" "$W" "$OUT"
