#!/usr/bin/env bash
# The join as a tree writes the bytes of the one-task join. A 256x256x128
# cnx-synth dataset in chunks of 64^3 goes through the real stack (broker,
# controller, one worker per stage) three times: workflows/segmentation.json
# without its mesh stages (one join task reading every face record) into
# fragments/v1 + segmentation/v1, and workflows/segmentation-tree.json
# (join-blocks, then the top reading the block summaries) with blocks of
# 2x2x2 chunks into v2 and of 3x2x1 chunks (blocks cut short at the
# volume's faces) into v3. Checked:
#  1. the three requests done, with 4 and 8 join-blocks tasks; their
#     progress lines count as running only tasks a worker has started
#     (at most 1 per stage here; it counted every released task);
#  2. fragments and segmentation (chunks, mappings, segment properties,
#     infos) byte-identical, object for object, across the three;
#  3. one block summary per join-blocks task, each a subject of a signed
#     manifest, and the summaries' layer holds nothing else;
#  4. the top refuses a damaged summary: a request whose join-blocks output
#     is spoiled on disk before the top reads it dead-letters the top's task
#     with a one-line reason naming the summary (digest mismatch), and
#     nothing of segmentation/v4 is written.
source "${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}/acceptance/lib.sh"
DATA=$WORK/data
for tool in kcat sqlite3; do
  command -v "$tool" >/dev/null || { echo "segment_join_tree.sh: $tool is not installed" >&2; exit 1; }
done

"$BIN/cnx-synth" --out "$DATA" --shape 256,256,128 --chunk 64,64,64 --seed 5 --quiet >/dev/null

mkdir -p "$WORK/wf"
"$PY" - "$SRC/workflows" "$WORK/wf" <<'PY'
import json, sys
src, out = sys.argv[1], sys.argv[2]
def variant(base, name, version, blocks=None):
    wf = json.load(open("%s/%s.json" % (src, base)))
    wf["name"] = name
    wf["stages"] = [s for s in wf["stages"] if s["worker"] not in ("mesh", "mesh-manifest")]
    for st in wf["stages"]:
        st["output"]["layer"] = st["output"]["layer"].replace("/v1", "/v%d" % version)
        if st["kind"] == "map":
            st["task_size"] = [64, 64, 64]
        if st["worker"] == "segment-join-block":
            st["task_size"] = blocks
    json.dump(wf, open("%s/%s.json" % (out, name), "w"), indent=1)
variant("segmentation", "single", 1)
variant("segmentation-tree", "tree-2x2x2", 2, [128, 128, 128])
variant("segmentation-tree", "tree-3x2x1", 3, [192, 128, 64])
variant("segmentation-tree", "tree-spoiled", 4, [128, 128, 128])
PY

start_broker 2
start_controller
start_stage_worker cnx-segment segment seg
start_stage_worker cnx-segment segment-join-block blocks
start_stage_worker cnx-segment segment-join join
start_stage_worker cnx-segment segment-relabel relabel

reprocess() { request_over 0,0,0,256,256,128 300 "$@"; } # workflow, request id
tasks_of() { jq_py "$WORK/$1.json" '[(s["stage"], s["done"]) for s in d["stages"]]'; }

# ---- 1. the three requests
reprocess single single
check "one-task join: done (rc $RC)" [ "$RC" -eq 0 ]
reprocess tree-2x2x2 tree4
check "tree, blocks of 2x2x2 chunks: done (rc $RC)" [ "$RC" -eq 0 ]
check "tree, blocks of 2x2x2 chunks: 4 join-blocks tasks, one top" \
  [ "$(tasks_of tree4)" = "[('fragments', 32), ('join-blocks', 4), ('join', 1), ('relabel', 32)]" ]
reprocess tree-3x2x1 tree8
check "tree, blocks of 3x2x1 chunks: done (rc $RC)" [ "$RC" -eq 0 ]
check "tree, blocks of 3x2x1 chunks: 8 join-blocks tasks, cut short at the far x face" \
  [ "$(tasks_of tree8)" = "[('fragments', 32), ('join-blocks', 8), ('join', 1), ('relabel', 32)]" ]
[ "$RC" -eq 0 ] || { tail -n 20 "$WORK"/*.log "$WORK"/*.err >&2 || true; }

check "progress counts as running only what a worker started: at most 1 per stage, one worker each ($(cat "$WORK"/single.err "$WORK"/tree4.err "$WORK"/tree8.err | grep -o '[0-9]* running' | sort -n | tail -1 || true) at most)" \
  bash -c 'n=$(cat "$@" | grep -o "[0-9]* running" | grep -c .); [ "$n" -gt 0 ] && ! cat "$@" | grep -o "[0-9]* running" | grep -qv "^[01] running"' \
  _ "$WORK/single.err" "$WORK/tree4.err" "$WORK/tree8.err"

# ---- 2. the same bytes
for v in 2 3; do
  check "fragments/v$v = fragments/v1, object for object" same_tree "$DATA/fragments/v1" "$DATA/fragments/v$v"
  check "segmentation/v$v (chunks, mappings, properties) = the one-task join's" same_tree "$DATA/segmentation/v1" "$DATA/segmentation/v$v"
done
check "the segment properties list more than 20 segments, some in several chunks" "$PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))["inline"]
tags = d["properties"][2]["values"]
assert len(d["ids"]) > 20 and sum(3 in t for t in tags) > 5, (len(d["ids"]), tags[:5])' \
  "$DATA/segmentation/v1/segment_properties/info"

# ---- 3. the summaries
check "one summary per join-blocks task (4, then 8), nothing else in their layers" bash -c '
  [ "$(find "$1/segmentation-join/v2/blocks" -type f | wc -l)" -eq 4 ] &&
  [ "$(find "$1/segmentation-join/v3/blocks" -type f | wc -l)" -eq 8 ] &&
  [ -z "$(find "$1/segmentation-join/v2" -type f ! -path "*/blocks/*" ! -path "*/lineage/*" ! -name info ! -name provenance ! -name ".tmp.*")" ]' _ "$DATA"
check "every summary is a subject of a signed manifest" "$PY" -c '
import base64, glob, json, sys
named = set()
for f in glob.glob(sys.argv[1] + "/segmentation-join/v2/lineage/*/*.dsse.json"):
    st = json.loads(base64.b64decode(json.load(open(f))["payload"]))
    named |= {s["name"].rsplit("/", 1)[1] for s in st["subject"] if "/blocks/" in s["name"]}
files = {p.rsplit("/", 1)[1] for p in glob.glob(sys.argv[1] + "/segmentation-join/v2/blocks/*/*")}
assert files and files == named, (files, named)' "$DATA"

# ---- 4. a damaged summary is refused by the top
stop_workers
start_stage_worker cnx-segment segment seg
start_stage_worker cnx-segment segment-join-block blocks
start_stage_worker cnx-segment segment-relabel relabel
# no join worker yet: the summaries are written, then spoiled, then read
request_over 0,0,0,256,256,128 5 tree-spoiled spoiled || true
for _ in $(seq 120); do
  [ "$(find "$DATA/segmentation-join/v4/blocks" -type f ! -name ".tmp.*" 2>/dev/null | wc -l)" -eq 4 ] && break
  sleep 1
done
f=$(find "$DATA/segmentation-join/v4/blocks" -type f | LC_ALL=C sort | head -1)
check "the spoiled request wrote its 4 summaries" [ -n "$f" ]
chmod u+w "$f" 2>/dev/null || true
printf 'X' | dd of="$f" bs=1 seek=20 conv=notrunc status=none
start_stage_worker cnx-segment segment-join join
for _ in $(seq 90); do reason_of spoiled | grep -q . && break; sleep 1; done
check "the top's task is dead-lettered naming the summary: $(reason_of spoiled)" \
  bash -c 'reason_of() { :; }; r=$1; echo "$r" | grep -q "blocks/" && [ "$(echo "$r" | wc -l)" -eq 1 ]' _ "$(reason_of spoiled)"
check "nothing of segmentation/v4 was written" bash -c '[ ! -e "$1/segmentation/v4/segment_properties" ]' _ "$DATA"
finish
