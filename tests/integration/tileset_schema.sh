#!/usr/bin/env bash
# Tile sets against schemas/tileset.schema.json (validated by the jsonschema
# package, not by us): the set cnx-synth writes and the set cnx-ingest
# records are valid; corrupted sets are refused by both the schema and
# cnx-ingest --tiles.
set -euo pipefail
PY=${CNX_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$CNX_BIN/cnx-synth" --out "$tmp/s" --shape 128,128,4 --seed 2 --quiet >/dev/null
"$CNX_BIN/cnx-ingest" --tiles "$tmp/s/tiles/tiles.json" --out "$tmp/rec" -q >/dev/null
"$PY" - "$CNX_SOURCE/schemas/tileset.schema.json" "$tmp" "$CNX_BIN/cnx-ingest" <<'PY'
import copy, json, os, subprocess, sys
import jsonschema
schema = json.load(open(sys.argv[1])); tmp = sys.argv[2]; ingest = sys.argv[3]
v = jsonschema.Draft202012Validator(schema)
synth = json.load(open(os.path.join(tmp, "s/tiles/tiles.json")))
recorded = json.load(open(os.path.join(tmp, "rec/tiles.json")))
passed = failed = 0
def check(name, ok):
    global passed, failed
    if ok: passed += 1
    else:
        failed += 1; print("FAILED:", name)
check("synth tiles.json valid", v.is_valid(synth))
check("recorded tiles.json valid", v.is_valid(recorded))
check("recorded tiles carry digests",
      all("sha256" in t for s in recorded["sections"] for t in s["tiles"]))
t0 = ["sections", 0, "tiles", 0]
cases = [(["format"], "cnx.tileset/2"), (["dtype"], "float32"),
         (["resolution"], [4, 4]), (t0 + ["file"], "../x.png"),
         (t0 + ["file"], "/etc/passwd"), (t0 + ["width"], 0),
         (t0 + ["x"], 1.5), (t0 + ["heigth"], 10), (["extra"], True),
         (t0 + ["sha256"], "sha256:abc")]
for i, (path, value) in enumerate(cases):
    d = copy.deepcopy(synth); cur = d
    for p in path[:-1]: cur = cur[p]
    cur[path[-1]] = value
    f = os.path.join(tmp, "s/tiles/bad%d.json" % i)
    json.dump(d, open(f, "w"))
    r = subprocess.run([ingest, "--tiles", f, "--out", os.path.join(tmp, "out%d" % i), "-q"],
                       capture_output=True, text=True)
    one_line = len(r.stderr.strip().splitlines()) == 1
    check("%s=%r refused by schema and cnx-ingest (exit %d: %s)" % (
          "/".join(map(str, path)), value, r.returncode, r.stderr.strip()),
          not v.is_valid(d) and r.returncode == 1 and one_line)
print("tileset schema: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PY
