#!/usr/bin/env bash
# s3rver.sh start DIR [BUCKET...] | stop DIR
#
# A local S3 server for the store tests: s3rver (npm), pinned, installed
# into ${CNX_NPM_CACHE:-$HOME/.cache/cnx-npm} only when that version is
# missing there. start runs it on 127.0.0.1 with a port the kernel picks,
# its data in DIR/data, silent, accepting any well-formed signature
# (s3rver does not check V4 signatures anyway), with the buckets given
# (default: cnx-test) created at start-up; writes DIR/endpoint
# ("http://127.0.0.1:PORT") and DIR/pid, and returns once a bucket answers.
# stop kills it. Loopback only. Exit status 77 when node or npm is missing
# (the callers' "skipped"), 1 on any other failure.
#
# s3rver 3.7 ignores If-None-Match and If-Match on PUT and never checks
# x-amz-checksum-sha256: see docs/storage.md for what that means.
set -euo pipefail
S3RVER_VERSION=3.7.1
PREFIX=${CNX_NPM_CACHE:-$HOME/.cache/cnx-npm}

die() { echo "s3rver.sh: $*" >&2; exit 1; }

[ $# -ge 2 ] || die "usage: s3rver.sh start DIR [BUCKET...] | stop DIR"
cmd=$1
dir=$2
shift 2

installed_version() {
  node -e 'try { console.log(require(process.argv[1]).version) } catch (e) {}' \
    "$PREFIX/node_modules/s3rver/package.json" 2>/dev/null || true
}

start() {
  command -v node >/dev/null 2>&1 || { echo "s3rver.sh: node not found" >&2; exit 77; }
  command -v npm >/dev/null 2>&1 || { echo "s3rver.sh: npm not found" >&2; exit 77; }
  if [ "$(installed_version)" != "$S3RVER_VERSION" ]; then
    mkdir -p "$PREFIX" "$dir"
    # one install at a time when tests start servers in parallel
    (
      flock 9
      if [ "$(installed_version)" != "$S3RVER_VERSION" ]; then
        npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error \
          "s3rver@$S3RVER_VERSION" >"$dir/npm.log" 2>&1 ||
          die "npm install s3rver@$S3RVER_VERSION failed: $(tail -n 5 "$dir/npm.log")"
      fi
    ) 9>"$PREFIX/.install.lock" || exit 1
  fi
  [ "$(installed_version)" = "$S3RVER_VERSION" ] ||
    die "s3rver $S3RVER_VERSION is not in $PREFIX after npm install"
  [ $# -gt 0 ] || set -- cnx-test
  mkdir -p "$dir/data"
  rm -f "$dir/endpoint" "$dir/pid"
  local args=(-d "$dir/data" -a 127.0.0.1 -p 0 --silent
              --allow-mismatched-signatures --no-vhost-buckets)
  for b in "$@"; do args+=(--configure-bucket "$b"); done
  # s3rver encrypts its ListObjectsV2 continuation tokens with DES, which
  # OpenSSL 3 keeps in its legacy provider: without it every listing longer
  # than one page fails with 500 InternalError (ERR_OSSL_EVP_UNSUPPORTED).
  local node_flags=()
  if node --openssl-legacy-provider -e 0 >/dev/null 2>&1; then
    node_flags+=(--openssl-legacy-provider)
  fi
  # setsid: the server outlives this script and ignores the caller's
  # terminal signals; stop kills it by pid.
  setsid node "${node_flags[@]}" "$PREFIX/node_modules/s3rver/bin/s3rver.js" "${args[@]}" \
    >"$dir/out" 2>"$dir/err" </dev/null &
  local pid=$!
  echo "$pid" >"$dir/pid"
  local port=
  for _ in $(seq 300); do
    # (the background shell may not have created out yet)
    port=$(sed -n 's/^S3rver listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$dir/out" 2>/dev/null | head -n1 || true)
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || die "s3rver exited: $(cat "$dir/err")"
    sleep 0.1
  done
  [ -n "$port" ] || { kill "$pid" 2>/dev/null || true; die "s3rver did not start: $(cat "$dir/err")"; }
  local endpoint="http://127.0.0.1:$port"
  # ready when the first bucket answers a listing
  for _ in $(seq 100); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "$endpoint/$1?list-type=2&max-keys=1")" = 200 ]; then
      echo "$endpoint" >"$dir/endpoint"
      return 0
    fi
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true
  die "s3rver on $endpoint does not answer"
}

stop() {
  [ -f "$dir/pid" ] || return 0
  local pid
  pid=$(cat "$dir/pid")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/pid" "$dir/endpoint"
}

case $cmd in
  start) start "$@" ;;
  stop) stop ;;
  *) die "unknown command '$cmd' (start or stop)" ;;
esac
