#!/usr/bin/env bash
# Measures the DNS proxy against brood's targets in ONE `go test -bench` run and prints
# the numbers and ratios: added latency (proxy minus asking the fake upstream directly, UDP
# on loopback, including the pin) ≤ 0.5 ms median and ≤ 2 ms p99; 1,000 queries/s sustained
# without loss. As root the pin is a real nft set insert in a throw-away netns; otherwise a
# recording fake (the script says which). N queries per benchmark (default 5000; the
# sustained run takes N ms).
set -euo pipefail
cd "$(dirname "$0")"
export PATH="/usr/local/go/bin:$PATH"
N="${N:-5000}"
out=$(go test -run '^$' -bench 'AddedLatency|Sustained' -benchtime "${N}x" -count 1 . 2>&1) || { echo "$out"; exit 1; }
echo "$out" | grep -m1 -o 'pinner: .*' || true
echo "$out" | awk -v n="$N" '
function metric(line, name,   i, f) { f = split(line, a, /[ \t]+/); for (i = 2; i <= f; i++) if (a[i] == name) return a[i-1]; return "" }
/^BenchmarkAddedLatency.*added-p50/ {
  d50 = metric($0, "direct-p50-µs"); d99 = metric($0, "direct-p99-µs")
  p50 = metric($0, "proxy-p50-µs");  p99 = metric($0, "proxy-p99-µs")
  a50 = metric($0, "added-p50-µs");  a99 = metric($0, "added-p99-µs")
  printf "latency over %d queries each (UDP, loopback):\n", n
  printf "  direct to fake upstream: p50 %7.1f µs   p99 %7.1f µs\n", d50, d99
  printf "  through the proxy:       p50 %7.1f µs   p99 %7.1f µs   (ratio p50 %.2fx, p99 %.2fx)\n", p50, p99, p50/d50, p99/d99
  printf "  added by the proxy:      p50 %7.1f µs   p99 %7.1f µs\n", a50, a99
  printf "  target added p50 <= 500 µs: %s   (%.2f of target)\n", (a50 <= 500 ? "MET" : "MISSED"), a50/500
  printf "  target added p99 <= 2000 µs: %s  (%.2f of target)\n", (a99 <= 2000 ? "MET" : "MISSED"), a99/2000
}
/^BenchmarkSustained.*queries/ {
  q = metric($0, "queries/s"); l = metric($0, "lost")
  printf "sustained: %d queries paced at 1000/s: achieved %.1f queries/s, lost %d (%.3f%%): %s\n", n, q, l, 100*l/n, ((l == 0 && q >= 990) ? "MET" : "MISSED")
}'
