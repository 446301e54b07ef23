#!/usr/bin/env bash
# cnx-tune end to end on a small cnx-synth cube (docs/tune.md):
#  - the tuned workflow is written, the same bytes on a second run, and is
#    accepted by the workflow parser and the planner (plan_tool, which runs
#    the segment worker's plan-time checks) and by schemas/workflow.schema.json
#    (Python jsonschema); only the segment and segment-join stages changed;
#  - the chosen parameters, run again independently (segment_tool) and
#    scored by scikit-image's variation_of_information (tests/py: gt 0
#    ignored, log2), give the VI cnx-tune printed (within 1e-6), and no
#    worse than the base workflow's parameters on the tuning cube;
#  - the raw-image path (--raw, the membrane filter searched too) the same;
#  - bad arguments exit 2 with one line, a missing layer 1.
# Env: CNX_BIN, CNX_SUPPORT, CNX_SOURCE, CNX_PYTHON.
set -euo pipefail
: "${CNX_BIN:?}" "${CNX_SUPPORT:?}" "${CNX_SOURCE:?}"
PY=${CNX_PYTHON:-/usr/bin/python3}
TUNE="$CNX_BIN/cnx-tune"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "tune.sh: FAILED: $*" >&2
    exit 1
}

# Anisotropic (8 x 8 x 16 nm): the search must run at the cube's
# resolution, which segment_tool below takes from the layer too.
"$CNX_BIN/cnx-synth" --out "$tmp/synth" --shape 96,96,48 --seed 11 \
    --resolution 8,8,16 --quiet >/dev/null
base_wf="$CNX_SOURCE/workflows/segmentation.json"

# --- the boundary path ------------------------------------------------------
roi=0,0,0,96,96,48
"$TUNE" --gt "$tmp/synth/gt" --input "$tmp/synth/boundary" --roi "$roi" \
    --workflow "$base_wf" --out "$tmp/tuned.json" --quiet \
    >"$tmp/tune.out" || fail "cnx-tune: $(cat "$tmp/tune.out")"
cat "$tmp/tune.out"
grep -q '^merge_threshold  *vi_split  *vi_merge' "$tmp/tune.out" ||
    fail "no merge_threshold curve"
[ "$(grep -cE '^0\.[1-9] ' "$tmp/tune.out")" -eq 9 ] ||
    fail "the curve has not 9 lines"
grep -qE '^evaluations ([1-9]|[1-5][0-9]|60) of 60 ' "$tmp/tune.out" ||
    fail "over the budget: $(grep '^evaluations' "$tmp/tune.out")"
"$TUNE" --gt "file://$tmp/synth/gt" --input "$tmp/synth/boundary" \
    --roi "$roi" --workflow "$base_wf" --out "$tmp/again.json" --quiet \
    >/dev/null
cmp "$tmp/tuned.json" "$tmp/again.json" || fail "a second run wrote other bytes"

# The tuned workflow scored by cnx-tune itself (--budget 1: its own
# parameters only, the check on a held-out cube of docs/tune.md) gives
# the VI it was tuned to; without --out nothing is written.
"$TUNE" --gt "$tmp/synth/gt" --input "$tmp/synth/boundary" --roi "$roi" \
    --workflow "$tmp/tuned.json" --budget 1 --quiet >"$tmp/check.out"
[ "$(grep '^base: ' "$tmp/check.out" | cut -d' ' -f2-)" = \
  "$(grep '^tuned: ' "$tmp/tune.out" | cut -d' ' -f2-)" ] ||
    fail "the tuned workflow scores $(grep '^base: ' "$tmp/check.out")"
! grep -q '^wrote' "$tmp/check.out" || fail "wrote a file without --out"

"$CNX_SUPPORT/plan_tool" --workflow "$tmp/tuned.json" \
    --dataset "file://$tmp/synth" >"$tmp/plan.out" ||
    fail "the planner refused the tuned workflow"

check() { # OUT WORKFLOW ROI
    "$PY" - "$1" "$2" "$3" "$CNX_SOURCE" "$CNX_SUPPORT/segment_tool" \
        "$tmp/synth" "$base_wf" <<'EOF'
import json, math, os, subprocess, sys
import jsonschema
import numpy as np
out, wf_path, roi, src, tool, data, base_path = sys.argv[1:]
sys.path.insert(0, os.path.join(src, "tests", "py"))
import metrics_ref
from layer_ref import read_layer

def fail(msg):
    sys.exit("tune.sh: FAILED: " + msg)

lines = dict(l.split(": ", 1) for l in open(out).read().splitlines()
             if l.startswith(("base: ", "tuned: ", "parameters: ")))
def printed(what):
    f = lines[what].split()
    return float(f[1]), float(f[3])

wf = json.load(open(wf_path))
base = json.load(open(base_path))
schema = json.load(open(os.path.join(src, "schemas", "workflow.schema.json")))
jsonschema.validate(wf, schema)
params = json.loads(lines["parameters"])
assert len(wf["stages"]) == len(base["stages"])
for st, b in zip(wf["stages"], base["stages"]):
    if st["worker"] in ("segment", "segment-join"):
        if st["parameters"] != params:
            fail("stage %s: parameters %r" % (st["name"], st["parameters"]))
        st = dict(st, parameters=b["parameters"])
    if st != b:
        fail("stage %s changed beyond its parameters" % st["name"])
if not wf["description"].startswith(base["description"] + " Parameters tuned by cnx-tune on "):
    fail("description: %r" % wf["description"])

x0, y0, z0, x1, y1, z1 = map(int, roi.split(","))
_, gt = read_layer(os.path.join(data, "gt"))
gt = gt[z0:z1, y0:y1, x0:x1]

def vi(p):
    r = subprocess.run([tool, "synth", data, json.dumps(p), roi, out + ".u32"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail("segment_tool: " + r.stderr)
    seg = np.fromfile(out + ".u32", dtype="<u4").reshape(gt.shape)
    s, m, _, _, _, _ = metrics_ref.scores(gt.ravel(), seg.ravel().astype(np.uint64))
    return s, m

base_params = [s for s in base["stages"] if s["worker"] == "segment"][0]["parameters"]
if "raw_input" in params:
    base_params = dict(base_params, raw_input=params["raw_input"])
for what, p in (("tuned", params), ("base", base_params)):
    s, m = vi(p)
    ps, pm = printed(what)
    print("%s: skimage split %.9f merge %.9f, cnx-tune printed %.9f %.9f"
          % (what, s, m, ps, pm))
    if abs(s - ps) > 1e-6 or abs(m - pm) > 1e-6:
        fail("%s: skimage's VI differs from the printed one" % what)
    if what == "tuned":
        tuned_sum = s + m
    elif tuned_sum > s + m + 1e-9:
        fail("the tuned VI %.6f is worse than the base's %.6f" % (tuned_sum, s + m))
EOF
}
check "$tmp/tune.out" "$tmp/tuned.json" "$roi" ||
    fail "the boundary path's check"

# --- the raw-image path -----------------------------------------------------
roi_raw=8,8,0,88,88,48
"$TUNE" --gt "$tmp/synth/gt" --input "$tmp/synth/image" --roi "$roi_raw" \
    --raw --workflow "$base_wf" --out "$tmp/raw.json" --budget 24 --quiet \
    >"$tmp/raw.out" || fail "cnx-tune --raw: $(cat "$tmp/raw.out")"
cat "$tmp/raw.out"
grep -q '"raw_input": true' "$tmp/raw.json" || fail "raw_input not written"
grep -qE '^evaluations 24 of 24 \(boundary maps [2-9]\)' "$tmp/raw.out" ||
    fail "the filter was not searched: $(grep '^evaluations' "$tmp/raw.out")"
check "$tmp/raw.out" "$tmp/raw.json" "$roi_raw" || fail "the raw path's check"

# --- usage and failures -----------------------------------------------------
"$TUNE" --help >"$tmp/help"
for opt in --gt --gt-scale --input --input-scale --roi --workflow \
    --workflows --out --budget --raw --quiet --help "Exit status"; do
    grep -q -- "$opt" "$tmp/help" || fail "--help does not mention $opt"
done
expect() { # CODE PATTERN ARGS...
    local code=$1 pattern=$2 rc=0
    shift 2
    "$TUNE" "$@" >/dev/null 2>"$tmp/err" || rc=$?
    [ "$rc" -eq "$code" ] || fail "$*: exit $rc, want $code"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$*: not one line: $(cat "$tmp/err")"
    grep -q -- "$pattern" "$tmp/err" || fail "$*: $(cat "$tmp/err")"
}
# Without --workflow: segmentation.json from $CNX_WORKFLOWS.
export CNX_WORKFLOWS="$CNX_SOURCE/workflows"
args=(--gt "$tmp/synth/gt" --input "$tmp/synth/boundary" --out "$tmp/x.json")
expect 2 "missing --gt" --input "$tmp/synth/boundary" --out "$tmp/x.json"
expect 2 "--budget '0'" "${args[@]}" --budget 0
expect 2 "--roi '1,2,3'" "${args[@]}" --roi 1,2,3
expect 2 "roi 0,0,0,97,96,48: not a box inside" "${args[@]}" --roi 0,0,0,97,96,48
expect 2 "unknown option '--bogus'" "${args[@]}" --bogus
expect 2 "no stage has worker \"segment\"" "${args[@]}" \
    --workflow "$CNX_SOURCE/workflows/pyramid.json"
expect 2 "must be a uint64 or uint32" --gt "$tmp/synth/image" \
    --input "$tmp/synth/boundary" --out "$tmp/x.json"
expect 1 "gt file://$tmp/synth/nope" --gt "$tmp/synth/nope" \
    --input "$tmp/synth/boundary" --out "$tmp/x.json"
[ ! -e "$tmp/x.json" ] || fail "a failed run wrote its --out"
echo "tune.sh: ok"
