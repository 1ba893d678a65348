#!/usr/bin/env bash
# Prints how `brood run-image test -- true` compares with a bare boot of the same guest kernel
# and initramfs (QEMU start -> kernel panic on a missing init -> QEMU exit) and with a
# direct SSH session without brood (sandbox/vmtest BenchmarkVMSession), all measured in this
# one run, RUNS boots each (default 3). Goal (issue 4): whole VM life under brood <= 1.3x the
# bare boot. Run as root on an otherwise idle machine (TCG timings scale with CPU contention).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
runs="${RUNS:-3}"
base=$(go test -count=1 -run '^$' -bench 'VMBareBoot|VMSession' -benchtime "${runs}x" ./sandbox/vmtest 2>&1) || { echo "$base" >&2; exit 1; }
brood=$(go test -count=1 -run '^$' -bench 'RunImage' -benchtime "${runs}x" ./frontend 2>&1) || { echo "$brood" >&2; exit 1; }
metric() { echo "$1" | grep -oE "[0-9.]+ $2" | head -1 | cut -d' ' -f1; }
bare=$(metric "$base" bare-ms)
first=$(metric "$base" first-cmd-ms)
vmsess=$(metric "$base" vm-ms)
boot=$(metric "$brood" boot-ms)
vm=$(metric "$brood" vm-ms)
whole=$(metric "$brood" whole-ms)
printf 'bare boot (QEMU start -> exit, panic at init):   %8.0f ms\n' "$bare"
printf 'direct SSH session: first command / VM life:     %8.0f / %.0f ms\n' "$first" "$vmsess"
printf 'brood run-image: boot to prompt / VM life:       %8.0f / %.0f ms\n' "$boot" "$vm"
printf 'brood run-image: whole command (snapshot..diff): %8.0f ms\n' "$whole"
awk -v b="$bare" -v v="$vm" -v w="$whole" -v s="$vmsess" 'BEGIN {
  printf "ratio brood VM life / bare boot:     %.2fx (goal <= 1.3x)\n", v / b
  printf "ratio brood whole / bare boot:       %.2fx\n", w / b
  printf "ratio brood VM life / direct session: %.2fx\n", v / s }'
