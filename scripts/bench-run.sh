#!/usr/bin/env bash
# Prints how `brood run-image test -- true` compares with a bare boot of the same guest kernel
# and initramfs (QEMU start -> a minimal /init's first console line, i.e. userspace reached)
# and with a direct SSH session without brood (sandbox/vmtest BenchmarkVMSession), all
# measured in this one run, RUNS boots each (default 3), every VM of a session's default size
# (2 vCPUs, 1024 MiB). brood's goal (first command <= 1.3x the bare boot) is measured by
# sandbox/vmtest/bench.sh; this script adds what brood itself costs around the VM (snapshot,
# helper, SSH attach, stop, diff). Run as root on an otherwise idle machine (TCG timings
# scale with CPU contention).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
runs="${RUNS:-3}"
base=$(BROOD_VMTEST_CPUS=2 BROOD_VMTEST_MEMORY_MIB=1024 go test -count=1 -run '^$' -bench 'VMBareBoot|VMSession' -benchtime "${runs}x" ./sandbox/vmtest 2>&1) || { echo "$base" >&2; exit 1; }
brood=$(go test -count=1 -run '^$' -bench 'RunImage' -benchtime "${runs}x" ./frontend/cli 2>&1) || { echo "$brood" >&2; exit 1; }
metric() { echo "$1" | grep -oE "[0-9.]+ $2" | head -1 | cut -d' ' -f1; }
bare=$(metric "$base" bare-ms)
first=$(metric "$base" first-cmd-ms)
vmsess=$(metric "$base" vm-ms)
boot=$(metric "$brood" boot-ms)
vm=$(metric "$brood" vm-ms)
whole=$(metric "$brood" whole-ms)
printf 'bare boot (QEMU start -> userspace):             %8.0f ms\n' "$bare"
printf 'direct SSH session: first command / VM life:     %8.0f / %.0f ms\n' "$first" "$vmsess"
printf 'brood run-image: boot to prompt / VM life:       %8.0f / %.0f ms\n' "$boot" "$vm"
printf 'brood run-image: whole command (snapshot..diff): %8.0f ms\n' "$whole"
awk -v b="$bare" -v v="$vm" -v w="$whole" -v s="$vmsess" 'BEGIN {
  printf "ratio brood VM life / bare boot:     %.2fx\n", v / b
  printf "ratio brood whole / bare boot:       %.2fx\n", w / b
  printf "ratio brood VM life / direct session: %.2fx\n", v / s }'
