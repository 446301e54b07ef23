#!/usr/bin/env bash
# Storage outages in the middle of a request (issue 13, defect 6): the
# `pyramid` workflow (4 ds1 + 1 ds2 tasks) over s3:// datasets on a local
# S3 server (tests/support/s3rver.sh), the controller and two downsample
# workers reaching it through the fault proxy (tests/support/faultproxy.py),
# whose --outage-file makes the store answer 503 to every request while the
# file exists. Each task sleeps 3 s (--slow-ms) before it reads and writes,
# so that the outage, opened once a task has succeeded, meets the second
# round of ds1 tasks and ds2.
#  0. the reference: the request on a clean copy, no outage (for part 2,
#     on a second dataset, after the replay);
#  1. a 60 s outage opened after the first task of a request succeeded,
#     workers with the default --retry-window (300 s): the request
#     completes without manual action (exit 0, no dead letter), the workers
#     logged their in-place retries, and the outputs are byte-identical to
#     the reference;
#  2. a 40 s outage with workers on --retry-window 15: tasks are
#     dead-lettered and the request fails (exit 4); once the store is back,
#     cnx-replay finishes it: exit 0, every dead-lettered task released
#     again, outputs byte-identical to the reference.
# The outage here is the object store's. A read-only or full *filesystem*
# (file:// datasets) is not exercised by this test: in the development
# container (root, with CAP_SYS_ADMIN) a small tmpfs and `mount -o
# remount,ro` do work, but CI runners may not grant the capability. The
# worker waits out whatever store error is retriable; whether file://
# marks EROFS and ENOSPC retriable is not checked here.
source "$(dirname "$0")/lib.sh"
SHAPE=256,256,128
S3=$WORK/s3
DATA=$WORK/file/ds
DATA2=$WORK/file/ds2
"$BIN/cnx-synth" --out "$DATA" --shape $SHAPE --seed 3 --quiet
# Part 2 runs on other bytes, so that no task of it was done before: the
# controller's reuse goes by task key, which does not name the dataset, so
# a replay on the same bytes as an earlier request would reuse that
# request's manifest, whose outputs are in the other dataset.
"$BIN/cnx-synth" --out "$DATA2" --shape $SHAPE --seed 4 --quiet

BUCKET=cnx-outage
set +e
bash "$SRC/tests/support/s3rver.sh" start "$S3" "$BUCKET" >"$WORK/s3rver.out" 2>&1
rc=$?
set -e
[ "$rc" -eq 0 ] || { cat "$WORK/s3rver.out" >&2; echo "s3rver did not start (exit $rc)"; exit "$rc"; }
s3rver_stop() { bash "$SRC/tests/support/s3rver.sh" stop "$S3" >/dev/null 2>&1 || true; }
trap 's3rver_stop; cleanup' EXIT
ENDPOINT=$(cat "$S3/endpoint")
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_DEFAULT_REGION AWS_ENDPOINT_URL_S3
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
# A store request gives up quickly (two retries), so the outage reaches the
# worker's own retry logic, which is what is under test.
export CNX_STORE_TIMEOUT_S=3 CNX_STORE_BACKOFF_MS=50 CNX_STORE_RETRIES=2

# Python over plain HTTP (no cnx code): upload a tree, compare two prefixes.
cat >"$WORK/s3.py" <<'PY'
import http.client, os, sys, urllib.parse
import xml.etree.ElementTree as ET
endpoint, bucket = sys.argv[2], sys.argv[3]
u = urllib.parse.urlsplit(endpoint)
def call(method, path, body=None):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request(method, urllib.parse.quote(path, safe="/-_.~=&?"), body=body)
    r = c.getresponse(); data = r.read(); c.close()
    if r.status != 200:
        raise SystemExit("%s %s: %d" % (method, path, r.status))
    return data
def listing(prefix):  # s3rver: one page of up to 1000 keys
    root = ET.fromstring(call("GET", "/%s?prefix=%s" % (bucket, prefix)))
    tag = lambda e: e.tag.split("}")[-1]
    assert [e.text for e in root.iter() if tag(e) == "IsTruncated"] != ["true"]
    return [e.text[len(prefix):] for e in root.iter() if tag(e) == "Key"]
if sys.argv[1] == "put-tree":  # PREFIX DIR
    prefix, root = sys.argv[4], sys.argv[5]
    n = 0
    for dp, _, names in os.walk(root):
        for name in names:
            rel = os.path.relpath(os.path.join(dp, name), root)
            call("PUT", "/%s/%s/%s" % (bucket, prefix, rel),
                 open(os.path.join(dp, name), "rb").read())
            n += 1
    print("  uploaded %d objects to s3://%s/%s" % (n, bucket, prefix))
elif sys.argv[1] == "same":  # PREFIX-A PREFIX-B LAYER: lineage aside
    a, b, layer = sys.argv[4:7]
    ka = sorted(k for k in listing("%s/%s/" % (a, layer)) if not k.startswith("lineage/"))
    kb = sorted(k for k in listing("%s/%s/" % (b, layer)) if not k.startswith("lineage/"))
    bad = ["only in one: %s" % k for k in sorted(set(ka) ^ set(kb))]
    for k in sorted(set(ka) & set(kb)):
        if call("GET", "/%s/%s/%s/%s" % (bucket, a, layer, k)) != \
           call("GET", "/%s/%s/%s/%s" % (bucket, b, layer, k)):
            bad.append("differ: %s" % k)
    print("  %s vs %s: %d objects of %s compared, %d differences %s" % (
        a, b, len(set(ka) & set(kb)), layer, len(bad), bad[:5]))
    sys.exit(1 if bad or not ka else 0)
PY
s3py() { "$PY" "$WORK/s3.py" "$1" "$ENDPOINT" "$BUCKET" "${@:2}"; }
# (the pyramid reads only the image layer)
for ds in clean ds-a; do s3py put-tree "$ds/image" "$DATA/image"; done
for ds in clean-b ds-b; do s3py put-tree "$ds/image" "$DATA2/image"; done

start_broker 4
make_key
mkdir -p "$WORK/trust"
cp "$PUB" "$WORK/trust/workers.pem"

# The proxy: no scheduled faults; the store is down while $OUTAGE exists.
OUTAGE=$WORK/outage
"$PY" "$SRC/tests/support/faultproxy.py" --target "$ENDPOINT" \
  --port-file "$WORK/proxy.port" --log "$WORK/proxy.jsonl" \
  --access-log "$WORK/proxy.access" --outage-file "$OUTAGE" \
  --max-seconds 1500 >>"$WORK/proxy.out" 2>&1 &
PIDS+=($!)
wait_for 10 test -s "$WORK/proxy.port"
PROXY=http://127.0.0.1:$(cat "$WORK/proxy.port")
export AWS_ENDPOINT_URL=$PROXY

CNX_LOG=info "$BIN/cnx-controller" --brokers "$BOOT" --ledger "$WORK/ledger.db" \
  --trust "$WORK/trust" --key "$CKEY" --progress 0.5 >>"$WORK/controller.log" 2>&1 &
PIDS+=($!)
start_pool() { # tag, extra worker args...
  local tag=$1; shift
  stop_workers
  for i in 1 2; do
    start_worker "w-$tag-$i" --slow-ms 3000 "$@"
    WORKERS+=($WPID)
  done
}
reprocess() { # request, dataset prefix; JSON in $WORK/<request>.json
  local t0=$SECONDS
  set +e
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" \
    --workflow pyramid --workflows "$SRC/workflows" --dataset "s3://$BUCKET/$2" \
    --roi "0,0,0,$SHAPE" --request "$1" --wait --json --timeout 600 \
    >"$WORK/$1.json" 2>"$WORK/$1.err"
  RC=$?
  set -e
  echo "  $1: $((SECONDS - t0)) s, exit $RC"
}
# Open the outage once a task of the request has stored its manifest (the
# proxy's access log shows the PUT at once; the events topic would take
# a kcat round trip), for $2 s.
first_manifest() { # dataset prefix
  grep -q "PUT /$BUCKET/$1/pyramid/v1/lineage/" "$WORK/proxy.access" 2>/dev/null
}
outage_after_first() { # dataset prefix, seconds
  wait_for 120 first_manifest "$1" || return 1
  touch "$OUTAGE"
  echo "  outage opened (a task on $1 done)"
  sleep "$2"
  rm -f "$OUTAGE"
  echo "  outage closed after $2 s"
}
dead_letters_of() { # request -> number of its dead letters on cnx.dlq
  topic_dump cnx.dlq | "$PY" -c 'import json, sys
print(sum(1 for l in sys.stdin if json.loads(l).get("task", {}).get("request") == sys.argv[1]))' "$1"
}
outages() { grep -c '"kind": "outage"' "$WORK/proxy.jsonl" 2>/dev/null || true; }

# 0. The reference.
start_pool ref
reprocess req-clean clean
check "reference run exits 0 (rc $RC)" [ "$RC" -eq 0 ]
check "reference run: 5 tasks done" \
  [ "$(jq_py "$WORK/req-clean.json" 'sum(s["done"] for s in d["stages"])')" = 5 ]

# 1. A 60 s outage, waited out.
start_pool a
outage_after_first ds-a 60 &
OPID=$!
reprocess req-a ds-a
wait "$OPID" || true
check "request through a 60 s outage exits 0 (rc $RC)" [ "$RC" -eq 0 ]
check "the proxy refused requests during the outage ($(outages))" [ "$(outages)" -gt 0 ]
check "workers retried in place during the outage" \
  grep -q "retrying in place" "$WORK"/w-a-*.log
{ grep -h "retrying in place" "$WORK"/w-a-*.log || true; } | tail -n 2 | sed 's/^/  /'
check "no dead letter for req-a ($(dead_letters_of req-a))" [ "$(dead_letters_of req-a)" -eq 0 ]
check "req-a outputs byte-identical to the reference" s3py same clean ds-a pyramid/v1

# 2. A 40 s outage against a 15 s retry window: dead letters, then replay.
start_pool b --retry-window 15
outage_after_first ds-b 40 &
OPID=$!
reprocess req-b ds-b
wait "$OPID" || true
rm -f "$OUTAGE"
check "request through a 40 s outage with a 15 s window exits 4 (rc $RC)" [ "$RC" -eq 4 ]
NDEAD=$(dead_letters_of req-b)
check "req-b has dead letters on cnx.dlq ($NDEAD)" [ "$NDEAD" -gt 0 ]
check "a dead letter names the outage (503)" expect req-b "503"
t0=$SECONDS
set +e
"$BIN/cnx-replay" --controller-key "$CPUB" --brokers "$BOOT" --request req-b \
  --as req-b.replay --json --timeout 600 >"$WORK/replay.json" 2>"$WORK/replay.err"
RC=$?
set -e
echo "  cnx-replay: $((SECONDS - t0)) s, exit $RC"
sed 's/^/  /' "$WORK/replay.err" | grep -v "^  cnx-replay: ds" | tail -n 12
check "cnx-replay finishes req-b after the outage (rc $RC)" [ "$RC" -eq 0 ]
check "the replay is done with every task (5)" \
  [ "$(jq_py "$WORK/replay.json" 'd["outcome"], sum(s["done"] for s in d["stages"])')" = "('done', 5)" ]
check "the replay reused the tasks req-b had done" \
  [ "$(jq_py "$WORK/replay.json" 'sum(s["reused"] for s in d["stages"]) > 0')" = True ]
# Each dead-lettered task is released again, or reused where it was done
# meanwhile: at-least-once delivery may hand a task dead-lettered by one
# worker to another (a commit refused in a rebalance) after the outage,
# which then does it; cnx-replay reports those as reused and names any
# task it neither released nor reused ("was not released again").
replayed_all() {
  grep -Eq "[0-9]+ of $NDEAD dead-lettered task\(s\) of req-b released again" "$WORK/replay.err" &&
    { grep -q "$NDEAD of $NDEAD dead-lettered task(s) of req-b released again\$" "$WORK/replay.err" ||
      grep -q "of req-b released again, the rest reused" "$WORK/replay.err"; } &&
    ! grep -q "was not released again" "$WORK/replay.err"
}
check "every dead-lettered task of req-b was released again (or reused: done meanwhile)" replayed_all
# The reference for part 2, after the replay (so the replay reused only
# what req-b had done).
start_pool ref-b
reprocess req-clean-b clean-b
check "reference run of part 2 exits 0 (rc $RC)" [ "$RC" -eq 0 ]
check "req-b outputs (after the replay) byte-identical to the reference" \
  s3py same clean-b ds-b pyramid/v1

# Bad input: one line, non-zero exit.
set +e
"$BIN/cnx-replay" --controller-key "$CPUB" --brokers "$BOOT" --request no-such-request \
  --timeout 20 >/dev/null 2>"$WORK/replay-bad.err"
RC=$?
set -e
check "cnx-replay of an unknown request: exit 2, one line ($(cat "$WORK/replay-bad.err"))" \
  test "$RC" -eq 2 -a "$(wc -l <"$WORK/replay-bad.err")" -eq 1
stop_workers
finish
