#!/usr/bin/env python3
"""Write the fuzzers' seed corpora from a captured run (make_corpus.sh).

    make_corpus.py ROOT RUN_DIR OUT

ROOT is the source tree, RUN_DIR what make_corpus.sh left (log/<topic>.jsonl
as `kcat -J` prints it, ledger.db, data/, cseg/), OUT the corpus root: one
directory per parser, each seed named by the SHA-1 of its bytes. The input
format of each harness is described at the top of tests/fuzz/fuzz_<parser>.c.
"""
import base64
import glob
import hashlib
import json
import os
import sqlite3
import struct
import sys

ROOT, RUN, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
MAX_SEED = 64 * 1024  # bytes: a seed bigger than this is left out
counts = {}


def put(parser, data, limit=None):
    """Add one seed (bytes or str) to OUT/parser, at most limit per parser."""
    if isinstance(data, str):
        data = data.encode()
    if len(data) > MAX_SEED:
        return
    if limit is not None and counts.get(parser, 0) >= limit:
        return
    d = os.path.join(OUT, parser)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, hashlib.sha1(data).hexdigest())
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(data)
        counts[parser] = counts.get(parser, 0) + 1


def canon(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def log(topic):
    path = os.path.join(RUN, "log", topic + ".jsonl")
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip()]


def read(path):
    with open(path, "rb") as f:
        return f.read()


requests = log("cnx.requests")
events = log("cnx.events")
lineage = log("cnx.lineage")
tasks = []
for path in sorted(glob.glob(os.path.join(RUN, "log", "cnx.tasks.*.jsonl"))):
    tasks += [json.loads(line)["payload"] for line in open(path) if line.strip()]

# ---- task ----------------------------------------------------------------
put("task", read(os.path.join(ROOT, "tests/data/tasks/valid.json")))
seen_stage = {}
for t in tasks:  # a few per stage: the montage stage has one per section
    stage = json.loads(t)["stage"]
    if seen_stage.get(stage, 0) < 2:
        seen_stage[stage] = seen_stage.get(stage, 0) + 1
        put("task", t)
        put("params", {"montage": b"\x00", "segment": b"\x01",
                       "synapses": b"\x02"}.get(stage, b"\x01")
            + canon(json.loads(t).get("parameters", {})).encode())

# ---- workflow, params ----------------------------------------------------
for path in sorted(glob.glob(os.path.join(ROOT, "workflows", "*.json"))):
    put("workflow", read(path))
    for st in json.load(open(path))["stages"]:
        pick = {"montage": 0, "segment": 1, "segment-join": 1,
                "segment-relabel": 1, "synapses": 2, "synapse-edges": 2}
        if st["worker"] in pick:
            put("params", bytes([pick[st["worker"]]]) +
                canon(st.get("parameters", {})).encode())
for p in ['{"search":16,"min_peak_ratio":1.5,"max_residual":3,"normalize":true}',
          '{"seed_method":"minima","filter_sigma_nm":6,"merge_threshold":0.5,'
          '"min_size_nm3":5120,"mode":"2d","raw_input":false}',
          '{"raw_input":true,"mode":"sections","filter_sigma_nm":12,'
          '"filter_background_nm":40,"seed_distance_nm":10000}',
          # kernel version 1's voxel-unit keys, refused by name
          '{"seed_method":"minima","filter_sigma":1.0,"merge_threshold":0.5,'
          '"min_size":10,"sections":1,"raw_input":false}',
          '{"cleft_threshold":100,"psd_threshold":90,"min_size":5,'
          '"partner_radius":3}']:
    for i in range(3):
        put("params", bytes([i]) + p.encode())

# ---- tile sets, info, synapse tables, meshes ---------------------------------
data = os.path.join(RUN, "data")
for path in [os.path.join(data, "tiles", "tiles.json"),
             os.path.join(data, "tileset", "tiles.json")]:
    if os.path.exists(path):
        ts = json.load(open(path))
        # The first sections only: a seed's size is paid on every execution.
        put("tileset", json.dumps(dict(ts, sections=ts["sections"][:6])))
        # A small one: the first two sections, two tiles in one of them.
        small = dict(ts, sections=ts["sections"][:2])
        put("tileset", canon(small))
        if small["sections"]:
            t0 = small["sections"][0]["tiles"][0]
            t1 = dict(t0, id=t0["id"] + "-b", file=t0["file"].replace(
                ".png", "-b.png"), x=t0["x"] + t0["width"] // 2)
            two = dict(small, sections=[dict(small["sections"][0],
                                             tiles=[t0, t1])])
            put("tileset", json.dumps(two, indent=1))
for path in sorted(glob.glob(os.path.join(data, "**", "info"), recursive=True)):
    put("info", read(path))
for path in sorted(glob.glob(os.path.join(data, "**", "synapses", "*", "*"),
                             recursive=True)):
    text = read(path)
    put("synapse_table", text)
    lines = text.splitlines(keepends=True)
    put("synapse_table", b"".join(lines[:1]))
    put("synapse_table", b"".join(lines[:3]))
put("synapse_table", b"")
frags = [p for p in glob.glob(os.path.join(data, "**", "mesh", "*:*:*"),
                              recursive=True)]
for path in sorted(frags, key=os.path.getsize)[:6]:
    put("mesh_legacy", read(path))
# A tetrahedron, as cnx_mesh_legacy_encode writes it.
verts = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)]
tris = [(0, 2, 1), (0, 1, 3), (0, 3, 2), (1, 2, 3)]
put("mesh_legacy", struct.pack("<I", 4) +
    b"".join(struct.pack("<3f", *v) for v in verts) +
    b"".join(struct.pack("<3I", *t) for t in tris))
put("mesh_legacy", struct.pack("<I", 0))

# ---- compressed_segmentation: the cseg_fixture volumes that fit -------------
for path in sorted(glob.glob(os.path.join(RUN, "cseg", "*.json"))):
    fx = json.load(open(path))
    size, block, ch = fx["size"], fx["block"], fx["channels"]
    if max(size) > 20 or max(block) > 16 or ch > 3:
        continue
    head = bytes([1 if fx["dtype"] == "uint64" else 0,
                  size[0] - 1, size[1] - 1, size[2] - 1, ch - 1,
                  block[0] - 1, block[1] - 1, block[2] - 1])
    put("cseg", head + read(os.path.join(RUN, "cseg", fx["cseg"])))

# ---- request states, plan externals ------------------------------------------
seen_type = {}
for m in requests:
    p = json.loads(m["payload"])
    if p.get("schema") == "cnx.request-state/1":
        kind = p["type"]
        if seen_type.get(kind, 0) < 2:
            seen_type[kind] = seen_type.get(kind, 0) + 1
            put("request_state", m["payload"])
        if kind == "accepted":
            put("plan_externals", canon(p["externals"]))
        if kind == "finished":
            # A failed one, with a violation and a failure.
            f = dict(p, outcome="failed", slo="missed")
            f["violations"] = [{"kind": "reproducibility",
                                "task_key": "sha256:" + "ab" * 32,
                                "stage": "downsample",
                                "roi": {"min": [0, 0, 0], "max": [64, 64, 32]},
                                "object": "file:///data/pyramid/v1/16_16_16/"
                                          "0-64_0-64_0-32",
                                "expected": "sha256:" + "01" * 32,
                                "got": "sha256:" + "02" * 32}]
            f["failures"] = [{"task_key": "sha256:" + "cd" * 32,
                              "stage": "downsample",
                              "roi": {"min": [0, 0, 0], "max": [64, 64, 32]},
                              "error": "CNX_EIO: store: read failed"}]
            put("request_state", canon(f))
    else:
        put("request_state", m["payload"], limit=None)
put("plan_externals", "[]")

# ---- the controller: every kind of message, and whole sequences -------------
by_request = {}
for m in requests + events:
    p = json.loads(m["payload"])
    by_request.setdefault(p.get("request"), []).append(m)
for m in requests:
    put("controller", "R" + m["payload"], limit=None)
kinds = {}
for m in events:
    p = json.loads(m["payload"])
    k = (p["schema"], p["type"])
    if kinds.get(k, 0) < 2:
        kinds[k] = kinds.get(k, 0) + 1
        put("controller", "E" + m["payload"])
    if k == ("cnx.event/1", "succeeded") and kinds[k] == 1:
        put("controller", "E" + canon(dict(p, type="failed", error={
            "code": "CNX_EIO", "message": "store: read failed",
            "retriable": True})))
        put("controller", "E" + canon(dict(p, type="preempted")))
        put("controller", "E" + canon(dict(p, violation={
            "object": "file:///data/x/0-64_0-64_0-32",
            "stored": "sha256:" + "01" * 32, "got": "sha256:" + "02" * 32})))
    if k == ("cnx.control/1", "released") and kinds[k] == 1:
        for t in ["reused", "dead_lettered"]:
            put("controller", "E" + canon(dict(p, type=t, lane="urgent",
                                               reason="budget spent")))
for m in lineage[:3]:
    put("controller", "l" + m["payload"])
    env = json.loads(m["payload"])
    put("controller", "L" + base64.b64decode(env["payload"]).decode())
# Sequences: a request, its acceptance (the plan), releases, events and
# manifests, in log order, up to 16 messages.
by_key = {}
for m in lineage:
    st = json.loads(base64.b64decode(json.loads(m["payload"])["payload"]))
    key = st["predicate"]["buildDefinition"]["externalParameters"]["taskKey"]
    by_key[key] = m["payload"]
for req, msgs in by_request.items():
    if req is None:
        continue
    seq, used = [], set()
    for m in msgs:
        p = json.loads(m["payload"])
        if p.get("type") == "progress":
            continue
        topic = "R" if m["topic"] == "cnx.requests" else "E"
        seq.append(topic + m["payload"])
        if p.get("type") == "succeeded" and p["task_key"] in by_key \
                and p["task_key"] not in used:
            used.add(p["task_key"])
            seq.append("l" + by_key[p["task_key"]])
        if len(seq) >= 16:
            break
    put("controller", "\0".join(seq))
    # The same with the manifests signed by the harness ('L').
    put("controller", "\0".join(
        "L" + base64.b64decode(json.loads(s[1:])["payload"]).decode()
        if s[0] == "l" else s for s in seq))

# ---- envelopes and statements ------------------------------------------------
seen_stage = {}
for m in lineage:
    env = json.loads(m["payload"])
    body = base64.b64decode(env["payload"])
    st = json.loads(body)
    ext = st["predicate"]["buildDefinition"]["externalParameters"]
    stage = ext["stage"]
    if seen_stage.get(stage, 0) >= 1:
        continue
    if len(body) > 8192:
        continue  # the size is paid on every execution (sign, verify)
    seen_stage[stage] = 1
    put("dsse", m["payload"])
    put("statement", body)
    layer = ext["task"]["output"]["layer"]
    put("statement", b"@" + layer.encode() + b"\n" + body)
    moved = "s3://fuzz-bucket/copy/" + layer.split("/", 3)[-1]
    put("statement", b"@" + moved.encode() + b"\n" + body)
    # The same statement as jansson reads it (whitespace: not the light
    # reader's form).
    put("statement", json.dumps(st, indent=1).encode())

# ---- ledger rows, as cnx-verify reads them -----------------------------------
db = sqlite3.connect(os.path.join(RUN, "ledger.db"))
rows = db.execute("SELECT envelope, task_key, request, stage, verified FROM "
                  "lineage ORDER BY partition, offset").fetchall()
seen_stage = {}
picked = []
for env, key, req, stage, verified in rows:
    if seen_stage.get(stage) or len(env) > 8192:
        continue
    seen_stage[stage] = 1
    row = "\x1f".join([env, key or "", req or "", stage or "",
                       "v" if verified else ""])
    picked.append(row)
    put("ledger", row)
if len(picked) >= 3:
    put("ledger", "\x1e".join(picked[:3]))
    put("ledger", "\x1e".join([picked[0], picked[1] + "x", picked[2] + "d"]))

# ---- URLs --------------------------------------------------------------------
urls = set()
for t in tasks[:20]:
    tj = json.loads(t)
    urls.add(tj["output"]["layer"])
    for inp in tj["inputs"].values():
        urls.add(inp["layer"])
        for name in list(inp.get("objects", {}))[:1]:
            put("url", b"\x00" + (inp["layer"] + "\n" + name).encode())
urls |= {"s3://bucket", "s3://bucket/prefix/layer", "gs://bucket/a/b",
         "http://localhost:8080/data/image", "https://example.org/ds/",
         "file:///", "file:///data/synth//image/", "s3://my.bucket-1/x/./y"}
for u in sorted(urls):
    put("url", b"\x00" + u.encode())
for p in ["/data/synth/image", "data/synth", "../up/one", "./a/b/", "a/../b"]:
    put("url", b"\x01" + p.encode())
    put("url", b"\x01" + p.encode() + b"\n8_8_8/0-64_0-64_0-64")

# ---- SigV4: requests of AWS's test suite and the S3 examples -----------------
sig = [
    (0, "/", "", ["Host:example.amazonaws.com", "X-Amz-Date:20150830T123600Z"]),
    (1, "/example/..", "", ["Host:example.amazonaws.com"]),
    (1, "//example//", "", ["Host:example.amazonaws.com"]),
    (1, "/./", "Param2=value2&Param1=value1", ["Host:example.amazonaws.com"]),
    (0, "/", "Param1=value2&Param1=Value1", ["Host:example.amazonaws.com"]),
    (0, "/", "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=",
     ["Host:example.amazonaws.com"]),
    (0, "/", "", ["Host:example.amazonaws.com", "My-Header1:value1",
                  "My-Header1:value2", "My-Header1:   value3  with  spaces ",
                  "X-Amz-Date:20150830T123600Z"]),
    (4, "/test.txt", "", ["Host:examplebucket.s3.amazonaws.com",
                          "Range:bytes=0-9", "x-amz-content-sha256:e3b0",
                          "x-amz-date:20130524T000000Z"]),
    (0, "/", "max-keys=2&prefix=J", ["Host:examplebucket.s3.amazonaws.com"]),
    (0, "/", "list-type=2&prefix=a%2Fb%20c&continuation-token=1%2B2%3D",
     ["Host:localhost:4568"]),
    (6, "/bucket/8_8_8/0-64_0-64_0-64", "", ["Host:127.0.0.1:9000",
                                             "Content-MD5:1B2M2Y8AsgTpgAmY7PhCfg==",
                                             "If-None-Match:*"]),
    (0, "/a b/100%/%C3%A9t%C3%A9", "a=%zz&b", ["Host:h"]),
]
for flags, path, query, headers in sig:
    put("sigv4", bytes([flags]) + "\n".join([path, query] + headers).encode())

# ---- small text values --------------------------------------------------------
for v in ["2026-11-22T10:00:00Z", "2026-11-22T10:00:00.123Z",
          "1970-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z",
          "2024-02-29T23:59:60Z", "90s", "30m", "24h", "2d", "0s",
          "0,0,0,256,256,128", "-64,-64,0,64,64,1", "0-64_0-64_0-64",
          "128-256_0-64_-32-0", "64M", "1G", "4096", "16K", "uint8", "uint64",
          "float32"]:
    put("cli_values", v)

for parser in sorted(counts):
    print("%-16s %d seeds" % (parser, counts[parser]))
