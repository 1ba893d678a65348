#!/usr/bin/env bash
# Measures `brood diff` on a 50,000-file workspace whose snapshot holds 10 agent changes
# against a bare stat walk of both trees, `find W S -printf '%s %T@ %C@\n' > /dev/null`,
# all in this one run (warm page cache, interleaved runs, medians), and prints the ratios.
# Target: brood diff / find <= 2. Then runs BenchmarkDiff50k (package frontend/diff) for
# the breakdown (walk, manifest decode, compute) and prints those ratios to find too.
#
#   FILES=50000 CHANGED=10 RUNS=7 BENCHTIME=5x ./scripts/bench-diff.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
FILES="${FILES:-50000}" CHANGED="${CHANGED:-10}" RUNS="${RUNS:-7}" BENCHTIME="${BENCHTIME:-5x}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/brood" ./cmd/brood
go build -o "$tmp/mkbench" ./frontend/diff/difftest/mkbench
export BROOD_STATE_DIR="$tmp/state"
read -r id w s < <("$tmp/mkbench" -dir "$tmp" -files "$FILES" -changed "$CHANGED")
echo "fixture: $FILES files in W, $CHANGED changes in S, session $id, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"

# Warm the page cache and the dentry/inode caches for both commands.
find "$w" "$s" -printf '%s %T@ %C@\n' >/dev/null
"$tmp/brood" diff "$id" >/dev/null

now() { date +%s%N; }
: >"$tmp/find.ns"; : >"$tmp/diff.ns"; : >"$tmp/json.ns"
for _ in $(seq "$RUNS"); do
  t0=$(now); find "$w" "$s" -printf '%s %T@ %C@\n' >/dev/null
  t1=$(now); "$tmp/brood" diff "$id" >/dev/null
  t2=$(now); "$tmp/brood" diff --json "$id" >/dev/null
  t3=$(now)
  echo $((t1 - t0)) >>"$tmp/find.ns"; echo $((t2 - t1)) >>"$tmp/diff.ns"; echo $((t3 - t2)) >>"$tmp/json.ns"
done
median() { sort -n "$1" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
f=$(median "$tmp/find.ns"); d=$(median "$tmp/diff.ns"); j=$(median "$tmp/json.ns")
awk -v f="$f" -v d="$d" -v j="$j" -v n="$RUNS" 'BEGIN {
  printf "end to end (median of %d):\n", n
  printf "  find W S -printf        %8.1f ms\n", f/1e6
  printf "  brood diff ID           %8.1f ms   ratio %.2f (target <= 2)\n", d/1e6, d/f
  printf "  brood diff --json ID    %8.1f ms   ratio %.2f\n", j/1e6, j/f
}'
n=$("$tmp/brood" diff "$id" | wc -l)
[ "$n" -eq "$CHANGED" ] || { echo "bench-diff: brood diff listed $n changes, want $CHANGED" >&2; exit 1; }

echo "breakdown (go test -bench BenchmarkDiff50k -benchtime $BENCHTIME):"
go test -run '^$' -bench 'BenchmarkDiff50k' -benchtime "$BENCHTIME" ./frontend/diff/ |
  awk '/^BenchmarkDiff50k\// {
         name=$1; sub(/^BenchmarkDiff50k\//, "", name); sub(/-[0-9]+$/, "", name)
         ns[name]=$3; order[++k]=name }
       END { for (i=1; i<=k; i++) { x=order[i]
               printf "  %-15s %8.1f ms", x, ns[x]/1e6
               if (ns["find"] > 0) printf "   ratio to find %.2f", ns[x]/ns["find"]
               printf "\n" } }'
