#!/usr/bin/env bash
# The segmentation kernel on real EM: the ISBI 2012 stack (raw image as
# input, membrane filter, per section), scored per section against the
# ground-truth components as the challenge scored it, beside the
# scikit-image pipeline (gaussian, peak_local_max, watershed) tuned by a
# grid search on the same data (bench/isbi_eval.py: scikit-image's own VI
# and adapted Rand functions). Passes only if our VI (split + merge) is the
# lower. Skipped (77) when the shared data is not beside the checkout.
# Env: CNX_SUPPORT (segment_tool), CNX_SHARED, CNX_SOURCE, CNX_PYTHON.
set -euo pipefail
: "${CNX_SUPPORT:?}" "${CNX_SOURCE:?}"
PY=${CNX_PYTHON:-/usr/bin/python3}
DATA=${CNX_SHARED:-$CNX_SOURCE/../shared}/data/isbi2012
if [ ! -d "$DATA/image" ] || [ ! -d "$DATA/label" ]; then
  echo "skipped: no ISBI 2012 data at $DATA"
  exit 77
fi
exec "$PY" "$CNX_SOURCE/bench/isbi_eval.py" --data "$DATA" \
  --tool "$CNX_SUPPORT/segment_tool"
