#!/usr/bin/env bash
# neuroglancer.sh: make sure the browser test's npm tools are installed,
# then print the directory that holds them.
#
# Both pinned, installed into ${CNX_NPM_CACHE:-$HOME/.cache/cnx-npm}/browser
# only when that version is missing there (one install at a time: flock):
#  - playwright-core (drives Debian's chromium over the DevTools protocol;
#    no browser download, no dependencies): DIR/node_modules/playwright-core;
#  - @janelia-flyem/neuroglancer, the built viewer: `npm install` of that
#    package pulls a dependency from outside the registry, so the tarball is
#    fetched with `npm pack`, checked against its pinned sha512 (the
#    registry's integrity field) and only its built bundle, dist/min
#    (index.html, main.bundle.js, chunk_worker.bundle.js, ...), is unpacked:
#    DIR/neuroglancer-VERSION/index.html.
# Exit status 77 when node, npm or chromium (${CHROMIUM:-/usr/bin/chromium})
# is missing (the callers' "skipped"), 1 on any other failure.
set -euo pipefail
PLAYWRIGHT_VERSION=1.65.1
NG_VERSION=2.37.5
NG_SHA512=pLLhJBcoXXpQMmpRfyl1QFTHdS6jGDqiMuaW0SQiF8s1daVMa8R5qzOZnMw9afHeqFjp+sLRYUYTnxmqCgTNoA==
DIR=${CNX_NPM_CACHE:-$HOME/.cache/cnx-npm}/browser
NG=$DIR/neuroglancer-$NG_VERSION

die() { echo "neuroglancer.sh: $*" >&2; exit 1; }
skip() { echo "neuroglancer.sh: $*" >&2; exit 77; }

command -v node >/dev/null 2>&1 || skip "node not found"
command -v npm >/dev/null 2>&1 || skip "npm not found"
chromium=${CHROMIUM:-/usr/bin/chromium}
[ -f "$chromium" ] && [ -x "$chromium" ] || skip "$chromium not found"

playwright_version() {
  node -e 'try { console.log(require(process.argv[1]).version) } catch (e) {}' \
    "$DIR/node_modules/playwright-core/package.json" 2>/dev/null || true
}
ready() {
  [ "$(playwright_version)" = "$PLAYWRIGHT_VERSION" ] &&
    [ -f "$NG/index.html" ] && [ -f "$NG/main.bundle.js" ] && [ -f "$NG/chunk_worker.bundle.js" ]
}

if ! ready; then
  mkdir -p "$DIR"
  (
    flock 9
    if [ "$(playwright_version)" != "$PLAYWRIGHT_VERSION" ]; then
      npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error --save-exact \
        "playwright-core@$PLAYWRIGHT_VERSION" >"$DIR/npm.log" 2>&1 ||
        die "npm install playwright-core@$PLAYWRIGHT_VERSION failed: $(tail -n 5 "$DIR/npm.log")"
    fi
    if [ ! -f "$NG/main.bundle.js" ] || [ ! -f "$NG/chunk_worker.bundle.js" ] ||
       [ ! -f "$NG/index.html" ]; then
      tmp=$(mktemp -d "$DIR/.pack.XXXXXX")
      trap 'rm -rf "$tmp"' EXIT
      (cd "$tmp" && npm pack --loglevel=error "@janelia-flyem/neuroglancer@$NG_VERSION" \
        >"$tmp/pack.log" 2>&1) ||
        die "npm pack @janelia-flyem/neuroglancer@$NG_VERSION failed: $(tail -n 5 "$tmp/pack.log")"
      tgz=$tmp/janelia-flyem-neuroglancer-$NG_VERSION.tgz
      [ -f "$tgz" ] || die "npm pack wrote no $(basename "$tgz")"
      got=$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)
      [ "$got" = "$NG_SHA512" ] ||
        die "$(basename "$tgz"): sha512 $got, want the pinned $NG_SHA512"
      tar xzf "$tgz" -C "$tmp" package/dist/min ||
        die "$(basename "$tgz") has no package/dist/min"
      rm -rf "$NG"
      mv "$tmp/package/dist/min" "$NG"
    fi
  ) 9>"$DIR/.install.lock" || exit 1
fi
ready || die "playwright-core $PLAYWRIGHT_VERSION or Neuroglancer $NG_VERSION's bundle is not in $DIR after installing"
echo "$DIR"
