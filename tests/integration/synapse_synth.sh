#!/usr/bin/env bash
# Synapse detection end to end on a 256^3 cnx-synth dataset: the kernel run
# per 128^3 chunk with halo 16 (forward order on one thread, reverse order
# on two) and on the whole volume writes the same synapse table and edges,
# byte for byte, and the same per-chunk tables in both orders; a halo too
# small for the clefts never reports one twice; acceptance/syn_check.py
# (numpy/scipy, no cnx code) scores the tables against gt-synapses.json and
# the gt segmentation: CREMI partner precision and recall >= 0.90, partner
# accuracy >= 0.90; the same bounds hold with the labels of our own
# segmentation kernel (segment_tool) instead of gt. Negative controls: pre and post swapped must fail the
# bounds; a duplicated table must be refused.
set -euo pipefail

SUPPORT=${CNX_SUPPORT:?CNX_SUPPORT must name the directory of the test support programs}
BIN=${CNX_BIN:?CNX_BIN must name the directory of the built tools}
PY=${CNX_PYTHON:-/usr/bin/python3}
SRC=${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}
TOOL="$SUPPORT/synapse_tool"
CHECK="$SRC/acceptance/syn_check.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "synapse_synth.sh: FAILED: $*" >&2
    exit 1
}

"$PY" -c 'import numpy, scipy' 2>/dev/null || {
    echo "synapse_synth.sh: skipped: $PY lacks numpy or scipy"
    exit 77
}

ds="$tmp/ds"
"$BIN/cnx-synth" --out "$ds" --shape 256,256,256 --seed 1 --quiet >/dev/null

"$TOOL" "$ds" "$ds/gt" "$tmp/fwd" >"$tmp/fwd.out"
"$TOOL" "$ds" "$ds/gt" "$tmp/rev" --order reverse --threads 2 >"$tmp/rev.out"
"$TOOL" "$ds" "$ds/gt" "$tmp/whole" --whole >"$tmp/whole.out"
for f in synapses.jsonl edges.jsonl; do
    cmp -s "$tmp/fwd/$f" "$tmp/whole/$f" || fail "chunked $f differs from the whole-volume run"
    cmp -s "$tmp/rev/$f" "$tmp/whole/$f" || fail "reverse-order $f differs from the whole-volume run"
done
diff -r "$tmp/fwd/chunks" "$tmp/rev/chunks" >/dev/null ||
    fail "per-chunk tables differ between orders"
[ "$(ls "$tmp/fwd/chunks" | wc -l)" -eq 8 ] || fail "want 8 chunk tables"
grep -qx "truncated 0" "$tmp/fwd.out" || fail "clefts truncated with halo 16: $(cat "$tmp/fwd.out")"
n=$(sed -n 's/^synapses //p' "$tmp/whole.out")
[ "$n" -gt 0 ] || fail "no synapses found"
# The chunk tables together are the whole table.
cat "$tmp"/fwd/chunks/*.jsonl | LC_ALL=C sort | cmp -s - <(LC_ALL=C sort "$tmp/whole/synapses.jsonl") ||
    fail "chunk tables together are not the whole table"
echo "determinism: $n synapses; 8 chunks forward (1 thread), reverse (2 threads) and whole volume give identical bytes"

# Halo 2 (< cleft extent + partner radius): clefts cut by seams are
# dropped and counted, never doubled (synapse_tool refuses an id twice).
"$TOOL" "$ds" "$ds/gt" "$tmp/h2" --halo 2 >"$tmp/h2.out" || fail "halo 2 run failed"
t=$(sed -n 's/^truncated //p' "$tmp/h2.out")
[ "$t" -gt 0 ] || fail "halo 2: no truncated clefts reported"
echo "halo 2: $(sed -n 's/^synapses //p' "$tmp/h2.out") synapses, $t truncated clefts dropped, none twice"

# Quality, independently.
"$PY" "$CHECK" --gt "$ds/gt-synapses.json" --gt-seg "$ds/gt" --pred "$tmp/fwd/chunks" \
    --min-precision 0.90 --min-recall 0.90 --min-partner 0.90 >"$tmp/check.out" ||
    fail "syn_check: $(cat "$tmp/check.out")"
cat "$tmp/check.out"
# The same figures from the whole-volume table (the file count aside).
"$PY" "$CHECK" --gt "$ds/gt-synapses.json" --gt-seg "$ds/gt" --pred "$tmp/whole/synapses.jsonl" \
    --json | sed 's/"files": [0-9]*, //' >"$tmp/whole.json"
"$PY" "$CHECK" --gt "$ds/gt-synapses.json" --gt-seg "$ds/gt" --pred "$tmp/fwd/chunks" \
    --json | sed 's/"files": [0-9]*, //' | cmp -s - "$tmp/whole.json" ||
    fail "syn_check figures differ between chunked and whole"

# With the segmentation kernel's own labels instead of gt: the predicted
# ids are another id space, but the gt ids at the predicted partner sites
# must still be the true partners.
"$SUPPORT/segment_tool" synth "$ds" '{}' 0,0,0,256,256,256 "$tmp/seg.u32" >/dev/null
"$TOOL" "$ds" "raw:$tmp/seg.u32" "$tmp/own" >/dev/null
"$PY" "$CHECK" --gt "$ds/gt-synapses.json" --gt-seg "$ds/gt" --pred "$tmp/own/chunks" \
    --min-precision 0.90 --min-recall 0.90 --min-partner 0.90 >"$tmp/own.out" ||
    fail "syn_check with segment_tool labels: $(cat "$tmp/own.out")"
echo "with segment_tool labels: $(grep '^partners' "$tmp/own.out"); $(grep 'gt ids at' "$tmp/own.out")"

# Negative controls: the evaluator must see swapped partners and duplicates.
"$PY" - "$tmp/whole/synapses.jsonl" "$tmp/swapped.jsonl" <<'EOF'
import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        o = json.loads(line)
        o["pre_id"], o["post_id"] = o["post_id"], o["pre_id"]
        o["pre_site"], o["post_site"] = o["post_site"], o["pre_site"]
        out.write(json.dumps(o, sort_keys=True, separators=(",", ":")) + "\n")
EOF
set +e
"$PY" "$CHECK" --gt "$ds/gt-synapses.json" --gt-seg "$ds/gt" --pred "$tmp/swapped.jsonl" \
    --min-precision 0.90 >"$tmp/swapped.out" 2>&1
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "swapped partners: exit $rc, want 1: $(cat "$tmp/swapped.out")"
grep -q "precision 0.0000" "$tmp/swapped.out" || fail "swapped partners scored: $(cat "$tmp/swapped.out")"
mkdir "$tmp/dup"
cp "$tmp/whole/synapses.jsonl" "$tmp/dup/a.jsonl"
head -1 "$tmp/whole/synapses.jsonl" >"$tmp/dup/b.jsonl"
set +e
"$PY" "$CHECK" --gt "$ds/gt-synapses.json" --gt-seg "$ds/gt" --pred "$tmp/dup" >/dev/null 2>"$tmp/dup.err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "duplicate id" "$tmp/dup.err" ||
    fail "duplicate ids: exit $rc: $(cat "$tmp/dup.err")"
echo "negative controls: swapped partners fail (precision 0), a duplicated id is refused"
echo "synapse_synth.sh: ok"
