#!/usr/bin/env bash
# The Prometheus rules, their unit tests, the example scrape configuration
# and the Grafana dashboard of ops/ hold together (truth: promtool, Debian's
# prometheus package, and PyYAML; exit 77 when promtool is missing):
#   1. promtool check rules ops/prometheus/cnx-rules.yml;
#   2. promtool test rules ops/prometheus/cnx-rules.test.yml, and every
#      alert of the rules has a case there that fires it (an exp_alerts
#      entry) and one where it must not (an empty exp_alerts);
#   3. promtool check config ops/prometheus/prometheus.yml (Debian builds
#      promtool without Kubernetes discovery: if it refuses only that, a
#      copy whose kubernetes_sd_configs are swapped for a static target is
#      checked, so the relabelling and the rule file are still checked);
#   4. every PromQL expression of the dashboard (panel targets, and the
#      selectors of its label_values() variables), with Grafana's
#      variables put in, parses: they become recording rules in a
#      temporary file that promtool check rules reads;
#   5. every metric name the dashboard and the rules read is one the code
#      exports ('# TYPE <name> <type>' in libcnx/src/*.c, histograms with
#      _bucket/_sum/_count), a standard process metric, cnx_build_info,
#      cnx_ready, `up`, or a recording rule of cnx-rules.yml.
set -uo pipefail
SRC=${CNX_SOURCE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
PY=${CNX_PYTHON:-/usr/bin/python3}
if ! command -v promtool >/dev/null 2>&1; then
  echo "SKIP: promtool not installed (Debian package prometheus)"; exit 77
fi
"$PY" -c 'import yaml' 2>/dev/null || { echo "SKIP: PyYAML missing"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
RULES=$SRC/ops/prometheus/cnx-rules.yml
TESTS=$SRC/ops/prometheus/cnx-rules.test.yml
CONFIG=$SRC/ops/prometheus/prometheus.yml
DASH=$SRC/ops/grafana/cnx.json
fail=0
check() { # name command...
  local name=$1; shift
  if "$@" >"$tmp/out" 2>&1; then echo "ok: $name"
  else echo "FAILED: $name"; sed 's/^/  /' "$tmp/out"; fail=1; fi
}

check "promtool check rules cnx-rules.yml" promtool check rules "$RULES"
check "promtool test rules cnx-rules.test.yml" \
  bash -c 'cd "$(dirname "$1")" && promtool test rules "$(basename "$1")"' _ "$TESTS"

check_config() {
  if promtool check config "$CONFIG" >"$tmp/cfg" 2>&1; then cat "$tmp/cfg"; return 0; fi
  cat "$tmp/cfg"
  grep -q 'field kubernetes_sd_configs not found' "$tmp/cfg" || return 1
  echo "(this promtool lacks Kubernetes discovery: checking a copy with static targets)"
  cp "$RULES" "$tmp/cnx-rules.yml"
  "$PY" - "$CONFIG" "$tmp/prometheus.yml" <<'PYEOF' || return 1
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
swapped = 0
for job in doc["scrape_configs"]:
    if "kubernetes_sd_configs" in job:
        assert job["kubernetes_sd_configs"] == [{"role": "pod"}], job["job_name"]
        del job["kubernetes_sd_configs"]
        job["static_configs"] = [{"targets": ["pod.example:9400"]}]
        swapped += 1
assert swapped > 0
yaml.safe_dump(doc, open(sys.argv[2], "w"))
PYEOF
  promtool check config "$tmp/prometheus.yml"
}
check "promtool check config prometheus.yml" check_config

# 2 (coverage), 4 (expressions to a rule file), 5 (names), in Python.
check "every alert fired and quiet in a unit test; dashboard and rule names exist" \
  "$PY" - "$SRC" "$RULES" "$TESTS" "$DASH" "$tmp/dashboard-rules.yml" <<'PYEOF'
import glob, json, re, sys, yaml
src, rules_path, tests_path, dash_path, out_path = sys.argv[1:]
rules = yaml.safe_load(open(rules_path))
tests = yaml.safe_load(open(tests_path))
dash = json.load(open(dash_path))
bad = []

alerts, records = [], []
for g in rules["groups"]:
    for r in g["rules"]:
        if "alert" in r:
            alerts.append(r["alert"])
            for k in ("summary", "description"):
                if not r.get("annotations", {}).get(k):
                    bad.append(f"alert {r['alert']}: no {k} annotation")
            if r.get("labels", {}).get("severity") not in ("warning", "critical"):
                bad.append(f"alert {r['alert']}: severity label missing")
        else:
            records.append(r["record"])
fires, quiet = set(), set()
for t in tests["tests"]:
    for a in t.get("alert_rule_test", []):
        (fires if a.get("exp_alerts") else quiet).add(a["alertname"])
for a in alerts:
    if a not in fires:
        bad.append(f"alert {a}: no unit test fires it")
    if a not in quiet:
        bad.append(f"alert {a}: no unit test where it stays quiet")
tested = {e["expr"] for t in tests["tests"] for e in t.get("promql_expr_test", [])}
for r in records:
    if r not in tested:
        bad.append(f"recording rule {r}: no promql_expr_test")

# The dashboard's expressions, Grafana variables replaced.
exprs = []
def walk(panels):
    for p in panels:
        for t in p.get("targets", []):
            if t.get("expr"):
                exprs.append((f"panel '{p.get('title')}'", t["expr"]))
        walk(p.get("panels", []))
walk(dash["panels"])
for v in dash["templating"]["list"]:
    if v.get("type") != "query":
        continue
    q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
    m = re.fullmatch(r"\s*label_values\((.*),\s*([a-zA-Z_]\w*)\s*\)\s*", q)
    exprs.append((f"variable {v['name']}", m.group(1) if m else q))
if len(exprs) < 10:
    bad.append(f"only {len(exprs)} expressions found in the dashboard")
def grafana(e):
    e = re.sub(r"\$__(rate_)?interval|\$__range", "5m", e)
    return re.sub(r"\$\{?(\w+)\}?", lambda m: "x", e)
yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [
    {"record": f"dashboard:expr_{i}", "expr": grafana(e)}
    for i, (_, e) in enumerate(exprs)]}]}, open(out_path, "w"))

# Metric names read by an expression.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right",
            "bool", "and", "or", "unless", "offset", "inf", "nan", "x"}
def names(expr):
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)          # strings
    e = re.sub(r"\{[^}]*\}", "", e)                        # matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                       # ranges
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)",
               "", e)                                      # label lists
    out = set()
    for m in re.finditer(r"(?<![\w:.])([a-zA-Z_:][\w:]*)(\s*\()?", e):
        if m.group(2) or m.group(1).lower() in KEYWORDS:
            continue                                       # functions
        out.add(m.group(1))
    return out
exported = set()
for f in glob.glob(f"{src}/libcnx/src/*.c"):
    for name, kind in re.findall(r"# TYPE ([a-zA-Z_:][\w:]*) (\w+)", open(f).read()):
        exported.add(name)
        if kind == "histogram":
            exported |= {name + "_bucket", name + "_sum", name + "_count"}
exported |= {"process_cpu_seconds_total", "process_resident_memory_bytes",
             "process_virtual_memory_bytes", "process_start_time_seconds",
             "process_open_fds", "process_max_fds", "cnx_build_info",
             "cnx_ready", "up"}
known = exported | set(records)
used = [(f"rule {r.get('alert') or r.get('record')}", r["expr"])
        for g in rules["groups"] for r in g["rules"]] + exprs
count = 0
for where, e in used:
    for n in names(e):
        count += 1
        if n not in known:
            bad.append(f"{where}: metric {n} is not exported (expr: {e})")
for b in bad:
    print(b)
print(f"{len(alerts)} alerts, {len(records)} recording rules, "
      f"{len(exprs)} dashboard expressions, {count} metric references "
      f"against {len(exported)} exported names")
sys.exit(1 if bad else 0)
PYEOF
cat "$tmp/out" | tail -1
if [ -f "$tmp/dashboard-rules.yml" ]; then
  check "promtool parses every dashboard expression" promtool check rules "$tmp/dashboard-rules.yml"
else
  echo "FAILED: no dashboard expressions written"; fail=1
fi
[ "$fail" -eq 0 ] && echo "ops_prometheus: all checks passed"
exit "$fail"
