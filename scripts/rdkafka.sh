#!/usr/bin/env bash
# scripts/rdkafka.sh [PREFIX]
#
# Builds librdkafka 2.12.0, which CNX_RDKAFKA=2.12 scripts/setup.sh links
# instead of Debian's (docs/kafka.md, "librdkafka 2.12 for the tests and
# the demo": the evidence, and why it is not the default yet), into PREFIX (default
# build-deps/librdkafka-2.12.0 in the repository: ignored by git, like every
# /build*/ folder) and prints PREFIX on stdout, for
#   cmake -DCNX_RDKAFKA_PREFIX="$(bash scripts/rdkafka.sh)" ...
# Debian 12 ships 2.0.2 (librdkafka-dev), whose mock cluster (cnx-broker)
# ignores static membership and wedges its group coordinator after
# overlapping rebalances; CMake links Debian's when CNX_RDKAFKA_PREFIX is
# not given.
#
# The source is librdkafka's own release tree as node-rdkafka 3.6.1 ships it
# under deps/librdkafka, fetched from the npm registry (`npm pack`, or curl
# of the same tarball when npm is missing), pinned by version and by the
# tarball's SHA-256. Nothing is built again when PREFIX already holds 2.12.0.
# Options as cnx needs them: zstd (compression.type=zstd), OpenSSL (TLS and
# SASL/SCRAM, OAUTHBEARER), zlib, libcurl (OIDC); the bundled lz4; no
# Cyrus SASL (GSSAPI/Kerberos: libsasl2-dev is not among setup.sh's
# packages). Only the C library is built and installed (no C++ bindings,
# no examples, no tests): about 3 minutes on two cores.
# Logs go to PREFIX.log; exit status 1 with the log's tail on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
NODE_RDKAFKA=3.6.1
RDKAFKA=2.12.0
TGZ_SHA256=148f7e7b65c510314c70762d8f1be052c8fe1fdf03a128e6c78083a729a57a30
PREFIX=${1:-$PWD/build-deps/librdkafka-$RDKAFKA}
case "$PREFIX" in /*) ;; *) PREFIX=$PWD/$PREFIX ;; esac

die() { echo "rdkafka.sh: $*" >&2; exit 1; }

installed() {
  [ -f "$PREFIX/lib/pkgconfig/rdkafka.pc" ] &&
    [ -f "$PREFIX/include/librdkafka/rdkafka_mock.h" ] &&
    [ "$(PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config --modversion rdkafka)" = "$RDKAFKA" ]
}

if installed; then echo "$PREFIX"; exit 0; fi

mkdir -p "$(dirname "$PREFIX")"
log=$PREFIX.log
: >"$log"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cnx-rdkafka-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "rdkafka.sh: fetching node-rdkafka@$NODE_RDKAFKA (librdkafka $RDKAFKA) from npm" >&2
tgz=$tmp/node-rdkafka-$NODE_RDKAFKA.tgz
if command -v npm >/dev/null 2>&1; then
  (cd "$tmp" && npm pack --silent --loglevel=error "node-rdkafka@$NODE_RDKAFKA") >>"$log" 2>&1 ||
    die "npm pack node-rdkafka@$NODE_RDKAFKA failed: $(tail -n 5 "$log")"
else # the same tarball, from the registry's URL for it
  curl -fsSL --retry 3 -o "$tgz" \
    "https://registry.npmjs.org/node-rdkafka/-/node-rdkafka-$NODE_RDKAFKA.tgz" >>"$log" 2>&1 ||
    die "downloading node-rdkafka-$NODE_RDKAFKA.tgz failed: $(tail -n 5 "$log")"
fi
[ -f "$tgz" ] || die "npm pack left no $tgz"
echo "$TGZ_SHA256  $tgz" | sha256sum -c --quiet - >>"$log" 2>&1 ||
  die "node-rdkafka-$NODE_RDKAFKA.tgz does not have the pinned SHA-256 $TGZ_SHA256"
tar -xzf "$tgz" -C "$tmp" package/deps/librdkafka
src=$tmp/package/deps/librdkafka
grep -q '^#define RD_KAFKA_VERSION *0x020c00ff' "$src/src/rdkafka.h" ||
  die "node-rdkafka@$NODE_RDKAFKA does not hold librdkafka $RDKAFKA"

jobs=$(nproc 2>/dev/null || echo 2)
echo "rdkafka.sh: building librdkafka $RDKAFKA into $PREFIX (log: $log)" >&2
(
  cd "$src"
  # mklove's configure writes its cache and Makefile.config in the tree.
  ./configure --prefix="$PREFIX" --enable-zstd --enable-ssl --enable-zlib \
    --enable-curl --disable-gssapi --disable-lz4-ext --disable-syslog
  make -j"$jobs" -C src
  make -C src install
) >>"$log" 2>&1 || die "build failed: $(tail -n 20 "$log")"
installed || die "$PREFIX does not hold librdkafka $RDKAFKA after the build"
echo "$PREFIX"
