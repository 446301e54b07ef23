#!/usr/bin/env python3
"""Checks ops/ against the built programs and the sources.

    ops_manifests_check.py --source DIR --bin DIR

The truth is what the built programs say (each worker's --help names its
stages, its options, its topics and its default consumer group), what the
sources fix that --help does not print (the urgent lane's group suffix and
auto.offset.reset, libcnx/src/worker.c and kafka.c), PyYAML's reading of
ops/k8s, and kubectl's kustomize where kubectl is installed. Every
failure is one line "FAILED: file: what"; exit 1 if any.
"""
import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

import yaml

FAILS = []


def fail(where, what):
    FAILS.append(f"{where}: {what}")
    print(f"FAILED: {where}: {what}")


def run(argv):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, str(e)
    return r.returncode, r.stdout + r.stderr


# ---- what the programs say -------------------------------------------------

OPT_RE = re.compile(r"^\s{2}(?:-\w, )?(--[a-z][a-z0-9-]*)", re.M)


def help_options(text):
    return set(OPT_RE.findall(text))


def discover_workers(bindir):
    """{stage: {binary, options, bulk, urgent, group, grace}} from --help."""
    stages = {}
    for path in sorted(glob.glob(os.path.join(bindir, "cnx-*"))):
        binary = os.path.basename(path)
        rc, out = run([path, "--help"])
        if rc != 0:
            continue
        names = []
        if "One executable for the stages below" in out:
            tail = out.split("\nstages:\n", 1)
            if len(tail) == 2:
                names = re.findall(r"^  (\S+)$", tail[1], re.M)
        else:
            m = re.search(r"Consumes cnx\.tasks\.(\S+)\.urgent, then", out)
            if m:
                names = [m.group(1)]
        for stage in names:
            rc, h = run([path, "--stage", stage, "--help"])
            m = re.search(r"Consumes (\S+), then (\S+?);", h)
            g = re.search(r"consumer group \(default (\S+?)\)", h)
            gr = re.search(r"--grace SECONDS .*\(default ([0-9.]+)\)", h)
            if rc != 0 or not m or not g or not gr:
                fail(binary, f"--stage {stage} --help does not name its "
                     "topics, default group and grace")
                continue
            stages[stage] = {
                "binary": binary, "options": help_options(h) | {"--stage"},
                "urgent": m.group(1), "bulk": m.group(2),
                "group": g.group(1), "grace": float(gr.group(1))}
    return stages


def source_facts(src):
    facts = {}
    with open(os.path.join(src, "libcnx/src/worker.c")) as f:
        w = f.read()
    m = re.search(r'snprintf\(ugroup,\s*sizeof\(ugroup\),\s*"%s([^"%]*)",'
                  r'\s*group\)', w)
    if not m:
        fail("libcnx/src/worker.c", "cannot find the urgent lane's group "
             "(snprintf(ugroup, ..., \"%s...\", group))")
        facts["urgent_suffix"] = None
    else:
        facts["urgent_suffix"] = m.group(1)
    with open(os.path.join(src, "libcnx/src/kafka.c")) as f:
        k = f.read()
    m = re.search(r'"auto\.offset\.reset",\s*"(\w+)"', k)
    facts["offset_reset"] = m.group(1) if m else None
    if not m:
        fail("libcnx/src/kafka.c", "cannot find auto.offset.reset")
    return facts


# ---- kubernetes --------------------------------------------------------------

def quantity(q):
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
             "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(q))
    if not m or (m.group(2) and m.group(2) not in units):
        return None
    return float(m.group(1)) * units.get(m.group(2), 1)


def parse_args(args, options, where):
    """{--opt: value or True} of a container's args; unknown options fail."""
    out = {}
    i = 0
    while i < len(args):
        a = str(args[i])
        if a.startswith("-"):
            name = a.split("=", 1)[0]
            if name not in options:
                fail(where, f"option {name} is not in the program's --help")
            if "=" in a:
                out[name] = a.split("=", 1)[1]
            elif i + 1 < len(args) and not str(args[i + 1]).startswith("-"):
                out[name] = str(args[i + 1])
                i += 1
            else:
                out[name] = True
        i += 1
    return out


def env_names(container):
    return {e["name"]: e for e in container.get("env", []) or []}


def check_vars(args, container, where):
    env = env_names(container)
    for a in args:
        for v in re.findall(r"\$\((\w+)\)", str(a)):
            if v not in env:
                fail(where, f"$({v}) in args is not in the container's env "
                     "(Kubernetes would pass it literally)")


def mount_for(path, container):
    best = None
    for m in container.get("volumeMounts", []) or []:
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"]):
                best = m
    return best


def check_paths(opts, container, pod, objects, where, keys):
    """Each path option lies on a mounted volume; on a Secret or ConfigMap
    volume the file is one of its keys."""
    vols = {v["name"]: v for v in pod.get("volumes", []) or []}
    for opt in keys:
        path = opts.get(opt)
        if not isinstance(path, str) or not path.startswith("/"):
            continue
        m = mount_for(path, container)
        if m is None:
            fail(where, f"{opt} {path} is on no mounted volume")
            continue
        v = vols.get(m["name"])
        if v is None:
            continue
        if "emptyDir" in v:
            # A file on an emptyDir is one an init container puts there.
            made = [c for c in pod.get("initContainers", []) or []
                    if path in map(str, (c.get("command") or []) +
                                   (c.get("args") or []))]
            if opt != "--cache" and not made:
                fail(where, f"{opt} {path}: no init container writes it")
            continue
        rel = os.path.relpath(path, m["mountPath"])
        for kind, ref in (("Secret", (v.get("secret") or {}).get("secretName")),
                          ("ConfigMap", (v.get("configMap") or {}).get("name"))):
            if ref and (kind, ref) in objects and "/" not in rel and \
                    rel != ".":
                if rel not in objects[(kind, ref)]:
                    fail(where, f"{opt} {path}: {kind} {ref} has no key "
                         f"{rel}")


def data_keys(doc):
    return set((doc.get("data") or {}).keys()) | \
        set((doc.get("stringData") or {}).keys())


def check_refs(pod, objects, where, claim_names=()):
    vols = {v["name"]: v for v in pod.get("volumes", []) or []}
    for c in pod.get("initContainers", []) or []:
        argv = [str(a) for a in (c.get("command") or []) +
                (c.get("args") or [])]
        paths = {f"(init container {c['name']}, argument {i})": a
                 for i, a in enumerate(argv) if a.startswith("/")}
        check_paths(paths, c, pod, objects, where, list(paths))
    for v in vols.values():
        if "secret" in v:
            n = v["secret"]["secretName"]
            if ("Secret", n) not in objects and not v["secret"].get("optional"):
                fail(where, f"volume {v['name']}: no Secret {n} in ops/k8s")
        if "configMap" in v:
            n = v["configMap"]["name"]
            if ("ConfigMap", n) not in objects and \
                    not v["configMap"].get("optional"):
                fail(where, f"volume {v['name']}: no ConfigMap {n} in ops/k8s")
    for c in (pod.get("containers", []) or []) + \
            (pod.get("initContainers", []) or []):
        for m in c.get("volumeMounts", []) or []:
            if m["name"] not in vols and m["name"] not in claim_names:
                fail(where, f"container {c['name']} mounts {m['name']}, "
                     "which is no volume")
        for e in c.get("env", []) or []:
            vf = e.get("valueFrom") or {}
            for key, kind in (("configMapKeyRef", "ConfigMap"),
                              ("secretKeyRef", "Secret")):
                r = vf.get(key)
                if r is None or r.get("optional"):
                    continue
                if (kind, r["name"]) not in objects:
                    fail(where, f"env {e['name']}: no {kind} {r['name']}")
                elif r["key"] not in objects[(kind, r["name"])]:
                    fail(where, f"env {e['name']}: {kind} {r['name']} has "
                         f"no key {r['key']}")
        for ef in c.get("envFrom", []) or []:
            for key, kind in (("configMapRef", "ConfigMap"),
                              ("secretRef", "Secret")):
                r = ef.get(key)
                if r and not r.get("optional") and \
                        (kind, r["name"]) not in objects:
                    fail(where, f"envFrom: no {kind} {r['name']}")


def port_of(probe_port, container):
    if isinstance(probe_port, int):
        return probe_port
    for p in container.get("ports", []) or []:
        if p.get("name") == probe_port:
            return p["containerPort"]
    return None


def check_metrics(opts, container, pod_meta, where):
    port = opts.get("--metrics-port")
    if not isinstance(port, str):
        fail(where, "no --metrics-port")
        return
    port = int(port)
    if port not in [p["containerPort"] for p in container.get("ports", [])]:
        fail(where, f"--metrics-port {port} is no container port")
    for probe, path in (("livenessProbe", "/healthz"),
                        ("readinessProbe", "/readyz")):
        h = (container.get(probe) or {}).get("httpGet")
        if not h:
            fail(where, f"no {probe} (httpGet {path})")
            continue
        if h.get("path") != path:
            fail(where, f"{probe} asks {h.get('path')}, not {path}")
        if port_of(h.get("port"), container) != port:
            fail(where, f"{probe} is not on the metrics port {port}")
    ann = pod_meta.get("annotations") or {}
    if ann.get("prometheus.io/scrape") != "true" or \
            ann.get("prometheus.io/port") != str(port) or \
            ann.get("prometheus.io/path", "/metrics") != "/metrics":
        fail(where, "prometheus.io/scrape, port and path annotations do not "
             f"name port {port} and /metrics")


def check_k8s(src, bindir, stages, facts):
    k8s = os.path.join(src, "ops/k8s")
    docs = []
    files = sorted(glob.glob(os.path.join(k8s, "**/*.yaml"), recursive=True))
    for f in files:
        rel = os.path.relpath(f, src)
        try:
            with open(f) as fh:
                for d in yaml.safe_load_all(fh):
                    if d is not None:
                        docs.append((rel, d))
        except yaml.YAMLError as e:
            fail(rel, f"not YAML: {str(e).splitlines()[0]}")
    objects = {}
    for rel, d in docs:
        if d.get("kind") in ("Secret", "ConfigMap"):
            objects[(d["kind"], d["metadata"]["name"])] = data_keys(d)

    # kustomization: every manifest is listed, but the Secret templates.
    kz = [d for rel, d in docs if rel.endswith("kustomization.yaml")]
    if len(kz) != 1:
        fail("ops/k8s", "no kustomization.yaml")
    else:
        listed = set(kz[0].get("resources", []))
        for r in listed:
            if not os.path.exists(os.path.join(k8s, r)):
                fail("ops/k8s/kustomization.yaml", f"resource {r} is missing")
        for f in files:
            r = os.path.relpath(f, k8s)
            if r not in listed and r not in ("kustomization.yaml",
                                             "secrets.template.yaml"):
                fail("ops/k8s/kustomization.yaml", f"{r} is not listed")
        if "secrets.template.yaml" in listed:
            fail("ops/k8s/kustomization.yaml", "lists the Secret templates: "
                 "an apply would overwrite real keys with placeholders")

    deps = [(rel, d) for rel, d in docs if d.get("kind") == "Deployment" and
            d["metadata"].get("labels", {}).get(
                "app.kubernetes.io/component") == "worker"]
    sos = {d["spec"]["scaleTargetRef"]["name"]: (rel, d) for rel, d in docs
           if d.get("kind") == "ScaledObject"}
    pdbs = [(rel, d) for rel, d in docs
            if d.get("kind") == "PodDisruptionBudget"]
    seen = {}
    for rel, d in deps:
        name = d["metadata"]["name"]
        where = f"{rel} ({name})"
        pod = d["spec"]["template"]["spec"]
        c = pod["containers"][0]
        binary = os.path.basename(str((c.get("command") or [""])[0]))
        offered = {s: v for s, v in stages.items() if v["binary"] == binary}
        if not offered:
            fail(where, f"{binary} is no worker the build offers")
            continue
        opts = parse_args(c.get("args", []), next(iter(offered.values()))
                          ["options"], where)
        stage = opts.get("--stage")
        if stage not in offered:
            fail(where, f"--stage {stage}: {binary} offers "
                 f"{', '.join(sorted(offered))}")
            continue
        if stage in seen:
            fail(where, f"a second Deployment for stage {stage} "
                 f"(first: {seen[stage]})")
        seen[stage] = name
        st = stages[stage]
        check_vars(c.get("args", []), c, where)
        # Grace.
        grace = float(opts.get("--grace", st["grace"]))
        tgps = pod.get("terminationGracePeriodSeconds", 30)
        if not tgps > grace:
            fail(where, f"terminationGracePeriodSeconds {tgps} is not above "
                 f"--grace {grace:g}")
        pre = ((c.get("lifecycle") or {}).get("preStop") or {})
        if not pre:
            fail(where, "no preStop hook")
        elif "kill -TERM 1" not in " ".join(
                map(str, (pre.get("exec") or {}).get("command", []))):
            fail(where, "the preStop hook does not forward SIGTERM to the "
                 "worker (kill -TERM 1)")
        # Static membership from the pod's name.
        inst = opts.get("--instance")
        m = re.fullmatch(r"\$\((\w+)\)", str(inst))
        env = env_names(c)
        if not m or m.group(1) not in env or \
                ((env[m.group(1)].get("valueFrom") or {}).get("fieldRef")
                 or {}).get("fieldPath") != "metadata.name":
            fail(where, "--instance is not the pod's name (downward API "
                 "metadata.name)")
        check_metrics(opts, c, d["spec"]["template"]["metadata"], where)
        res = c.get("resources") or {}
        rq = quantity((res.get("requests") or {}).get("memory"))
        lm = quantity((res.get("limits") or {}).get("memory"))
        if rq is None or lm is None:
            fail(where, "no memory request and limit")
        elif lm < rq:
            fail(where, "memory limit below the request")
        check_paths(opts, c, pod, objects, where,
                    ("--key", "--controller-key", "--kafka-config", "--cache"))
        check_refs(pod, objects, where)
        # The worker's groups and topics, and the ScaledObject's triggers.
        group = opts.get("--group", st["group"])
        want = {(st["bulk"], group)}
        if facts["urgent_suffix"] is not None:
            want.add((st["urgent"], group + facts["urgent_suffix"]))
        if name not in sos:
            fail(where, "no ScaledObject scales it")
        else:
            srel, so = sos[name]
            swhere = f"{srel} (ScaledObject {so['metadata']['name']})"
            trig = [t for t in so["spec"].get("triggers", [])
                    if t.get("type") == "kafka"]
            have = {(t["metadata"].get("topic"),
                     t["metadata"].get("consumerGroup")) for t in trig}
            if have != want or len(trig) != len(want):
                fail(swhere, f"kafka triggers {sorted(have, key=str)} are "
                     f"not the worker's lanes {sorted(want)}")
            lag = {}
            for t in trig:
                md = t["metadata"]
                try:
                    lag[md.get("topic")] = int(md["lagThreshold"])
                except (KeyError, ValueError):
                    fail(swhere, f"trigger {md.get('topic')}: no integer "
                         "lagThreshold")
                if md.get("offsetResetPolicy") != facts["offset_reset"]:
                    fail(swhere, f"trigger {md.get('topic')}: "
                         f"offsetResetPolicy {md.get('offsetResetPolicy')}, "
                         f"the worker's auto.offset.reset is "
                         f"{facts['offset_reset']}")
                envvar = md.get("bootstrapServersFromEnv")
                if envvar is not None and envvar not in env:
                    fail(swhere, f"bootstrapServersFromEnv {envvar} is not in "
                         "the worker's env")
                if envvar is None and not md.get("bootstrapServers"):
                    fail(swhere, "a trigger without bootstrap servers")
            if st["urgent"] in lag and st["bulk"] in lag and \
                    not lag[st["urgent"]] < lag[st["bulk"]]:
                fail(swhere, "the urgent lane's lagThreshold is not below "
                     "the bulk lane's")
            parts = (so["metadata"].get("annotations") or {}).get(
                "cnx.io/topic-partitions")
            mx = so["spec"].get("maxReplicaCount")
            if parts is None or mx is None or int(mx) > int(parts):
                fail(swhere, f"maxReplicaCount {mx} is not at most the "
                     f"task topics' partitions ({parts})")
        # Disruption budget.
        labels = d["spec"]["template"]["metadata"].get("labels", {})
        cover = [p for r, p in pdbs if p["spec"].get("selector", {}).get(
            "matchLabels") and all(labels.get(k) == v for k, v in
                                   p["spec"]["selector"]["matchLabels"]
                                   .items())]
        if not cover:
            fail(where, "no PodDisruptionBudget selects its pods")
        for p in cover:
            if "minAvailable" in p["spec"] or "maxUnavailable" not in p["spec"]:
                fail(where, f"PodDisruptionBudget {p['metadata']['name']} "
                     "must set maxUnavailable, not minAvailable")
    for stage in sorted(set(stages) - set(seen)):
        fail("ops/k8s", f"no worker Deployment for stage {stage} "
             f"({stages[stage]['binary']} --stage {stage})")

    # The controller.
    sts = [(rel, d) for rel, d in docs if d.get("kind") == "StatefulSet" and
           d["metadata"].get("labels", {}).get(
               "app.kubernetes.io/component") == "controller"]
    if len(sts) != 1:
        fail("ops/k8s", f"{len(sts)} controller StatefulSets, not 1")
    for rel, d in sts:
        where = f"{rel} ({d['metadata']['name']})"
        if d["spec"].get("replicas") != 1:
            fail(where, f"replicas {d['spec'].get('replicas')}: the ledger "
                 "has one writer")
        pod = d["spec"]["template"]["spec"]
        c = pod["containers"][0]
        if os.path.basename(str((c.get("command") or [""])[0])) != \
                "cnx-controller":
            fail(where, "its first container does not run cnx-controller")
        rc, h = run([os.path.join(bindir, "cnx-controller"), "--help"])
        opts = parse_args(c.get("args", []), help_options(h), where)
        check_vars(c.get("args", []), c, where)
        claims = [t["metadata"]["name"] for t in
                  d["spec"].get("volumeClaimTemplates", [])]
        ledger = opts.get("--ledger")
        m = mount_for(str(ledger), c) if isinstance(ledger, str) else None
        if m is None or m["name"] not in claims:
            fail(where, f"--ledger {ledger} is not on a volumeClaimTemplate's "
                 "volume")
        for opt in ("--trust", "--key", "--kafka-config"):
            if opt not in opts:
                fail(where, f"no {opt}")
        check_paths(opts, c, pod, objects, where,
                    ("--key", "--kafka-config", "--trust"))
        check_metrics(opts, c, d["spec"]["template"]["metadata"], where)
        check_refs(pod, objects, where, claims)
        wf = env_names(c).get("CNX_WORKFLOWS", {}).get("value")
        m = mount_for(str(wf), c)
        vols = {v["name"]: v for v in pod.get("volumes", [])}
        if m is None or (vols.get(m["name"], {}).get("configMap") or {}).get(
                "name") != "cnx-workflows":
            fail(where, "CNX_WORKFLOWS is not the cnx-workflows ConfigMap's "
                 "mount")

    # The workflows ConfigMap is workflows/*.json, byte for byte.
    wf = [d for rel, d in docs if d.get("kind") == "ConfigMap" and
          d["metadata"]["name"] == "cnx-workflows"]
    if len(wf) != 1:
        fail("ops/k8s", "no ConfigMap cnx-workflows")
    else:
        data = wf[0].get("data") or {}
        files = {os.path.basename(f): f for f in
                 glob.glob(os.path.join(src, "workflows/*.json"))}
        if set(data) != set(files):
            fail("ops/k8s/workflows.yaml", f"holds {sorted(data)}, "
                 f"workflows/ has {sorted(files)} (run "
                 "ops/k8s/gen-workflows.sh)")
        for n, f in files.items():
            with open(f) as fh:
                if n in data and data[n] != fh.read():
                    fail("ops/k8s/workflows.yaml", f"{n} differs from "
                         f"workflows/{n} (run ops/k8s/gen-workflows.sh)")

    # kustomize renders, and pins every image to cnx-image's digest.
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("note: kubectl is not installed: kustomize rendering not checked")
    else:
        rc, out = run([kubectl, "kustomize", k8s])
        if rc != 0:
            fail("ops/k8s", f"kubectl kustomize fails: {out.strip()[:300]}")
        else:
            rendered = list(yaml.safe_load_all(out))
            dg = [d["data"]["digest"] for d in rendered if d and
                  d.get("kind") == "ConfigMap" and
                  d["metadata"]["name"] == "cnx-image"]
            images = re.findall(r"^\s*image:\s*(\S+)", out, re.M)
            if not dg or not images or any(not i.endswith("@" + dg[0])
                                           for i in images):
                fail("ops/k8s", f"rendered images {sorted(set(images))} are "
                     "not all pinned to cnx-image's digest")
    return len(deps), len(sos), len(docs)


# ---- systemd -------------------------------------------------------------------

def unit_settings(path):
    """[(section, key, value)] with continuation lines joined."""
    out, section, buf = [], None, ""
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if buf:
                line = buf + " " + line.strip()
                buf = ""
            if line.endswith("\\"):
                buf = line[:-1]
                continue
            s = line.strip()
            if not s or s[0] in "#;":
                continue
            if s.startswith("["):
                section = s.strip("[]")
            elif "=" in s:
                k, v = s.split("=", 1)
                out.append((section, k.strip(), v.strip()))
    return out


def seconds(v):
    m = re.fullmatch(r"([0-9.]+)\s*(s|min|)?", v)
    if not m:
        return None
    return float(m.group(1)) * (60 if m.group(2) == "min" else 1)


def env_file(path):
    env = {}
    with open(path) as f:
        for line in f:
            s = line.strip()
            if s and not s.startswith("#") and "=" in s:
                k, v = s.split("=", 1)
                env[k] = v
    return env


def check_systemd(src, bindir, stages):
    sd = os.path.join(src, "ops/systemd")
    worker = os.path.join(sd, "cnx-worker@.service")
    common = set.intersection(*[s["options"] for s in stages.values()]) \
        if stages else set()
    progs = {"cnx-worker@.service": common,
             "cnx-controller.service": None, "cnx-broker.service": None}
    for unit, opts in progs.items():
        path = os.path.join(sd, unit)
        rel = os.path.relpath(path, src)
        if not os.path.exists(path):
            fail(rel, "missing")
            continue
        st = unit_settings(path)
        svc = {k: v for s, k, v in st if s == "Service"}
        ex = shlex.split(svc.get("ExecStart", ""))
        if opts is None:
            prog = os.path.join(bindir, os.path.basename(ex[0])) if ex else ""
            if not os.access(prog, os.X_OK):
                fail(rel, f"ExecStart runs {ex[0] if ex else 'nothing'}, "
                     "which is not built")
                continue
            rc, h = run([prog, "--help"])
            opts = help_options(h)
        flags = [a for a in ex[1:] if a.startswith("--")]
        for a in flags:
            if a not in opts and a != "--stage":
                fail(rel, f"ExecStart option {a} is not in the program's "
                     "--help")
        if svc.get("KillSignal") != "SIGTERM":
            fail(rel, "KillSignal is not SIGTERM")
        if svc.get("Restart") not in ("on-failure", "always"):
            fail(rel, "no Restart=on-failure")
        if unit == "cnx-worker@.service":
            defaults = {}
            for s, k, v in st:
                if s == "Service" and k == "Environment":
                    kk, _, vv = v.partition("=")
                    defaults[kk] = vv
            stop = seconds(svc.get("TimeoutStopSec", "90"))
            examples = sorted(glob.glob(os.path.join(sd, "env",
                                                     "worker-*.env")))
            if not examples:
                fail(rel, "no example env file ops/systemd/env/worker-*.env")
            m = re.search(r"--grace\s+\$\{(\w+)\}", svc.get("ExecStart", ""))
            gvar = m.group(1) if m else None
            for ex_path in [None] + examples:
                env = dict(defaults)
                name = "defaults"
                if ex_path:
                    env.update(env_file(ex_path))
                    name = os.path.relpath(ex_path, src)
                    w, s = env.get("CNX_WORKER"), env.get("CNX_STAGE")
                    if s not in stages or stages[s]["binary"] != f"cnx-{w}":
                        fail(name, f"CNX_WORKER={w} CNX_STAGE={s}: cnx-{w} "
                             "offers no such stage")
                g = float(env.get(gvar, 25)) if gvar else None
                if g is None:
                    fail(rel, "ExecStart has no --grace ${VAR}")
                elif stop is None or not stop > g:
                    fail(rel, f"TimeoutStopSec {svc.get('TimeoutStopSec')} "
                         f"is not above --grace {g:g} ({name})")
        if svc.get("TimeoutStopSec") is None:
            fail(rel, "no TimeoutStopSec")
        if unit != "cnx-broker.service":
            if not (svc.get("User") or svc.get("DynamicUser") == "yes"):
                fail(rel, "runs as root (no User= or DynamicUser=)")
            if svc.get("ProtectSystem") != "strict" or \
                    svc.get("NoNewPrivileges") != "yes":
                fail(rel, "no ProtectSystem=strict and NoNewPrivileges=yes")
    ctl = unit_settings(os.path.join(sd, "cnx-controller.service"))
    ctl_svc = {k: v for s, k, v in ctl if s == "Service"}
    m = re.search(r"--ledger\s+(\S+)", ctl_svc.get("ExecStart", ""))
    state = ctl_svc.get("StateDirectory")
    if not m or not state or not m.group(1).startswith(f"/var/lib/{state}/"):
        fail("ops/systemd/cnx-controller.service", "--ledger is not under "
             "its StateDirectory (the only place it may write)")


# ---- the container -------------------------------------------------------------

def check_dockerfile(src, bindir):
    path = os.path.join(src, "ops/container/Dockerfile")
    rel = "ops/container/Dockerfile"
    if not os.path.exists(path):
        fail(rel, "missing")
        return
    with open(path) as f:
        text = re.sub(r"\\\n", " ", f.read())
    lines = [l.strip() for l in text.splitlines()
             if l.strip() and not l.strip().startswith("#")]
    stages, cur = [], None
    for l in lines:
        word, _, rest = l.partition(" ")
        word = word.upper()
        if word == "FROM":
            cur = {"from": rest.split()[0], "lines": []}
            stages.append(cur)
        elif cur is not None:
            cur["lines"].append((word, rest.strip()))
    if len(stages) < 2:
        fail(rel, "not a multi-stage build")
    for s in stages:
        if s["from"] != "debian:bookworm-slim":
            fail(rel, f"FROM {s['from']}, not debian:bookworm-slim")
    if not stages:
        return
    final = stages[-1]
    users = [r for w, r in final["lines"] if w == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        fail(rel, "the runtime stage runs as root (no USER, or USER root)")
    if not any(w == "ENTRYPOINT" for w, r in final["lines"]):
        fail(rel, "no ENTRYPOINT")
    if "--container-digest" not in open(path).read():
        fail(rel, "does not say how --container-digest is passed")
    pkgs = set()
    for w, r in final["lines"]:
        if w == "RUN" and "apt-get install" in r:
            for tok in r.split("apt-get install", 1)[1].split():
                if tok in ("&&", ";"):
                    break
                if not tok.startswith("-"):
                    pkgs.add(tok)
    # Every library the built programs link is in a runtime package.
    if shutil.which("dpkg") is None or shutil.which("objdump") is None:
        print("note: dpkg or objdump missing: runtime packages not checked")
        return
    needed = set()
    for b in glob.glob(os.path.join(bindir, "cnx*")):
        rc, out = run(["objdump", "-p", b])
        needed |= set(re.findall(r"NEEDED\s+(\S+)", out))
    base = {"libc6", "libgcc-s1"}  # in every Debian image
    rc, ldc = run(["ldconfig", "-p"])
    # A sanitizer build links the sanitizers' runtimes; the image is a
    # release build, which does not.
    needed = {so for so in needed
              if not re.match(r"lib(asan|ubsan|lsan|tsan)\.so", so)}
    for so in sorted(needed):
        m = re.search(rf"^\s*{re.escape(so)} \(.*\) => (\S+)$", ldc, re.M)
        if not m:
            continue
        real = os.path.realpath(m.group(1))
        owners = set()
        for p in (real, real.replace("/usr/lib/", "/lib/", 1)):
            rc, out = run(["dpkg", "-S", p])
            if rc == 0:
                owners |= {o.split(":")[0].strip() for o in
                           out.split(": ")[0].split(",")}
        if owners and not owners & (pkgs | base):
            fail(rel, f"{so} (package {', '.join(sorted(owners))}) is not "
                 "installed in the runtime stage")
    if shutil.which("hadolint"):
        rc, out = run(["hadolint", path])
        if rc != 0:
            fail(rel, "hadolint: " + out.strip().replace("\n", "; ")[:300])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--bin", required=True)
    a = ap.parse_args()
    stages = discover_workers(a.bin)
    if not stages:
        fail(a.bin, "no worker found (no cnx-* --help names a stage)")
    facts = source_facts(a.source)
    ndep = nso = ndocs = 0
    # A manifest shaped unlike any expected (a missing field) is a failure
    # with its reason, not a traceback.
    try:
        ndep, nso, ndocs = check_k8s(a.source, a.bin, stages, facts)
    except (KeyError, TypeError, AttributeError, IndexError) as e:
        fail("ops/k8s", f"unexpected shape: {type(e).__name__}: {e}")
    for name, check in (("ops/systemd", lambda: check_systemd(
            a.source, a.bin, stages)), ("ops/container", lambda:
            check_dockerfile(a.source, a.bin))):
        try:
            check()
        except (KeyError, TypeError, AttributeError, IndexError,
                OSError) as e:
            fail(name, f"unexpected shape: {type(e).__name__}: {e}")
    print(f"stages offered by the built workers: {len(stages)} "
          f"({', '.join(sorted(stages))})")
    print(f"ops/k8s: {ndocs} documents, {ndep} worker Deployments, "
          f"{nso} ScaledObjects")
    if FAILS:
        print(f"{len(FAILS)} failure(s)")
        return 1
    print("ok: ops/ matches the built programs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
