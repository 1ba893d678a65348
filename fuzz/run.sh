#!/usr/bin/env bash
# Runs every native Go fuzz target (func FuzzXxx in *_test.go) for FUZZTIME each
# (default 5s; e.g. FUZZTIME=10m ./fuzz/run.sh for a long run). Corpora that find
# failures are written by go test under the package's testdata/fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME="${FUZZTIME:-5s}"
n=0
while IFS= read -r f; do
  pkg="./$(dirname "$f")"
  for t in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$f" | awk '{print $2}'); do
    echo "fuzz: $pkg $t ($FUZZTIME)"
    go test -run '^$' -fuzz "^${t}\$" -fuzztime "$FUZZTIME" "$pkg"
    n=$((n+1))
  done
done < <(git ls-files '*_test.go' 2>/dev/null || find . -name '*_test.go')
echo "fuzz: $n targets run"
