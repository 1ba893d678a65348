#!/usr/bin/env bash
# Runs every native Go fuzz target (func FuzzXxx in *_test.go). By default each runs for
# an execution count (execs below): a count sets no deadline, so Go's coordinator race
# (below) cannot happen, and a loaded machine only makes the stage slower, never red.
# FUZZTIME overrides it for every target: a duration (FUZZTIME=10m for a long run) or a
# count (FUZZTIME=200000x). Corpora that find failures are written by go test under the
# package's testdata/fuzz/.
#
# Go's fuzzing coordinator (before Go 1.27) can fail a timed run with a bare "context
# deadline exceeded" when the -fuzztime deadline fires: its check that the deadline is a
# normal stop races the cancellation of its workers' context. No input is involved. Under
# a timed FUZZTIME a target is therefore run once more, and only once, when its failed run shows nothing but
# that (see deadline_race); any other failure, or the same failure twice, fails the run.
# fuzz/run_test.go tests these decisions against a fake go.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME="${FUZZTIME:-}"

# defaultExecs is the execution count of a target without FUZZTIME: about 2-5 s each on
# an idle 2-core machine at the 2,000-20,000 execs/s most targets reach.
defaultExecs=10000x

# execs TARGET prints the -fuzztime value of TARGET: FUZZTIME when set, else the count of
# its row here, else defaultExecs. Rows exist only for targets whose single execution is
# far slower than the rest.
execs() {
  if [ -n "$FUZZTIME" ]; then echo "$FUZZTIME"; return; fi
  case $1 in
    # FuzzApplyPath plans and executes a real flush into a temp dir per input (fsync,
    # renameat2): ~200 execs/s, so 10,000 would take ~50 s.
    FuzzApplyPath) echo 1000x ;;
    # FuzzTreeApply unpacks every input twice into a fresh tree (mkdir, openat2, walks of
    # the tree and of its sentinel): ~900 execs/s on a loaded 2-core machine.
    FuzzTreeApply) echo 2000x ;;
    *) echo "$defaultExecs" ;;
  esac
}

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
  local dir="$pkg/testdata/fuzz/$t" ft
  ft=$(execs "$t")
  out=$(mktemp)
  for attempt in 1 2; do
    before=$(corpus "$dir")
    echo "fuzz: $pkg $t ($ft)"
    if go test -run '^$' -fuzz "^${t}\$" -fuzztime "$ft" "$pkg" 2>&1 | tee "$out"; then
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
