"""Write the poison test's bad task messages, separated by the byte 0x1e,
to stdout (binary). argv[1] is a good task (JSON) whose input object
exists, so that corruptions that need a real object can refer to it.
Each message is preceded by nothing else; its kind is listed on stderr in
the same order."""
import copy
import json
import sys

good = json.loads(open(sys.argv[1]).read())
obj = next(iter(good["inputs"]["source"]["objects"]))
kinds = []
msgs = []


def add(kind, data):
    if isinstance(data, (dict, list)) or data is None:
        data = json.dumps(data, separators=(",", ":")).encode()
    elif isinstance(data, str):
        data = data.encode()
    assert b"\x1e" not in data
    kinds.append(kind)
    msgs.append(data)


def mutated(kind, fn):
    t = copy.deepcopy(good)
    fn(t)
    add(kind, t)


add("not JSON", "this is not json {")
add("binary garbage", bytes(range(1, 30)) + b"\xff\xfe\x00\x01")
add("JSON array", [1, 2, 3])
add("JSON null", None)
mutated("wrong schema version", lambda t: t.update(schema="cnx.task/9"))
mutated("missing stage", lambda t: t.pop("stage"))
mutated("roi of wrong type", lambda t: t.update(roi="everything"))
mutated("roi max < min", lambda t: t["roi"].update(max=[0, 0, 0]))
mutated("'..' in an object name", lambda t: t["inputs"]["source"]["objects"].update(
    {"../../etc/passwd": t["inputs"]["source"]["objects"][obj]}))
mutated("absolute output scale", lambda t: t["output"].update(scale="/etc"))
mutated("'..' in the output layer URL", lambda t: t["output"].update(layer="file:///tmp/../etc"))
mutated("unknown key", lambda t: t.update(surprise=True))
mutated("malformed digest", lambda t: t["inputs"]["source"]["objects"].update({obj: "sha256:1234"}))
mutated("digest that does not match", lambda t: t["inputs"]["source"]["objects"].update(
    {obj: "sha256:" + "0" * 64}))
mutated("huge roi", lambda t: t.update(roi={"min": [0, 0, 0], "max": [1 << 39, 1 << 39, 1 << 39]}))
mutated("huge halo", lambda t: t.update(halo=100000))
mutated("huge kernel_version", lambda t: t.update(kernel_version=1 << 62))
mutated("kernel_version this worker does not run", lambda t: t.update(kernel_version=2))
mutated("stage sent to the wrong worker", lambda t: t.update(stage="segment"))
mutated("input layer that does not exist", lambda t: t["inputs"]["source"].update(
    layer="file:///nonexistent/cnx/layer"))
mutated("input object not listed", lambda t: t["inputs"]["source"].update(objects={}))
mutated("bad deadline", lambda t: t.update(deadline="tomorrow"))
mutated("wrong output scale for the stage", lambda t: t["output"].update(scale="1_1_1"))
add("huge message", json.dumps({"schema": "cnx.task/1", "pad": "x" * (900 * 1024)}))

sys.stdout.buffer.write(b"\x1e".join(msgs))
for k in kinds:
    print(k, file=sys.stderr)
