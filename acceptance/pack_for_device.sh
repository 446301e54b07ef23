#!/usr/bin/env bash
# Pack the release tools with the shared libraries they need that are not
# part of the base system (libpng, libtiff, jansson, zstd, ...), so that they
# run on the device machine (Ubuntu, no Debian -dev packages). Output:
# device-pack/{bin,lib} (git-ignored); carry it with the run. CNX_BUILD:
# the build directory (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf device-pack && mkdir -p device-pack/bin device-pack/lib
build=${CNX_BUILD:-build}
cp "$build"/bin/cnx-synth "$build"/bin/cnx-ingest \
  "$build"/tests/support/sharded_tool device-pack/bin/
for b in device-pack/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*) ;;
      *) cp -n "$lib" device-pack/lib/ ;;
    esac
  done
done
du -sh device-pack
