#!/usr/bin/env bash
# Measures, in one `go test -bench` run:
#  - `brood apply` of 1,000 modified files (flush.Apply) against `cp -a` + `sync` of the
#    same files (target: ratio <= 3);
#  - `brood apply` of one modified 1 GiB sparse file with 4 MiB of data against
#    `cp --sparse=always` of it (target: ratio <= 2), and against cp + `sync FILE`.
# Prints the ratios; the exit status is 1 when a target is missed.
# BENCHTIME (default 5x) sets the iterations of each side.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
out=$(go test -run '^$' -bench '^BenchmarkApply(Sparse)?$' -benchtime "${BENCHTIME:-5x}" ./frontend/flush/)
echo "$out" | grep -E '^Benchmark'
ns() { echo "$out" | awk -v b="$1" '$1 ~ "^"b"(-[0-9]+)?$" {print $3}'; }
awk -v f="$(ns BenchmarkApply/flush)" -v c="$(ns BenchmarkApply/cp-sync)" \
  -v sf="$(ns BenchmarkApplySparse/flush)" -v sc="$(ns BenchmarkApplySparse/cp-sparse)" \
  -v ss="$(ns BenchmarkApplySparse/cp-sparse-sync)" 'BEGIN {
  r = f / c; rs = sf / sc
  printf "apply 1000 files: %.0f ms; cp + sync: %.0f ms; ratio %.2f (target <= 3)\n", f/1e6, c/1e6, r
  printf "apply 1 GiB sparse file (4 MiB data): %.0f ms; cp --sparse=always: %.1f ms; ratio %.1f (target <= 2); with sync FILE: %.1f ms, ratio %.1f\n", sf/1e6, sc/1e6, rs, ss/1e6, sf/ss
  exit (r <= 3 && rs <= 2 ? 0 : 1)
}'
