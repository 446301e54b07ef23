# Sourced by tests/integration/synapse_annotations.sh and synapse_annotations_sharded.sh (after
# acceptance/lib.sh), with LAYER (the output layer), COLL (the annotation
# collection), REF (tests/py/annotations_ref.py) and reprocess (request id)
# set: the checks both make of a collection, whatever its layout.

# cnx-verify passes on the layer, and every file of the collection is the
# subject of a signed manifest under the layer's lineage/.
check_lineage_covers() { # what the files are (for the message)
  local rc=0
  "$BIN/cnx-verify" --trust "$WORK/trust" --ledger "$WORK/ledger.db" --quiet \
    --layer "file://$LAYER" >"$WORK/verify.txt" 2>&1 || rc=$?
  tail -n 3 "$WORK/verify.txt"
  check "cnx-verify --layer gt-synapses/v1 exits 0 (rc $rc)" [ "$rc" -eq 0 ]
  check "every $1 of the collection is a subject of a signed manifest" "$PY" -c '
import base64, json, os, sys
layer, coll = sys.argv[1], sys.argv[2]
subjects = set()
for dp, _, fs in os.walk(os.path.join(layer, "lineage")):
    for f in fs:
        st = json.loads(base64.b64decode(json.load(open(os.path.join(dp, f)))["payload"]))
        subjects |= {s["name"] for s in st["subject"]}
files = ["file://" + os.path.join(dp, f) for dp, _, fs in os.walk(coll) for f in fs]
missing = [f for f in files if f not in subjects]
print("  %d files, %d not in a manifest" % (len(files), len(missing)))
assert files and not missing, missing[:3]' "$LAYER" "$COLL"
}

# The request again: done, every repeated task bit-identical.
check_second_run() { # request id
  reprocess "$1"
  check "second run done (rc $RC)" [ "$RC" -eq 0 ]
  check "second run: every repeated task bit-identical" "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
print("  %d of %d repeated tasks identical" % (d["identical"], d["repeated"]))
assert d["repeated"] >= 2 and d["identical"] == d["repeated"], (d["repeated"], d["identical"])
assert not d["violations"], d["violations"]' "$WORK/$1.json"
}

broken() { # name, python editing a copy of COLL at sys.argv[1]: the reader must exit 1
  local copy=$WORK/broken-$1 rc=0
  rm -rf "$copy"
  cp -r "$COLL" "$copy"
  "$PY" -c "$2" "$copy"
  "$PY" "$REF" "$copy" "$LAYER/synapses" >/dev/null 2>"$WORK/broken-$1.err" || rc=$?
  echo "  $1: exit $rc: $(cat "$WORK/broken-$1.err")"
  [ "$rc" -eq 1 ]
}
