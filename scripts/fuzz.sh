#!/usr/bin/env bash
# fuzz.sh runs every Go fuzz target for a bounded time (default 10s each),
# starting from the committed seed corpora under each package's
# testdata/fuzz/. CI calls it through `make fuzz`; a crasher fails the run and
# is written to testdata/fuzz/<Target>/ for committing as a regression seed.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10s}
status=0
while read -r pkg; do
  for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
    echo "fuzz: $pkg $target ($fuzztime)"
    if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"; then
      status=1
    fi
  done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u | sed 's|^\./|github.com/jetembed/jetembed/|')
exit $status
