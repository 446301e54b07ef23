#!/usr/bin/env bash
# ops/ against independent truth: tests/py/ops_manifests_check.py reads
# ops/k8s with PyYAML (and kubectl's kustomize where installed) and checks
# the invariants that keep data safe against what the built programs say
# (--help: stages, options, topics, default group, grace) and the sources
# (the urgent lane's group): every stage has a worker Deployment, its
# terminationGracePeriodSeconds is above --grace, a preStop forwards the
# notice, its ScaledObject has one kafka trigger per lane on the worker's
# own groups and topics, every option exists, every Secret and ConfigMap
# referenced exists, the controller is one replica with its ledger on a
# claimed volume, the workflows ConfigMap is workflows/*.json; the systemd
# units' options and grace; the Dockerfile's base, user and runtime
# libraries. Then systemd-analyze verify on the units, with ExecStart
# pointed at the built programs: any complaint fails.
set -euo pipefail
BIN=${CNX_BIN:?CNX_BIN must name the directory of the built tools}
SRC=${CNX_SOURCE:?CNX_SOURCE must name the source tree}
PY=${CNX_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import yaml' 2>/dev/null; then
  echo "SKIP: PyYAML is not installed (apt-get install python3-yaml)"; exit 77
fi
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze is not installed (apt-get install systemd)"; exit 77
fi
fail=0
"$PY" "$SRC/tests/py/ops_manifests_check.py" --source "$SRC" --bin "$BIN" || fail=1

tmp=$(mktemp -d /tmp/cnx-ops-units.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for u in "$SRC"/ops/systemd/*.service; do
  sed "s#/usr/local/bin/#$BIN/#g" "$u" > "$tmp/$(basename "$u")"
done
# A template is verified through an instance of it.
units=()
for u in "$tmp"/*.service; do
  case $u in
    *@.service) units+=("${u%@.service}@segment-1.service") ;;
    *) units+=("$u") ;;
  esac
done
set +e
out=$(cd "$tmp" && systemd-analyze verify --man=no "${units[@]}" 2>&1)
rc=$?
set -e
if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
  echo "FAILED: systemd-analyze verify (exit $rc):"
  echo "$out" | sed 's/^/  /'
  fail=1
else
  echo "ok: systemd-analyze verify: ${#units[@]} units, no complaint"
fi
exit "$fail"
