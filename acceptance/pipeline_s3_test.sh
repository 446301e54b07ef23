#!/usr/bin/env bash
# The pipeline over object storage: broker, controller and a worker pool on
# this machine, an S3 server (s3rver on loopback, tests/support/s3rver.sh)
# holding the dataset; the `pipeline` workflow (montage -> alignment ->
# segmentation of the aligned image -> meshes) with --dataset s3://BUCKET/ds1 and, as the
# reference, the same request over a file:// copy of the same bytes.
# Every worker runs in its own empty working directory with its own key
# copy and its own read cache (--cache): workers share nothing but the
# bucket and the broker.
#  1. the s3:// run is done, with the stages of the file:// run; every
#     object it wrote (listed and read over plain HTTP by Python, not by
#     cnx) is byte-identical to the file:// run's, lineage envelopes
#     (whose times differ) aside; every output layer read back voxel-exact
#     over http:// by the numpy reader (tests/py/layer_ref.py);
#  2. the same request on a second copy (s3://BUCKET/ds2) with the fault
#     proxy (tests/support/faultproxy.py) between the controller, the
#     workers and the server, every fault kind scheduled (503, 429, resets
#     before and after the server acted, truncated and corrupted bodies,
#     stalls past the client's timeout, corrupted uploads): done, outputs
#     byte-identical again, each kind in the proxy's log;
#  3. a forced 403 on one tile (a required input) of the montage workflow:
#     that task is dead-lettered on cnx.dlq with a reason naming the
#     object's URL, and cnx-reprocess exits 4;
#  4. no partial object visible: every object named by a manifest (signed
#     envelope under the layer's lineage/) read back by Python with the
#     digest the manifest gives; cnx-verify --layer s3://... on every
#     output layer of both copies (signatures, stored bytes, lineage back
#     to the inputs, the ledger).
# The volume is 256x256x64: two by two 128^3 chunks in x and y (seams
# between chunks are crossed as in the 256^3 pipeline test) but a quarter
# of its sections and voxels, so that three pipeline runs and a montage run
# fit in about four minutes on a 2-core machine.
source "$(dirname "$0")/lib.sh"
SHAPE=256,256,64
S3=$WORK/s3
DATA=$WORK/file/ds
"$BIN/cnx-synth" --out "$DATA" --shape $SHAPE --seed 7 --quiet
"$BIN/cnx-ingest" --tiles "$DATA/tiles/tiles.json" --out "$DATA/tileset" -q >/dev/null

# The S3 server, and the settings every AWS tool reads.
BUCKET=cnx-acceptance
set +e
bash "$SRC/tests/support/s3rver.sh" start "$S3" "$BUCKET" >"$WORK/s3rver.out" 2>&1
rc=$?
set -e
[ "$rc" -eq 0 ] || { cat "$WORK/s3rver.out" >&2; echo "s3rver did not start (exit $rc)"; exit "$rc"; }
s3rver_stop() { bash "$SRC/tests/support/s3rver.sh" stop "$S3" >/dev/null 2>&1 || true; }
trap 's3rver_stop; cleanup' EXIT
ENDPOINT=$(cat "$S3/endpoint")
# (nothing of the caller's AWS set-up may point elsewhere)
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_DEFAULT_REGION AWS_ENDPOINT_URL_S3
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
export AWS_ACCESS_KEY_ID=S3RVER # the only key s3rver accepts
export AWS_SECRET_ACCESS_KEY=S3RVER
export AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=$ENDPOINT
# Stalls must outlast the client's patience; retries come quickly.
export CNX_STORE_TIMEOUT_S=3 CNX_STORE_BACKOFF_MS=50
STALL_S=6

# Python over plain HTTP, path-style and unsigned (s3rver allows it): the
# upload of the inputs and the byte comparison of the outputs, no cnx code.
cat >"$WORK/s3util.py" <<'PY'
import concurrent.futures as cf, http.client, os, sys, urllib.parse
import xml.etree.ElementTree as ET
def conn(endpoint):
    u = urllib.parse.urlsplit(endpoint)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=60)
def call(endpoint, method, path, body=None):
    c = conn(endpoint)
    c.request(method, urllib.parse.quote(path, safe="/-_.~=&?"), body=body)
    r = c.getresponse(); data = r.read(); c.close()
    if r.status != 200:
        raise SystemExit("%s %s: %d %s" % (method, path, r.status, data[:200]))
    return data
def page(endpoint, bucket, prefix):
    c = conn(endpoint)
    c.request("GET", "/%s?prefix=%s" % (bucket, urllib.parse.quote(prefix, safe="")))
    r = c.getresponse(); root = ET.fromstring(r.read()); c.close()
    if r.status != 200:
        raise SystemExit("listing %s: %d" % (prefix, r.status))
    tag = lambda e: e.tag.split("}")[-1]  # s3rver's namespace is not S3's
    keys = [e.text for e in root.iter() if tag(e) == "Key"]
    return keys, [e.text for e in root.iter() if tag(e) == "IsTruncated"] == ["true"]
def listing(endpoint, bucket, prefix):
    # Every key under prefix. s3rver 3.7 lists in its directory walk's
    # order, not in key order, so marker pages can skip keys; its v2
    # continuation tokens need DES, which Node 20's OpenSSL 3 lacks; its
    # delimiter listings drop nested prefixes. So: one unmarked page (up
    # to 1000 keys, complete when not truncated), else split the prefix by
    # its next character.
    keys, truncated = page(endpoint, bucket, prefix)
    if not truncated:
        return sorted(keys)
    out = []
    c = conn(endpoint)
    c.request("HEAD", "/%s/%s" % (bucket, urllib.parse.quote(prefix)))
    r = c.getresponse(); r.read(); c.close()
    if r.status == 200:
        out.append(prefix)
    for ch in map(chr, range(0x20, 0x7f)):
        out += listing(endpoint, bucket, prefix + ch)
    return sorted(out)
def files(root, skip_lineage=True):
    # (skipping lineage/ and file://'s .lock.* files of swapped objects)
    out = []
    for dp, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not (skip_lineage and d == "lineage")]
        out += [os.path.relpath(os.path.join(dp, n), root) for n in names
                if skip_lineage is False or not n.startswith(".lock.")]
    return out
cmd, endpoint, bucket, prefix = sys.argv[1:5]
if cmd == "put-tree":  # DIR: every file under it, as prefix/relative path
    root = sys.argv[5]
    names = files(root, skip_lineage=False)
    def put(n):
        call(endpoint, "PUT", "/%s/%s/%s" % (bucket, prefix, n),
             open(os.path.join(root, n), "rb").read())
    with cf.ThreadPoolExecutor(8) as ex:
        list(ex.map(put, names))
    print("  uploaded %d objects to s3://%s/%s" % (len(names), bucket, prefix))
elif cmd == "compare":  # ROOT LAYER...: the layers' objects, byte for byte
    root, layers = sys.argv[5], sys.argv[6:]
    bad, n = [], 0
    for layer in layers:
        want = set(files(os.path.join(root, layer)))
        pre = "%s/%s/" % (prefix, layer)
        got = [k[len(pre):] for k in listing(endpoint, bucket, pre)]
        got = set(k for k in got if "lineage" not in k.split("/"))
        bad += ["%s: only in file://: %s" % (layer, k) for k in sorted(want - got)]
        bad += ["%s: only in s3://: %s" % (layer, k) for k in sorted(got - want)]
        def same(k):
            a = open(os.path.join(root, layer, k), "rb").read()
            b = call(endpoint, "GET", "/%s/%s%s" % (bucket, pre, k))
            return None if a == b else "%s/%s: %d vs %d bytes, differ" % (
                layer, k, len(a), len(b))
        with cf.ThreadPoolExecutor(8) as ex:
            bad += [m for m in ex.map(same, sorted(want & got)) if m]
        n += len(want & got)
    print("  %d objects compared, %d differences" % (n, len(bad)))
    for m in bad[:20]:
        print("  " + m)
    sys.exit(1 if bad or n == 0 else 0)
elif cmd == "manifests":  # LAYER...: every subject of every envelope
    import base64, hashlib, json
    layers, n, bad = sys.argv[5:], 0, []
    for layer in layers:
        pre = "%s/%s/lineage/" % (prefix, layer)
        for key in listing(endpoint, bucket, pre):
            env = json.loads(call(endpoint, "GET", "/%s/%s" % (bucket, key)))
            for sub in json.loads(base64.b64decode(env["payload"]))["subject"]:
                url = sub["name"]
                assert url.startswith("s3://%s/" % bucket), url
                data = call(endpoint, "GET", "/" + url[len("s3://"):])
                if hashlib.sha256(data).hexdigest() != sub["digest"]["sha256"]:
                    bad.append(url)
                n += 1
    print("  %d manifest subjects read back, %d with other bytes" % (n, len(bad)))
    for u in bad[:10]:
        print("  " + u)
    sys.exit(1 if bad or n == 0 else 0)
elif cmd == "layers":  # ROOT LAYER...: voxels over http:// vs the files
    sys.path.insert(0, sys.argv[5])
    import numpy as np
    from layer_ref import read_layer
    root, layers, n = sys.argv[6], sys.argv[7:], 0
    for layer in layers:
        for dp, dirs, names in os.walk(os.path.join(root, layer)):
            dirs[:] = [d for d in dirs if d != "lineage"]
            if "info" not in names:
                continue
            rel = os.path.relpath(dp, root)
            try:
                info_f, vol_f = read_layer(dp, channels=True)
            except (KeyError, ValueError, FileNotFoundError):
                # not a volume (segment_properties, meshes), or a layer of
                # side objects only (alignment/v1: no chunks)
                continue
            url = "%s/%s/%s/%s" % (endpoint, bucket, prefix, rel)
            info_h, vol_h = read_layer(url, channels=True)
            ok = info_h == info_f and vol_h.dtype == vol_f.dtype and \
                np.array_equal(vol_h, vol_f)
            print("  %s: %s %s over http:// %s" % (rel, vol_f.dtype,
                  "x".join(map(str, vol_f.shape[::-1])), "== file://" if ok else "DIFFERS"))
            n += 1
            if not ok:
                sys.exit(1)
    sys.exit(0 if n else 1)
PY
s3py() { "$PY" "$WORK/s3util.py" "$1" "$ENDPOINT" "$BUCKET" "${@:2}"; }
s3py put-tree ds1 "$DATA"
s3py put-tree ds2 "$DATA"

start_broker 4
make_key
mkdir -p "$WORK/trust"
cp "$PUB" "$WORK/trust/workers.pem"

# The controller, pointed at an endpoint (the server or the proxy).
start_ctl() { # endpoint, tag
  (AWS_ENDPOINT_URL=$1 CNX_LOG=info exec "$BIN/cnx-controller" --brokers "$BOOT" \
    --ledger "$WORK/ledger.db" --trust "$WORK/trust" --key "$CKEY" --progress 0.5 \
    >>"$WORK/controller-$2.log" 2>&1) &
  CTL=$!
  PIDS+=($CTL)
}
stop_ctl() { kill -TERM "$CTL" 2>/dev/null || true; wait "$CTL" 2>/dev/null || true; }
# A worker in its own empty directory: its own key copy, cache and log.
start_s3_worker() { # endpoint, binary, stage, instance
  local dir=$WORK/workers/$4
  mkdir -p "$dir"
  cp "$KEY" "$dir/cnx.key"
  (cd "$dir" && AWS_ENDPOINT_URL=$1 CNX_LOG=${CNX_WORKER_LOG:-info} exec "$BIN/$2" \
    --stage "$3" --brokers "$BOOT" --key "$dir/cnx.key" --instance "$4" \
    --session-timeout-ms 6000 --cache "$dir/cache" --cache-max-bytes 256M $DIRTY \
    >>"$dir/log" 2>&1) &
  WORKERS+=($!)
  PIDS+=($!)
}
start_pool() { # endpoint, tag: two montage, fragment and render workers, one of the rest
  local i
  for i in 1 2; do start_s3_worker "$1" cnx-montage montage "montage-$2-$i"; done
  start_s3_worker "$1" cnx-align align-match "match-$2"
  start_s3_worker "$1" cnx-align align-solve "solve-$2"
  for i in 1 2; do start_s3_worker "$1" cnx-align align-render "render-$2-$i"; done
  for i in 1 2; do start_s3_worker "$1" cnx-segment segment "seg-$2-$i"; done
  start_s3_worker "$1" cnx-segment segment-join "join-$2"
  start_s3_worker "$1" cnx-segment segment-relabel "relabel-$2"
  start_s3_worker "$1" cnx-mesh mesh "mesh-$2"
  start_s3_worker "$1" cnx-mesh mesh-manifest "manifest-$2"
}
reprocess() { # endpoint, workflow, dataset URL, request
  local t0=$SECONDS
  set +e
  AWS_ENDPOINT_URL=$1 "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow "$2" \
    --workflows "$SRC/workflows" --dataset "$3" --roi "0,0,0,$SHAPE" \
    --request "$4" --wait --json --timeout 400 >"$WORK/$4.json" 2>"$WORK/$4.err"
  RC=$?
  set -e
  echo "$4: $((SECONDS - t0)) s, exit $RC"
}
stages() { jq_py "$WORK/$1.json" '[(s["stage"], s["done"]) for s in d["stages"]]'; }
OUTPUTS="stitched alignment aligned fragments-aligned segmentation-aligned"
# Start a fault proxy in front of the server; sets PROXY (its endpoint).
start_proxy() { # tag, proxy args...
  local tag=$1; shift
  "$PY" "$SRC/tests/support/faultproxy.py" --target "$ENDPOINT" \
    --port-file "$WORK/proxy-$tag.port" --log "$WORK/proxy-$tag.jsonl" \
    --access-log "$WORK/proxy-$tag.access" --max-seconds 800 "$@" \
    >>"$WORK/proxy-$tag.out" 2>&1 &
  PROXY_PID=$!
  PIDS+=($PROXY_PID)
  wait_for 10 test -s "$WORK/proxy-$tag.port"
  PROXY=http://127.0.0.1:$(cat "$WORK/proxy-$tag.port")
}

# 1. file:// (the reference), then s3:// straight to the server.
start_ctl "$ENDPOINT" direct
start_pool "$ENDPOINT" a
reprocess "$ENDPOINT" pipeline "file://$DATA" pipe-file
check "file:// pipeline exits 0 (rc $RC)" [ "$RC" -eq 0 ]
reprocess "$ENDPOINT" pipeline "s3://$BUCKET/ds1" pipe-s3
check "s3:// pipeline exits 0 (rc $RC)" [ "$RC" -eq 0 ]
check "s3:// pipeline: the file:// run's stages and task counts ($(stages pipe-file))" \
  [ "$(stages pipe-s3)" = "$(stages pipe-file)" ]
check "s3://$BUCKET/ds1 outputs byte-identical to file:// (Python over HTTP; lineage aside)" \
  s3py compare ds1 "$DATA" $OUTPUTS
check "s3://$BUCKET/ds1 layers voxel-exact over http:// (tests/py/layer_ref.py)" \
  s3py layers ds1 "$SRC/tests/py" "$DATA" $OUTPUTS
stop_workers
stop_ctl

# 2. Through the fault proxy: every kind, a limited number of each.
start_proxy faults --faults 503,429,reset,truncate,stall,corrupt-get,corrupt-put \
  --every 7 --limit 70 --seed 11 --stall-s $STALL_S
start_ctl "$PROXY" faults
start_pool "$PROXY" b
reprocess "$PROXY" pipeline "s3://$BUCKET/ds2" pipe-faults
check "pipeline through the fault proxy exits 0 (rc $RC)" [ "$RC" -eq 0 ]
[ "$RC" -eq 0 ] || echo "  pipe-faults: dead letter: $(reason_of pipe-faults)"
check "faulted pipeline: the file:// run's stages and task counts" \
  [ "$(stages pipe-faults)" = "$(stages pipe-file)" ]
stop_workers
stop_ctl
kill -TERM "$PROXY_PID" 2>/dev/null || true
echo "  proxy: $(wc -l <"$WORK/proxy-faults.access") requests, faults injected:" \
  "$("$PY" -c 'import collections, json, sys
c = collections.Counter(json.loads(l)["kind"] for l in open(sys.argv[1]))
print(", ".join("%s %d" % kv for kv in sorted(c.items())))' "$WORK/proxy-faults.jsonl")"
for kind in 503 429 reset truncate stall corrupt-get corrupt-put; do
  check "fault proxy injected $kind" grep -q "\"kind\": \"$kind\"" "$WORK/proxy-faults.jsonl"
done
check "s3://$BUCKET/ds2 (faulted run) outputs byte-identical to file://" \
  s3py compare ds2 "$DATA" $OUTPUTS

# 3. A forced 403 on a tile montage needs: dead-lettered, naming the URL.
TILE=tileset/tiles/z00005/r01-c01.png
start_proxy forbid --force "403:GET:^/$BUCKET/ds2/$TILE"
start_ctl "$PROXY" forbid
for i in 1 2; do start_s3_worker "$PROXY" cnx-montage montage "montage-c-$i"; done
reprocess "$PROXY" montage "s3://$BUCKET/ds2" montage-403
check "montage with a forbidden tile exits 4 (rc $RC)" [ "$RC" -eq 4 ]
check "the proxy answered 403 for the tile" grep -q '"kind": "force-403"' "$WORK/proxy-forbid.jsonl"
check "the task's dead letter names s3://$BUCKET/ds2/$TILE" \
  wait_for 30 expect montage-403 "s3://$BUCKET/ds2/$TILE"
stop_workers
stop_ctl
kill -TERM "$PROXY_PID" 2>/dev/null || true

# 4. No partial object: every object a manifest names has its bytes (read
# by Python), then cnx-verify on every output layer of both copies.
for ds in ds1 ds2; do
  check "s3://$BUCKET/$ds: every manifest subject's stored bytes hash to its digest" \
    s3py manifests "$ds" stitched/v1 alignment/v1 aligned/v1 \
      fragments-aligned/v1 segmentation-aligned/v1
done
verify_layers=()
for ds in ds1 ds2; do
  for l in stitched/v1 alignment/v1 aligned/v1 fragments-aligned/v1 \
    segmentation-aligned/v1; do
    verify_layers+=(--layer "s3://$BUCKET/$ds/$l")
  done
done
set +e
"$BIN/cnx-verify" --trust "$WORK/trust" --ledger "$WORK/ledger.db" --quiet \
  "${verify_layers[@]}" >"$WORK/verify.txt" 2>&1
rc=$?
set -e
tail -n 3 "$WORK/verify.txt"
check "cnx-verify --layer s3://... on the ten output layers exits 0 (rc $rc)" [ "$rc" -eq 0 ]
finish
