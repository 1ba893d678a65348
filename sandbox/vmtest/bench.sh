#!/usr/bin/env bash
# Boot-time benchmark of the QEMU backend, measured in one run (needs root and QEMU;
# the first run fetches the kernel and builds the test image).
#
#   bare-ms       QEMU start -> QEMU exit for the same kernel and initramfs with no init
#                 (rdinit=/nonexistent: the kernel boots, panics at once, QEMU exits)
#   first-cmd-ms  QEMU start -> first SSH command done (brood-guest: modules, overlay
#                 root, 9p, SSH handshake over virtio-serial, exec `true`)
#   vm-ms         QEMU start -> QEMU exit after that session ended (sync, power off)
#
# Medians over N boots (default 3) and the ratios to the bare boot.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="/usr/local/go/bin:$PATH"
N="${N:-3}"
out=$(go test -count=1 -run '^$' -bench '^BenchmarkVM(BareBoot|Session)$' -benchtime "${N}x" ./sandbox/vmtest)
echo "$out" | grep -E '^Benchmark'
metric() { echo "$out" | awk -v m="$1" '{for (i = 2; i <= NF; i++) if ($i == m) print $(i-1)}'; }
bare=$(metric bare-ms); first=$(metric first-cmd-ms); vm=$(metric vm-ms)
awk -v b="$bare" -v f="$first" -v v="$vm" 'BEGIN {
  printf "bare boot %d ms | first SSH command %d ms (%.2fx bare) | whole VM %d ms (%.2fx bare)\n", b, f, f / b, v, v / b
}'
