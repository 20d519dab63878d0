#!/usr/bin/env bash
# fuzz.sh runs every Go fuzz target for a bounded number of executions
# (default 50000 each), starting from the committed seed corpora under each
# package's testdata/fuzz/. CI calls it through `make fuzz`; a crasher fails
# the run and is written to testdata/fuzz/<Target>/ for committing as a
# regression seed.
#
# The budget is a count, not a duration: with a duration, Go 1.26's fuzz
# coordinator can report a bare "context deadline exceeded" failure at the
# deadline when a worker is still mid-call on a loaded machine
# (go.dev/issue/75804, fixed in Go 1.27). A count has no deadline to race.
# A duration still works (`make fuzz FUZZTIME=30s`) for local exploration.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-50000x}
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
