#!/usr/bin/env bash
# `cnx --help` lists every command that is built: each cnx-<name> program
# in the build's bin directory appears as a command (truth: the directory
# listing, not the list in tools/cnx/main.c), every command listed but
# `demo` is such a program, and `cnx <name> --help` runs it (exit 0,
# its own usage line). Before this test, verify, tune and the workers
# other than downsample were missing from the list.
set -euo pipefail
BIN=${CNX_BIN:?CNX_BIN must name the directory of the built tools}
out=$("$BIN/cnx" --help)
listed=$(echo "$out" | awk '/^  [a-z]/ {print $1}' | sort)
built=$(cd "$BIN" && ls cnx-* | sed 's/^cnx-//' | sort)
fail=0
for n in $built; do
  if ! echo "$listed" | grep -qx "$n"; then
    echo "FAILED: cnx-$n is built but cnx --help does not list '$n'"; fail=1
  fi
  u=$("$BIN/cnx" "$n" --help 2>&1 | head -1) || { echo "FAILED: cnx $n --help exits non-zero"; fail=1; }
  case $u in
    *"usage: cnx-$n"*) ;;
    *) echo "FAILED: cnx $n --help: '$u' is not cnx-$n's usage"; fail=1 ;;
  esac
done
for n in $listed; do
  [ "$n" = demo ] || [ -x "$BIN/cnx-$n" ] ||
    { echo "FAILED: cnx --help lists '$n', but $BIN/cnx-$n is not built"; fail=1; }
done
echo "cnx --help: $(echo "$listed" | wc -l) commands listed, $(echo "$built" | wc -l) programs built"
[ "$fail" -eq 0 ] && echo "ok: every built program is listed and runs with --help"
exit "$fail"
