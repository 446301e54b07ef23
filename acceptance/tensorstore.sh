#!/usr/bin/env bash
# Run on the device machine (TensorStore installed there) after
# acceptance/pack_for_device.sh here: writes an image layer (ISBI ingest and
# cnx-synth image) and compressed_segmentation layers (cnx-synth gt, ISBI
# labels) with our tools, then has TensorStore read each voxel-exact.
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
python3 -c "import tensorstore; print('tensorstore', tensorstore.__version__)"
python3 acceptance/tensorstore_read.py "${layers[@]}"
