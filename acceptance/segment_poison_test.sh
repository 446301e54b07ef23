#!/usr/bin/env bash
# Bad tasks at a live segmentation worker: cnx-segment --stage segment and
# cnx-mesh --stage mesh get, among good tasks (cnx-submit), tasks with a
# parameter out of range, an unknown parameter, a missing halo (mesh), and
# a chunk whose bytes no longer match the digest the task lists. Each lands
# in cnx.dlq with a reason naming the problem; the workers keep running and
# finish every good task; nothing is written for the bad ones. A task of
# two chunks is good: it writes the bytes the two one-chunk tasks write.
source "$(dirname "$0")/lib.sh"
make_key
"$BIN/cnx-synth" --out "$WORK/s" --shape 256,128,128 --seed 5 --quiet >/dev/null
# The output layers: uint64 segmentations on the boundary's grid.
"$PY" - "$WORK/s" <<'PY'
import json, os, sys
root = sys.argv[1]
info = json.load(open(os.path.join(root, "boundary", "info")))
info.update(type="segmentation", data_type="uint64")
for s in info["scales"]:
    s.update(encoding="compressed_segmentation",
             compressed_segmentation_block_size=[8, 8, 8])
for name in ("frag", "frag2", "frag3"):
    os.makedirs(os.path.join(root, name))
    json.dump(info, open(os.path.join(root, name, "info"), "w"))
PY
start_broker 2
start_stage() { # exe, stage, instance
  CNX_LOG=info "$BIN/$1" --stage "$2" --brokers "$BOOT" --key "$KEY" --instance "$3" \
    --session-timeout-ms 6000 $DIRTY >>"$WORK/$3.log" 2>&1 &
  PIDS+=($!)
  WPID=$!
}
start_stage cnx-segment segment seg-1
SEG=$WPID
start_stage cnx-mesh mesh mesh-1
MESH=$WPID
sleep 4
B="file://$WORK/s/boundary"
sub() { "$BIN/cnx-submit" --brokers "$BOOT" "$@" >/dev/null; }
sub --stage segment --layer "$B" --output "file://$WORK/s/frag" --request bad-range \
  --roi 0,0,0,128,128,128 --parameters '{"merge_threshold": 2}'
sub --stage segment --layer "$B" --output "file://$WORK/s/frag" --request bad-key \
  --roi 0,0,0,128,128,128 --parameters '{"merge_treshold": 0.5}'
sub --stage segment --layer "$B" --output "file://$WORK/s/frag3" --request two-chunks \
  --task-size 256,128,128
# A task listing the digest of a chunk that is then changed on disk.
cp -r "$WORK/s/boundary" "$WORK/s/boundary2"
sub --stage segment --layer "file://$WORK/s/boundary2" --output "file://$WORK/s/frag2" \
  --request bad-digest --roi 0,0,0,128,128,128
printf '\x01' | dd of="$WORK/s/boundary2/8_8_8/0-128_0-128_0-128" bs=1 seek=1000 conv=notrunc 2>/dev/null
sub --stage segment --layer "$B" --output "file://$WORK/s/frag" --request good
wait_for 120 bash -c "kcat -b '$BOOT' -C -t cnx.events -o beginning -e -q 2>/dev/null |
  grep '\"request\":\"good\"' | grep -c '\"type\":\"succeeded\"' | grep -qx 2"
sub --stage mesh --layer "file://$WORK/s/frag" --output "file://$WORK/s/frag" \
  --request bad-halo --roi 0,0,0,128,128,128 --halo 0
sub --stage mesh --layer "file://$WORK/s/frag" --output "file://$WORK/s/frag" --request mesh-good

have_all() {
  for r in bad-range bad-key bad-digest bad-halo; do
    [ -n "$(reason_of $r)" ] || return 1
  done
  [ "$(topic_dump cnx.events | grep '"request":"mesh-good"' | grep -c '"type":"succeeded"')" -eq 2 ] &&
  [ "$(topic_dump cnx.events | grep '"request":"two-chunks"' | grep -c '"type":"succeeded"')" -eq 1 ]
}
check "every bad task dead-lettered, every good one done" wait_for 120 have_all
check "out of range: names parameters.merge_threshold" expect bad-range "parameters.merge_threshold"
check "unknown key: named" expect bad-key "merge_treshold"
check "changed chunk: digest mismatch named" expect bad-digest "0-128_0-128_0-128"
check "mesh without halo: refused" expect bad-halo "halo"
check "the segment worker is still running" kill -0 "$SEG"
check "the mesh worker is still running" kill -0 "$MESH"
check "nothing written for the bad-digest task" [ ! -e "$WORK/s/frag2/8_8_8" ]
check "the good tasks wrote both chunks and face records" \
  [ "$(ls "$WORK/s/frag/8_8_8" | wc -l)" -eq 2 -a "$(ls "$WORK/s/frag/faces/8_8_8" | wc -l)" -eq 2 ]
same_chunks() { # one task of two chunks == two tasks of one chunk, byte for byte
  local d f n=0
  for d in 8_8_8 faces/8_8_8; do
    for f in "$WORK/s/frag/$d"/*; do
      cmp -s "$f" "$WORK/s/frag3/$d/$(basename "$f")" || return 1
      n=$((n + 1))
    done
  done
  [ "$n" -eq 4 ] && [ "$(find "$WORK/s/frag3/8_8_8" "$WORK/s/frag3/faces/8_8_8" -type f | wc -l)" -eq 4 ]
}
check "a task of two chunks wrote the two chunks and face records of the one-chunk tasks" same_chunks
check "the mesh tasks wrote fragments and indexes" \
  [ "$(ls "$WORK/s/frag/mesh_index/8_8_8" | wc -l)" -eq 2 -a "$(ls "$WORK/s/frag/mesh" | wc -l)" -gt 10 ]
finish
