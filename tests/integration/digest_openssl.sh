#!/usr/bin/env bash
# Our sha256 digests of stored bytes equal those of the openssl and sha256sum
# command-line tools, on files of awkward sizes (0, 1, 55, 56, 63, 64, 65
# bytes, 1 MiB + 3).
set -euo pipefail
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
for n in 0 1 55 56 63 64 65 1048579; do
  head -c "$n" /dev/urandom > "$tmp/f$n"
  ours=$("$CNX_SUPPORT/digest_file" "$tmp/f$n" | cut -d' ' -f1)
  theirs="sha256:$(openssl dgst -sha256 -r "$tmp/f$n" | cut -d' ' -f1)"
  other="sha256:$(sha256sum "$tmp/f$n" | cut -d' ' -f1)"
  if [ "$ours" = "$theirs" ] && [ "$ours" = "$other" ]; then
    passed=$((passed + 1))
  else
    echo "MISMATCH size $n: cnx $ours openssl $theirs sha256sum $other"
    failed=$((failed + 1))
  fi
done
echo "digest vs openssl: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
