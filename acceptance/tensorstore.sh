#!/usr/bin/env bash
# Run on the device machine (TensorStore installed there) after
# acceptance/pack_for_device.sh here: writes an image layer (ISBI ingest and
# cnx-synth image) and compressed_segmentation layers (cnx-synth gt, ISBI
# labels) with our tools, then has TensorStore read each voxel-exact; and
# the synth image (raw uint8) and gt (compressed_segmentation uint64) in
# chunks of 32 re-stored sharded by our encoder (sharded_tool reshard: the
# shard stage's rule and encoder; raw and gzip data), which TensorStore
# must read equal to the unsharded layers.
set -euo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/device-pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bin=$PWD/device-pack/bin
out=${OUT:-/tmp}/ts-acceptance
rm -rf "$out"; mkdir -p "$out"
"$bin/cnx-synth" --out "$out/synth" --shape 160,144,96 --seed 3
layers=("$out/synth/image" "$out/synth/gt")
if [ -d shared/data/isbi2012 ] || [ -d ../shared/data/isbi2012 ]; then
  d=shared/data/isbi2012; [ -d "$d" ] || d=../shared/data/isbi2012
  "$bin/cnx-ingest" --out "$out/isbi-image" "$d"/image/*.png
  "$bin/cnx-ingest" --out "$out/isbi-label" --segmentation "$d"/label/*.png
  layers+=("$out/isbi-image" "$out/isbi-label")
fi
"$bin/cnx-synth" --out "$out/synth32" --shape 160,144,96 --seed 3 --chunk 32,32,32
# 8 chunks a shard (raw data); 128 chunks a shard in 2 minishards (gzip)
for l in image gt; do
  unit=32768; [ "$l" = gt ] && unit=262144  # bytes of one 32^3 chunk
  "$bin/sharded_tool" reshard "$out/synth32/$l" "$out/sharded-$l" $((8 * unit))
  "$bin/sharded_tool" reshard "$out/synth32/$l" "$out/sharded-gzip-$l" $((128 * unit)) gzip
  layers+=("$out/sharded-$l=$out/synth32/$l" "$out/sharded-gzip-$l=$out/synth32/$l")
done
python3 -c "import importlib.metadata as m; print('tensorstore', m.version('tensorstore'))"
python3 acceptance/tensorstore_read.py "${layers[@]}"
