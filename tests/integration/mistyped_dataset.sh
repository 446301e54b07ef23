#!/usr/bin/env bash
# A mistyped file:// dataset leaves nothing behind: cnx-reprocess over
# file://<work>/nosuch (which does not exist) through the real stack
# (broker, controller) is refused at plan time (exit 2, the controller's one
# line naming the missing layer), and no directory of that name exists
# afterwards, neither the dataset nor any layer under it. (Opening a file
# store made its root directory, so reading a mistyped dataset created it.)
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
finish
