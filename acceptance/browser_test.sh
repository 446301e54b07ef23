#!/usr/bin/env bash
# Our layers in a real browser: Neuroglancer 2.37.5's built bundle (npm
# @janelia-flyem/neuroglancer, its dist/min) in Debian's headless chromium,
# driven by playwright-core (both pinned, installed by
# tests/support/neuroglancer.sh; exit 77, skipped, when node, npm or
# chromium is missing).
#  1. A small cnx-synth volume (CNX_NG_SHAPE, default 256,256,128: 2 x 2 x 1 chunks) through
#     the `predictions` workflow on the real stack (broker, controller, a
#     worker per stage): segmentation, meshes (the multi-resolution ones
#     sharded), synapses.
#  2. Two local servers (scripts/serve.py, CORS, byte ranges): one for the
#     bundle, one for the layers, so every layer read is a cross-origin one.
#  3. acceptance/ng_browser_check.js opens Neuroglancer with a state that
#     loads the image, the segmentation with its legacy meshes and every
#     synapse partner selected (so every synapse of the tables must show,
#     under each of its partners; CNX_NG_SELECT=N: the N with the most
#     synapses) and, with
#     CNX_NG_LAYERS=all (the default), the synapse annotation layer
#     (filtered by the selected segments, both relationships) and the
#     multi-resolution mesh layer; it fails on any HTTP response >= 400,
#     any failed request, any console error or page error, a selected
#     segment whose manifest or fragments were not fetched with success or
#     are not drawn (Neuroglancer's own chunk states), a selected segment
#     whose relationship index did not load or does not hold exactly the
#     synapse ids the JSON-lines tables give it; it saves a screenshot of
#     the whole viewer and of each panel.
#  4. Each panel's screenshot is checked with Pillow + numpy: not blank,
#     not uniform (luminance standard deviation and distinct colours);
#     that check refuses a uniform and a blank image (negative control).
#  5. The request's run report (cnx-report) rendered in the same chromium:
#     its full-page screenshot not blank, every stage of the request in the
#     ledger a drawn timeline row (acceptance/report_browser_check.js).
# CNX_NG_LAYERS=base leaves out the layers named ANNOTATIONS and MULTIRES
# below. Screenshots (report.png: the run report): $(dirname "$CNX_BIN")/browser-test/*.png, their paths
# printed. Runs in about a minute on two cores.
source "$(dirname "$0")/lib.sh"
DATA=$WORK/data
SHAPE=${CNX_NG_SHAPE:-256,256,128}
LAYERS=${CNX_NG_LAYERS:-all}
SHOTS=${CNX_NG_SHOTS:-$(dirname "$BIN")/browser-test}
# The layers the state loads, relative to the dataset. ANNOTATIONS and
# MULTIRES are the synapse annotation layer (neuroglancer_annotations_v1,
# relationships named in REL_FIELDS) and the multi-resolution mesh
# directory (neuroglancer_multilod_draco, loaded as a mesh-only source of a
# second segmentation layer).
IMAGE=image
SEGMENTATION=segmentation/v1
# synapse-edges writes one collection per request region (the whole volume)
IFS=, read -r SX SY SZ <<<"$SHAPE"
ANNOTATIONS=segmentation/v1/synapse_annotations/8_8_8/0-${SX}_0-${SY}_0-${SZ}
MULTIRES=segmentation/v1/mesh_multires
# relationship id in the annotation layer's info -> the synapse table's field
REL_FIELDS=pre_synaptic_cell:pre_id,post_synaptic_cell:post_id
SELECT=${CNX_NG_SELECT:-all} # segments selected: all synapse partners, or the N with most synapses

case $LAYERS in
  base | all) ;;
  *) echo "browser_test: CNX_NG_LAYERS is base or all, not '$LAYERS'" >&2; exit 2 ;;
esac
"$PY" -c 'import numpy, PIL' 2>/dev/null || { echo "browser_test: skipped: $PY lacks numpy or Pillow"; exit 77; }
set +e
TOOLS=$(bash "$SRC/tests/support/neuroglancer.sh")
rc=$?
set -e
[ "$rc" -eq 0 ] || { echo "browser_test: skipped or failed: the browser tools are not there (rc $rc)"; exit "$rc"; }
NG=$(ls -d "$TOOLS"/neuroglancer-* | head -n1)

# 1. The layers.
"$BIN/cnx-synth" --out "$DATA" --shape "$SHAPE" --seed 7 --quiet
start_broker 4
start_controller
for s in "segment segment" "segment segment-join" "segment segment-relabel" \
         "mesh mesh" "mesh mesh-manifest" "synapses synapses" "synapses synapse-edges"; do
  set -- $s
  start_stage_worker "cnx-$1" "$2" "$2-1"
done
# predictions as shipped, but with the multi-resolution meshes sharded
# (mesh-manifest's "multires_sharded"): Neuroglancer must read the sharded
# form (the unsharded one holds the same Draco fragments:
# tests/integration/shard_workflow.sh).
mkdir -p "$WORK/wf"
"$PY" - "$SRC/workflows/predictions.json" "$WORK/wf/predictions.json" <<'PY'
import json, sys
wf = json.load(open(sys.argv[1]))
st = [s for s in wf["stages"] if s["worker"] == "mesh-manifest"]
assert len(st) == 1
st[0].setdefault("parameters", {})["multires_sharded"] = True
json.dump(wf, open(sys.argv[2], "w"), indent=1)
PY
t0=$SECONDS
set +e
"$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow predictions \
  --workflows "$WORK/wf" --dataset "file://$DATA" --roi "0,0,0,$SHAPE" \
  --request ng-pred --wait --json --timeout 600 >"$WORK/pred.json" 2>"$WORK/pred.err"
RC=$?
set -e
echo "predictions on $SHAPE: $((SECONDS - t0)) s"
check "predictions exits 0 (rc $RC)" [ "$RC" -eq 0 ]
stop_workers
[ "$RC" -eq 0 ] || { cat "$WORK/pred.err" >&2; finish; exit 1; }
check "the multi-resolution meshes Neuroglancer reads are sharded ($(ls "$DATA/$MULTIRES" | grep -c '\.shard$') shards, no .index)" \
  "$PY" -c 'import json, os, sys
d = sys.argv[1]
assert json.load(open(os.path.join(d, "info")))["sharding"]["@type"] == "neuroglancer_uint64_sharded_v1"
names = os.listdir(d)
assert any(n.endswith(".shard") for n in names) and not any(n.endswith(".index") for n in names)' "$DATA/$MULTIRES"

# 2. The servers: the bundle and the layers on two origins.
serve() { # dir, name -> sets PORT
  "$PY" "$SRC/scripts/serve.py" "$1" --port 0 --quiet >"$WORK/$2.out" 2>"$WORK/$2.err" &
  PIDS+=($!)
  PORT=
  for _ in $(seq 100); do
    PORT=$(sed -n 's|^serving .* on http://127\.0\.0\.1:\([0-9]*\)/.*$|\1|p' "$WORK/$2.out" 2>/dev/null || true)
    [ -n "$PORT" ] && return 0
    sleep 0.1
  done
  echo "serve.py $1 did not start: $(cat "$WORK/$2.err")" >&2
  return 1
}
# The bundle as installed, but for an index.html naming an empty icon: the
# browser asks no /favicon.ico (a 404 the check would count).
mkdir -p "$WORK/ng"
for f in "$NG"/*; do ln -s "$f" "$WORK/ng/"; done
rm "$WORK/ng/index.html"
sed 's|<head>|<head><link rel="icon" href="data:,">|' "$NG/index.html" >"$WORK/ng/index.html"
grep -q 'rel="icon"' "$WORK/ng/index.html" || { echo "browser_test: $NG/index.html has no <head>" >&2; exit 1; }
serve "$WORK/ng" ng
NG_URL=http://127.0.0.1:$PORT/index.html
serve "$DATA" data
DATA_URL=http://127.0.0.1:$PORT

# 3. The state and what each selected segment must show: the segments with
# the most synapses (pre or post) that have a mesh; for each, per
# relationship, the synapse ids the tables give it.
"$PY" - "$DATA" "$SEGMENTATION" "$REL_FIELDS" "$SELECT" >"$WORK/expect.json" <<'PY'
import json, os, sys
data, seg, rel_fields = sys.argv[1], sys.argv[2], sys.argv[3]
n = None if sys.argv[4] == "all" else int(sys.argv[4])
rels = dict(kv.split(":") for kv in rel_fields.split(","))
syn = [json.loads(l) for dp, _, fs in os.walk(os.path.join(data, seg, "synapses"))
       for f in sorted(fs) for l in open(os.path.join(dp, f))]
count = {}
for s in syn:
    for field in rels.values():
        if s[field]:
            count[s[field]] = count.get(s[field], 0) + 1
meshed = [i for i in sorted(count, key=lambda i: (-count[i], i))
          if os.path.exists(os.path.join(data, seg, "mesh", "%d:0" % i))]
ids = sorted(meshed if n is None else meshed[:n])
if n is None and len(meshed) < len(count):
    sys.exit("%d of %d synapse partners have no mesh" % (len(count) - len(meshed), len(count)))
if n is not None and len(ids) < n:
    sys.exit("want %d segments with synapses and meshes, found %d" % (n, len(ids)))
expect = {str(i): {r: sorted(s["id"] for s in syn if s[f] == i) for r, f in rels.items()}
          for i in ids}
if n is None:
    # every synapse of the tables is expected under at least one partner
    seen = {x for e in expect.values() for v in e.values() for x in v}
    if seen != {s["id"] for s in syn}:
        sys.exit("%d synapses have no partner segment to select" % (len(syn) - len(seen)))
json.dump({"segments": [str(i) for i in ids], "synapses": expect,
           "table_synapses": len(syn)}, sys.stdout)
PY
echo "selected: $(jq_py "$WORK/expect.json" '", ".join("%s (%d synapses)" % (i, sum(len(v) for v in d["synapses"][i].values())) for i in d["segments"])') of $(jq_py "$WORK/expect.json" 'd["table_synapses"]') synapses in the tables"
mkdir -p "$SHOTS"
rm -f "$SHOTS"/*.png "$SHOTS"/panels.json
layers=(--image "$IMAGE" --segmentation "$SEGMENTATION")
[ "$LAYERS" = all ] && layers+=(--annotations "$ANNOTATIONS" --multires "$MULTIRES")
set +e
NODE_PATH=$TOOLS/node_modules node "$SRC/acceptance/ng_browser_check.js" \
  --ng "$NG_URL" --data "$DATA_URL" --expect "$WORK/expect.json" --out "$SHOTS" \
  "${layers[@]}" 2>&1 | tee "$WORK/browser.log"
RC=${PIPESTATUS[0]}
set -e
check "Neuroglancer: every request, console message, mesh and synapse check (rc $RC)" [ "$RC" -eq 0 ]

# 4. The panels, independently of the browser: Pillow + numpy.
check "every panel's screenshot is neither blank nor uniform (Pillow + numpy)" \
  "$PY" "$SRC/acceptance/png_check.py" "$SHOTS"/panel-*.png
# ... which can fail: a uniform panel and a blank one are refused.
"$PY" -c 'import sys; from PIL import Image
Image.new("RGB", (64, 64), (40, 40, 40)).save(sys.argv[1])
Image.new("RGB", (512, 361), (0, 0, 0)).save(sys.argv[2])' "$WORK/uniform.png" "$WORK/blank.png"
check "png_check.py refuses a uniform and a blank panel" \
  bash -c '! "$1" "$2" "$3" >/dev/null && ! "$1" "$2" "$4" >/dev/null' _ \
  "$PY" "$SRC/acceptance/png_check.py" "$WORK/uniform.png" "$WORK/blank.png"
# 5. The request's run report (cnx-report, docs/report.md) in the same
# chromium: a full-page screenshot not blank (Pillow + numpy), and every
# stage of the request in the ledger (sqlite3) a drawn timeline row with
# drawn bars. About 5 s.
"$BIN/cnx-report" --ledger "$WORK/ledger.db" --request ng-pred --out "$WORK/report" \
  --layer-url-base "$DATA_URL" >/dev/null
set +e
NODE_PATH=$TOOLS/node_modules node "$SRC/acceptance/report_browser_check.js" \
  "$WORK/report/index.html" "$WORK/report/report.png" >"$WORK/report/rows.json" 2>"$WORK/report/browser.err"
RC=$?
set -e
check "the run report loads in chromium, fetching nothing (rc $RC)" \
  "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); print("  " + "; ".join(d["problems"])) if d["problems"] else None; sys.exit(bool(d["problems"]))' "$WORK/report/rows.json"
cp "$WORK/report/report.png" "$SHOTS/report.png" 2>/dev/null || true
check "the run report's full-page screenshot is neither blank nor uniform (Pillow + numpy)" \
  "$PY" "$SRC/acceptance/png_check.py" "$SHOTS/report.png"
check "every stage of ng-pred in the ledger has a drawn timeline row with its bars" \
  "$PY" - "$WORK/ledger.db" "$WORK/report/rows.json" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect("file:%s?mode=ro" % sys.argv[1], uri=True)
want = {s: n for s, n in db.execute(
    "SELECT s.stage, (SELECT count(*) FROM attempts a JOIN tasks t ON t.task_key = a.task_key"
    " AND t.request = a.request WHERE t.request = s.request AND t.stage = s.stage)"
    " FROM stages s WHERE s.request = 'ng-pred'")}
rows = {r["stage"]: r for r in json.load(open(sys.argv[2]))["rows"]}
bad = [s for s in want if s not in rows or rows[s]["width"] <= 0 or rows[s]["height"] <= 0
       or rows[s]["bars_drawn"] < want[s]]
print("  %d stages in the ledger, %d timeline rows drawn: %s" % (len(want), len(rows), ", ".join(
    "%s (%d of %d attempts drawn)" % (s, rows.get(s, {}).get("bars_drawn", 0), want[s]) for s in want)))
sys.exit(1 if bad or not want else 0)
PY
echo "run report: $WORK/report/index.html (screenshot $WORK/report/report.png, kept with KEEP_WORK=1)"
for f in "$SHOTS"/*.png; do echo "screenshot: $f"; done
finish
