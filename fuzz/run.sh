#!/usr/bin/env bash
# Runs every native Go fuzz target (func FuzzXxx in *_test.go) for FUZZTIME each
# (default 5s; e.g. FUZZTIME=10m ./fuzz/run.sh for a long run). FUZZTIME may also be an
# execution count such as FUZZTIME=200000x, which sets no deadline at all. Corpora that
# find failures are written by go test under the package's testdata/fuzz/.
#
# Go's fuzzing coordinator (before Go 1.27) can fail a timed run with a bare "context
# deadline exceeded" when the -fuzztime deadline fires: its check that the deadline is a
# normal stop races the cancellation of its workers' context. No input is involved. A
# target is therefore run once more, and only once, when its failed run shows nothing but
# that (see deadline_race); any other failure, or the same failure twice, fails the run.
# fuzz/run_test.go tests these decisions against a fake go.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME="${FUZZTIME:-5s}"

# corpus DIR lists the files under DIR with their SHA-256, sorted, one per line (nothing
# if DIR is absent).
corpus() {
  if [ -d "$1" ]; then find "$1" -type f -exec sha256sum {} + | LC_ALL=C sort; fi
}

# deadline_race OUT BEFORE AFTER TARGET succeeds only when the failed run whose output is
# in file OUT is the coordinator race: the corpus listing (BEFORE, AFTER) did not change,
# go reported no failing input, no panic or runtime fatal error, exactly one failed test
# (TARGET itself), and that failure's only message is "context deadline exceeded".
deadline_race() {
  local out=$1 before=$2 after=$3 t=$4
  [ "$before" = "$after" ] || return 1
  if grep -q -e 'Failing input written to' -e '^panic: ' -e '^fatal error: ' -e '\[build failed\]' "$out"; then
    return 1
  fi
  [ "$(grep -c -e '--- FAIL: ' "$out")" -eq 1 ] || return 1
  # The lines between "--- FAIL: TARGET (" and the package's closing "FAIL" line.
  local msg
  msg=$(awk -v head="--- FAIL: $t (" '
    index($0, head) == 1 { on = 1; next }
    on && ($0 == "FAIL" || /^exit status / || /^FAIL\t/) { exit }
    on { print }' "$out")
  [ "$(printf '%s' "$msg" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')" = "context deadline exceeded" ]
}

# fuzz_one PKG TARGET fuzzes one target, running it a second time only after a
# deadline_race failure.
fuzz_one() {
  local pkg=$1 t=$2 out before after attempt
  local dir="$pkg/testdata/fuzz/$t"
  out=$(mktemp)
  for attempt in 1 2; do
    before=$(corpus "$dir")
    echo "fuzz: $pkg $t ($FUZZTIME)"
    if go test -run '^$' -fuzz "^${t}\$" -fuzztime "$FUZZTIME" "$pkg" 2>&1 | tee "$out"; then
      rm -f "$out"
      return 0
    fi
    after=$(corpus "$dir")
    if [ "$attempt" = 1 ] && deadline_race "$out" "$before" "$after" "$t"; then
      echo "fuzz: $t: only Go's fuzzing coordinator deadline race, no failing input: running it once more"
      continue
    fi
    rm -f "$out"
    echo "fuzz: $pkg $t failed" >&2
    return 1
  done
}

n=0
while IFS= read -r f; do
  pkg="./$(dirname "$f")"
  for t in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$f" | awk '{print $2}'); do
    fuzz_one "$pkg" "$t"
    n=$((n+1))
  done
done < <(git ls-files '*_test.go' 2>/dev/null || find . -name '*_test.go')
echo "fuzz: $n targets run"
