#!/usr/bin/env bash
# The test command: install, build with and without sanitizers, run every
# unit and integration test under AddressSanitizer + UndefinedBehaviorSanitizer
# and the fast ones again on the release build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh release asan
jobs=$(nproc 2>/dev/null || echo 2)
echo "== tests under ASan + UBSan (build-asan) =="
(cd build-asan && ctest --output-on-failure -j"$jobs")
echo "== unit tests on the release build (build) =="
(cd build && ctest --output-on-failure -j"$jobs" -L unit)
