#!/usr/bin/env bash
# Mistakes of a scientist's request, each reproduced before it was fixed.
# A mistyped file:// dataset leaves nothing behind: cnx-reprocess over
# file://<work>/nosuch (which does not exist) through the real stack
# (broker, controller) is refused at plan time (exit 2, the controller's one
# line naming the missing layer), and no directory of that name exists
# afterwards, neither the dataset nor any layer under it. (Opening a file
# store made its root directory, so reading a mistyped dataset created it.)
# An roi larger than the volume is clipped with a note, not silently: a
# 64^3 cnx-synth dataset and --roi 0,0,0,100,64,64 through
# workflows/pyramid.json (without --wait): accepted (exit 0), and stderr
# has the planner's note naming the roi, the volume and the clipped box.
source "${CNX_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}/acceptance/lib.sh"
DATA=$WORK/nosuch
mkdir -p "$WORK/wf"
cp "$SRC/workflows/segmentation.json" "$WORK/wf/"
start_broker 1
start_controller
request_over 0,0,0,64,64,64 60 segmentation mistyped
check "refused at plan time (exit $RC): $(head -c 300 "$WORK/mistyped.err")" [ "$RC" -eq 2 ]
check "the refusal names the missing input layer" grep -q "boundary" "$WORK/mistyped.err"
check "no directory $DATA was left behind" [ ! -e "$DATA" ]

"$BIN/cnx-synth" --out "$WORK/small" --shape 64,64,64 --chunk 32,32,32 --quiet >/dev/null
set +e
"$BIN/cnx-reprocess" --controller-key "$CPUB" --brokers "$BOOT" --workflow pyramid \
  --workflows "$SRC/workflows" --dataset "file://$WORK/small" --roi 0,0,0,100,64,64 \
  --request clipped >"$WORK/clipped.out" 2>"$WORK/clipped.err"
RC=$?
set -e
check "an roi past the volume is accepted (exit $RC)" [ "$RC" -eq 0 ]
check "with a note: $(grep -o 'roi [^;]*clipped to [0-9,-]*' "$WORK/clipped.err" | head -1)" \
  grep -q "roi 0,0,0-100,64,64 reaches outside the volume (voxels 0,0,0-64,64,64 of scale '8_8_8'): clipped to 0,0,0-64,64,64" "$WORK/clipped.err"
finish
