"""Cross-check the C task parser against schemas/task.schema.json.

Generates task messages (the valid one and many single-field corruptions,
both the ones the C unit test uses and more), validates each with the
`jsonschema` package (Draft 2020-12), parses each with the C parser
(tests/support/task_check), and requires the two to agree on accept/reject.
For accepted tasks it also recomputes the task key in Python from the rule
in DESIGN.md and requires the C key to match.
"""
import copy
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import jsonschema

src = os.environ["CNX_SOURCE"]
checker = os.path.join(os.environ["CNX_SUPPORT"], "task_check")
schema = json.load(open(os.path.join(src, "schemas/task.schema.json")))
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)
valid = json.load(open(os.path.join(src, "tests/data/tasks/valid.json")))
obj0 = "8_8_8/0-128_128-256_256-384"
good_digest = valid["inputs"]["boundary"]["objects"][obj0]

def setp(doc, path, value):
    d = copy.deepcopy(doc)
    cur = d
    for p in path[:-1]:
        cur = cur[p]
    if value is DELETE:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return d

DELETE = object()
cases = [("valid", valid)]
mutations = [
    (["schema"], "cnx.task/2"), (["schema"], DELETE), (["request"], ""),
    (["request"], "has space"), (["request"], 42), (["request"], "a" * 129),
    (["stage"], "Segment"), (["stage"], "9lives"), (["stage"], DELETE),
    (["stage"], "a" * 33), (["kernel_version"], 0), (["kernel_version"], 1.5),
    (["kernel_version"], "3"), (["roi"], [0, 0, 0]), (["roi"], DELETE),
    (["roi", "min"], [0, 0]), (["roi", "min"], [0, 0, "0"]),
    (["roi", "extra"], 1), (["halo"], -1), (["halo"], 1000), (["halo"], DELETE),
    (["inputs"], []), (["inputs"], DELETE), (["inputs", "boundary"], 7),
    (["inputs", "boundary", "layer"], "/no/scheme"),
    (["inputs", "boundary", "layer"], "file:///a/../etc"),
    (["inputs", "boundary", "layer"], "s3://bucket/x"),
    (["inputs", "boundary", "scale"], "../up"),
    (["inputs", "boundary", "scale"], "a//b"),
    (["inputs", "boundary", "scale"], DELETE),
    (["inputs", "boundary", "objects"], []),
    (["inputs", "boundary", "objects", obj0], "sha256:abc"),
    (["inputs", "boundary", "objects", obj0], good_digest.upper()),
    (["inputs", "boundary", "objects", "../../etc/passwd"], good_digest),
    (["inputs", "boundary", "objects", "/abs"], good_digest),
    (["inputs", "boundary", "objects", "a/./b"], good_digest),
    (["inputs", "boundary", "objects", "ok/name.bin"], good_digest),
    (["inputs", "boundary", "unknown"], 1), (["inputs", "Bad Role"], {}),
    (["inputs", "image"], {"layer": "file:///x", "scale": "s", "objects": {}}),
    (["output"], "file:///x"), (["output", "layer"], DELETE),
    (["output", "scale"], "/abs"), (["output", "extra"], True),
    (["parameters"], [1]), (["parameters"], DELETE),
    (["parameters"], {"nested": {"b": [1, 2.5, None]}}),
    (["deadline"], "tomorrow"), (["deadline"], "2026-11-23T10:00:00+01:00"),
    (["deadline"], "2026-11-23T10:00:00.250Z"), (["deadline"], DELETE),
    (["retry_budget"], -1), (["retry_budget"], True), (["retry_budget"], 100),
    (["priority"], "now"), (["priority"], "urgent"), (["surprise"], 1),
]
for path, value in mutations:
    name = "/".join(path) + "=" + ("<deleted>" if value is DELETE else json.dumps(value))
    cases.append((name, setp(valid, path, value)))
roi_bad = setp(valid, ["roi", "max"], [128, 256, 256])  # max == min: C-only rule
semantic_only = {"roi max<=min": roi_bad}

def key_of(task):
    material = {
        "halo": task.get("halo", 2),
        "inputs": {r: {"objects": i["objects"]} for r, i in task["inputs"].items()},
        "kernel_version": task["kernel_version"],
        "parameters": task["parameters"],
        "roi": task["roi"],
        "stage": task["stage"],
    }
    text = json.dumps(material, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()

passed = failed = 0
with tempfile.TemporaryDirectory() as tmp:
    files = []
    for i, (name, doc) in enumerate(cases + list(semantic_only.items())):
        p = os.path.join(tmp, "%03d.json" % i)
        with open(p, "w") as f:
            json.dump(doc, f)
        files.append((p, name, doc))
    out = subprocess.run([checker] + [p for p, _, _ in files], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    verdicts = {line.split("\t")[0]: line.split("\t")[1:] for line in out}
    for p, name, doc in files:
        verdict, detail = verdicts[p]
        if name in semantic_only:
            ok = verdict == "reject"
            why = "C must refuse what the schema cannot express"
        else:
            schema_ok = validator.is_valid(doc)
            ok = (verdict == "accept") == schema_ok
            why = "schema says %s, C says %s (%s)" % (
                "valid" if schema_ok else "invalid", verdict, detail)
            if ok and verdict == "accept" and detail != key_of(doc):
                ok, why = False, "task key %s != python %s" % (detail, key_of(doc))
        if ok:
            passed += 1
        else:
            failed += 1
            print("MISMATCH %s: %s" % (name, why))
print("task schema cross-check: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
