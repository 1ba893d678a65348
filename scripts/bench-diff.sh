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

# One measurement: wall, user+sys CPU seconds of a command (bash's time keyword).
measure() { local TIMEFORMAT='%R %U %S'; { time "$@" >/dev/null; } 2>&1 | awk '{print $1, $2 + $3}'; }
: >"$tmp/find.t"; : >"$tmp/diff.t"; : >"$tmp/json.t"
for _ in $(seq "$RUNS"); do
  measure find "$w" "$s" -printf '%s %T@ %C@\n' >>"$tmp/find.t"
  measure "$tmp/brood" diff "$id" >>"$tmp/diff.t"
  measure "$tmp/brood" diff --json "$id" >>"$tmp/json.t"
done
# median FILE COLUMN
median() { awk -v c="$2" '{print $c}' "$1" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
fw=$(median "$tmp/find.t" 1) fc=$(median "$tmp/find.t" 2)
dw=$(median "$tmp/diff.t" 1) dc=$(median "$tmp/diff.t" 2)
jw=$(median "$tmp/json.t" 1) jc=$(median "$tmp/json.t" 2)
awk -v fw="$fw" -v fc="$fc" -v dw="$dw" -v dc="$dc" -v jw="$jw" -v jc="$jc" -v n="$RUNS" 'BEGIN {
  printf "end to end (median of %d runs; wall time, and CPU time = user + sys):\n", n
  printf "  find W S -printf        wall %7.1f ms   cpu %7.1f ms\n", fw*1000, fc*1000
  printf "  brood diff ID           wall %7.1f ms   cpu %7.1f ms   ratio wall %.2f (target <= 2), cpu %.2f\n", dw*1000, dc*1000, dw/fw, dc/fc
  printf "  brood diff --json ID    wall %7.1f ms   cpu %7.1f ms   ratio wall %.2f, cpu %.2f\n", jw*1000, jc*1000, jw/fw, jc/fc
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
