#!/usr/bin/env bash
# Measures `brood apply` of 1,000 modified files (flush.Apply) against `cp -a` + `sync` of
# the same files, in one `go test -bench` run, and prints the ratio (target: <= 3).
# BENCHTIME (default 5x) sets the iterations of each side.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
out=$(go test -run '^$' -bench '^BenchmarkApply$' -benchtime "${BENCHTIME:-5x}" ./frontend/flush/)
echo "$out" | grep -E '^Benchmark'
flush=$(echo "$out" | awk '/^BenchmarkApply\/flush/ {print $3}')
cpsync=$(echo "$out" | awk '/^BenchmarkApply\/cp-sync/ {print $3}')
awk -v f="$flush" -v c="$cpsync" 'BEGIN {
  r = f / c
  printf "apply 1000 files: %.0f ms; cp + sync: %.0f ms; ratio %.2f (target <= 3)\n", f/1e6, c/1e6, r
  exit (r <= 3 ? 0 : 1)
}'
