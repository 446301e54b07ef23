#!/usr/bin/env bash
# Spot notice: SIGTERM to a busy worker. (1) A task that cannot finish in
# the grace period: the worker exits 0 within the grace time, leaves no
# temporary or partial object, and another worker completes the task.
# (2) A task that fits in the grace period: the worker finishes and commits
# it before exiting.
source "$(dirname "$0")/lib.sh"
make_key
"$BIN/cnx-synth" --out "$WORK/synth" --shape 256,256,128 --seed 3 --quiet >/dev/null
start_broker 4
layer="file://$WORK/synth/image"
ntasks=$("$BIN/cnx-submit" --dry-run --layer "$layer" | wc -l)
"$BIN/cnx-submit" --brokers "$BOOT" --layer "$layer" --request spot >/dev/null

started_by() { topic_dump cnx.events | grep '"type":"started"' | grep -q "\"worker\":\"$1\""; }
succeeded_tasks() {
  topic_dump cnx.events | grep '"request":"spot"' | grep '"type":"succeeded"' \
    | grep -o '"task_key":"[^"]*"' | sort -u | wc -l
}

# (1) Busy beyond the grace period.
start_worker spot-a --slow-ms 20000 --grace 2
A=$WPID
check "worker A took a task" wait_for 30 started_by spot-a
t0=$SECONDS
kill -TERM "$A"
rc=0; wait "$A" || rc=$?
took=$((SECONDS - t0))
check "worker A exited 0 (got $rc)" [ "$rc" -eq 0 ]
check "worker A exited within the grace time (+1 s): ${took} s" [ "$took" -le 3 ]
preempted_a() { topic_dump cnx.events | grep '"worker":"spot-a"' | grep -q '"type":"preempted"'; }
check "worker A reported the task preempted" preempted_a
check "no temporary or partial object left" \
  [ "$(find "$WORK/synth/image" -name '.tmp.*' | wc -l)" -eq 0 ]
# Another worker completes everything, the abandoned task included.
start_worker spot-b --idle-exit 15
B=$WPID
all_done() { [ "$(succeeded_tasks)" -ge "$ntasks" ]; }
check "worker B completed all $ntasks tasks" wait_for 90 all_done
kill -TERM "$B" 2>/dev/null || true
wait "$B" 2>/dev/null || true

# (2) A task that fits in the grace period is finished and committed.
cp -r "$WORK/synth/boundary" "$WORK/second"
"$BIN/cnx-submit" --brokers "$BOOT" --layer "file://$WORK/second" --request spot2 \
  --roi 0,0,0,128,128,128 >/dev/null
start_worker spot-c --slow-ms 3000 --grace 20
C=$WPID
check "worker C took a task" wait_for 30 started_by spot-c
kill -TERM "$C"
rc=0; wait "$C" || rc=$?
check "worker C exited 0 after finishing (got $rc)" [ "$rc" -eq 0 ]
succeeded_c() { topic_dump cnx.events | grep '"request":"spot2"' | grep -q '"type":"succeeded"'; }
check "worker C's task succeeded before it exited" succeeded_c
# Its offset was committed: a new worker finds nothing to do.
start_worker spot-d --idle-exit 8
wait "$WPID" || true
check "the finished task was not redelivered" \
  [ "$(topic_dump cnx.events | grep '"request":"spot2"' | grep -c '"type":"started"')" -eq 1 ]
finish
