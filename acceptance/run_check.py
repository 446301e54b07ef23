"""Checks a finished run from its Kafka topics and its storage, without cnx
code: events and envelopes as dumped by kcat (one JSON message per line).

    run_check.py --events FILE --lineage FILE --request ID --layer DIR
                 --scale KEY --tasks N [--schemas DIR]

- every one of the N tasks of request ID has a succeeded event;
- every succeeded attempt's manifest (by the digest its event names) is in
  the lineage dump, and all manifests of one task key name exactly the same
  outputs with the same digests (one output set per task);
- every object under LAYER/SCALE is a subject of some manifest, with the
  digest of its bytes now;
- with --schemas, every event and envelope (and its statement) validates.
Prints one line per check and "N passed, N failed"; exit 1 on a failure.
"""
import argparse
import base64
import hashlib
import json
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--events", required=True)
ap.add_argument("--lineage", required=True)
ap.add_argument("--request", required=True)
ap.add_argument("--layer", required=True)
ap.add_argument("--scale", required=True)
ap.add_argument("--tasks", type=int, required=True)
ap.add_argument("--schemas")
a = ap.parse_args()

passed = failed = 0


def check(what, ok):
    global passed, failed
    print(("ok: " if ok else "FAILED: ") + what)
    if ok:
        passed += 1
    else:
        failed += 1


def lines(path):
    with open(path, "rb") as f:
        return [l for l in f.read().split(b"\n") if l.strip()]


events = [json.loads(l) for l in lines(a.events)]
mine = [e for e in events if e.get("request") == a.request]
succeeded = [e for e in mine if e["type"] == "succeeded"]
keys = {e["task_key"] for e in succeeded}
check("%d distinct tasks succeeded (want %d)" % (len(keys), a.tasks),
      len(keys) == a.tasks)

envelopes = {}
for raw in lines(a.lineage):
    envelopes["sha256:" + hashlib.sha256(raw).hexdigest()] = json.loads(raw)
statements = {}
missing = 0
for e in succeeded:
    env = envelopes.get(e["manifest"])
    if env is None:
        missing += 1
        continue
    statements[e["manifest"]] = (e["task_key"], json.loads(base64.b64decode(env["payload"])))
check("every succeeded event's manifest is on cnx.lineage (%d missing)" % missing,
      missing == 0)

by_key = {}
for task_key, st in statements.values():
    outs = tuple(sorted((s["name"], s["digest"]["sha256"]) for s in st["subject"]))
    by_key.setdefault(task_key, set()).add(outs)
multi = [k for k, v in by_key.items() if len(v) != 1]
check("each task has exactly one output set (%d tasks with several)" % len(multi),
      not multi and len(by_key) == a.tasks)

subjects = {}
for _, st in statements.values():
    for s in st["subject"]:
        subjects[s["name"]] = s["digest"]["sha256"]
scale_dir = os.path.join(a.layer, a.scale)
objects = sorted(f for f in os.listdir(scale_dir) if not f.startswith("."))
unnamed = []
for f in objects:
    name = "file://" + os.path.abspath(os.path.join(scale_dir, f))
    digest = hashlib.sha256(open(os.path.join(scale_dir, f), "rb").read()).hexdigest()
    if subjects.get(name) != digest:
        unnamed.append(f)
check("all %d output objects are named by a manifest with their digest (%d not)"
      % (len(objects), len(unnamed)), objects and not unnamed)

if a.schemas:
    import jsonschema
    from jsonschema import RefResolver

    store = {}
    for f in os.listdir(a.schemas):
        if f.endswith(".json"):
            s = json.load(open(os.path.join(a.schemas, f)))
            store[s["$id"]] = s
    def validator(name):
        s = json.load(open(os.path.join(a.schemas, name)))
        return jsonschema.Draft202012Validator(
            s, resolver=RefResolver.from_schema(s, store=store))
    ev, en, stv = validator("event.schema.json"), validator("envelope.schema.json"), \
        validator("statement.schema.json")
    bad = [e for e in events if not ev.is_valid(e)]
    check("%d events valid against event.schema.json (%d not)" % (len(events), len(bad)),
          not bad)
    bad = [k for k, env in envelopes.items() if not en.is_valid(env) or
           not stv.is_valid(json.loads(base64.b64decode(env["payload"])))]
    check("%d envelopes and statements valid against their schemas (%d not)"
          % (len(envelopes), len(bad)), not bad)

print("run check: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
