#!/usr/bin/env bash
# Prefetch keeps the worker's guarantees (docs/worker.md, "Prefetch"). The
# dataset lives on an S3 server (s3rver, tests/support/s3rver.sh); one
# broker partition, so the tasks of a stage queue one behind the other and
# a commit of a later offset would commit the earlier ones with it.
#  1. kill -9 while holding a prefetched task: worker w1 (--slow-ms, its
#     own --cache) runs the first task of request r1 (pyramid) and, while
#     its kernel runs, warms its cache with the inputs of the next queued
#     task; w1 is killed -9 once it says so. The prefetched task had no
#     `started` event; the request still finishes once w1 is started again,
#     every task of it with exactly one `succeeded` event and one manifest
#     in storage. A prefetch that took, started or committed its message
#     loses that task (the request times out) or doubles it.
#  2. a prefetched object whose bytes do not match its digest is refused:
#     request r2 is planned, then every image chunk on the server is
#     overwritten with other bytes; worker w2 (a fresh --cache) prefetches
#     the second task while the first one's kernel waits: right after, the
#     cache holds no entry at all, the prefetch said it stopped on the
#     digest, and the tasks are dead-lettered (EDIGEST), none succeeded.
# Exit 77 (skipped) when node or npm is missing. About a minute.
source "$(dirname "$0")/../../acceptance/lib.sh"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "worker_prefetch.sh: node/npm not installed: skipped" >&2
  exit 77
fi
SUPPORT=${CNX_SUPPORT:?CNX_SUPPORT must name the built test support programs}
TOOL="$SUPPORT/store_tool"
S3=$WORK/s3
set +e
bash "$SRC/tests/support/s3rver.sh" start "$S3" cnx-test >"$WORK/s3rver.out" 2>&1
rc=$?
set -e
[ "$rc" -eq 77 ] && exit 77
[ "$rc" -eq 0 ] || { cat "$WORK/s3rver.out" >&2; echo "s3rver did not start"; exit 1; }
s3rver_stop() { bash "$SRC/tests/support/s3rver.sh" stop "$S3" >/dev/null 2>&1 || true; }
trap 's3rver_stop; cleanup' EXIT
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_DEFAULT_REGION AWS_ENDPOINT_URL_S3 \
      CNX_S3_CHECK_BEFORE_PUT CNX_CACHE_DIR
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=$(cat "$S3/endpoint")
DS=s3://cnx-test/ds

"$BIN/cnx-synth" --out "$DS" --shape 256,128,128 --quiet
start_broker 1
start_controller
reprocess() { # request, timeout
  "$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow pyramid \
    --workflows "$SRC/workflows" --dataset "$DS" --roi 0,0,0,256,128,128 \
    --request "$1" --wait --quiet --timeout "$2"
}
events() { topic_dump cnx.events; }
keyed() { # topic -> "key<TAB>message" lines
  timeout 30 kcat -b "$BOOT" -C -t "$1" -o beginning -e -q -f '%k\t%s\n' 2>/dev/null || true
}
tasks_of() { # request -> task keys released for it, one a line
  keyed cnx.tasks.downsample | grep "\"request\":\"$1\"" | cut -f1 | sort -u
}

# ---- 1. kill -9 while a prefetched task is held -------------------------
start_worker w1 --cache "$WORK/cache1" --slow-ms 8000
reprocess r1 180 >"$WORK/r1.out" 2>"$WORK/r1.err" &
RPID=$!
PIDS+=($RPID)
prefetched() { grep -q "prefetched task sha256:" "$WORK/w1.log"; }
check "w1 prefetches the next task while the first one's kernel runs" wait_for 90 prefetched
K=$(sed -n 's/.*prefetched task \(sha256:[0-9a-f]*\).*/\1/p' "$WORK/w1.log" | head -n1)
kill -9 "$WPID"
wait "$WPID" 2>/dev/null || true
nstarted=$(events | grep "\"task_key\":\"$K\"" | grep -c '"type":"started"' || true)
check "the prefetched task was not started (started events: $nstarted)" [ "$nstarted" -eq 0 ]
ncached=$( (find "$WORK/cache1/sha256" -type f 2>/dev/null || true) | wc -l)
check "its inputs were in w1's cache when it died ($ncached entries)" [ "$ncached" -ge 1 ]

start_worker w1 --cache "$WORK/cache1"
rrc=0
wait "$RPID" || rrc=$?
check "r1 finishes done after the restart (cnx-reprocess exit $rrc)" [ "$rrc" -eq 0 ]
keys=$(tasks_of r1)
nkeys=$(echo "$keys" | grep -c . || true)
check "r1 released tasks ($nkeys)" [ "$nkeys" -ge 2 ]
events >"$WORK/events1"
for k in $keys; do
  ns=$(grep "\"task_key\":\"$k\"" "$WORK/events1" | grep '"request":"r1"' |
       grep -c '"type":"succeeded"' || true)
  hex=${k#sha256:}
  nm=$("$TOOL" list "$DS/pyramid/v1" "lineage/$hex" 2>/dev/null | grep -c '\.dsse\.json$' || true)
  check "task ${k:7:12}: one succeeded event ($ns), one manifest in storage ($nm)" \
    [ "$ns" -eq 1 -a "$nm" -eq 1 ]
done
check "the prefetched task is one of r1's" grep -qx "$K" <<<"$keys"
kill "$WPID" 2>/dev/null || true
wait "$WPID" 2>/dev/null || true

# ---- 2. a prefetched object with other bytes than its digest ------------
reprocess r2 90 >"$WORK/r2.out" 2>"$WORK/r2.err" &
RPID2=$!
PIDS+=($RPID2)
released() { [ "$(tasks_of r2 | grep -c .)" -ge 2 ]; }
check "r2's first stage is released" wait_for 60 released
"$TOOL" list "$DS/image" >"$WORK/image.list"
nbad=0
while read -r name; do
  case "$name" in [0-9]*_[0-9]*_[0-9]*/*) ;; *) continue ;; esac
  "$TOOL" get "$DS/image" "$name" >"$WORK/chunk"
  printf '\377' | dd of="$WORK/chunk" bs=1 seek=0 conv=notrunc status=none
  printf 'x' >>"$WORK/chunk"
  CNX_S3_CHECK_BEFORE_PUT=0 "$TOOL" put "$DS/image" "$name" "$WORK/chunk" >/dev/null
  nbad=$((nbad + 1))
done <"$WORK/image.list"
check "image chunks overwritten on the server ($nbad)" [ "$nbad" -ge 2 ]
start_worker w2 --cache "$WORK/cache2" --slow-ms 4000 --retry-window 0
# The first task's kernel waits 4 s before it reads: the cache is looked at
# as soon as the prefetch of the second task has ended, before any read of
# a task's own.
pf_ended() { grep -q "prefetched task sha256:\|prefetch of task sha256:" "$WORK/w2.log"; }
check "w2 prefetches the second task" wait_for 60 pf_ended
ncached=$( (find "$WORK/cache2/sha256" -type f 2>/dev/null || true) | wc -l)
check "w2's cache holds no entry after it ($ncached)" [ "$ncached" -eq 0 ]
check "the prefetch refused the damaged object" \
  grep -q "prefetch of task sha256:[0-9a-f]* stopped after 0 object(s).*digest" "$WORK/w2.log"
dead() { [ "$(keyed cnx.dlq | cut -f1 | sort -u | grep -cxF -f <(tasks_of r2) || true)" -ge 2 ]; }
check "r2's tasks are dead-lettered" wait_for 60 dead
check "  for their digests" grep -q "EDIGEST" <(topic_dump cnx.dlq)
ncached=$( (find "$WORK/cache2/sha256" -type f 2>/dev/null || true) | wc -l)
check "w2's cache still holds no entry ($ncached)" [ "$ncached" -eq 0 ]
nsucc=$(events | grep '"request":"r2"' | grep -c '"type":"succeeded"' || true)
check "no task of r2 succeeded ($nsucc)" [ "$nsucc" -eq 0 ]
if [ "$failed" -ne 0 ]; then
  tail -n 30 "$WORK/w1.log"; tail -n 30 "$WORK/w2.log" 2>/dev/null
  tail -n 20 "$WORK/controller.log"
fi
finish
