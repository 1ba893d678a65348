#!/usr/bin/env bash
# Boot-time benchmark of the QEMU backend, measured in one run (needs root and QEMU;
# the first run fetches the kernel and builds the test image). The boots are interleaved
# (BenchmarkVMBootRatio) so all see the same machine load:
#
#   bare-ms       QEMU start -> QEMU exit for the same kernel and initramfs whose /init
#                 powers off at once (a tiny static ELF): the kernel's own boot to userspace
#   panic-ms      the same with rdinit=/nonexistent: the kernel panics before it frees its
#                 init memory and runs an init (the baseline used until 2026-12-01)
#   first-cmd-ms  QEMU start -> first SSH command done (brood-guest: modules, overlay
#                 root, 9p share, SSH handshake over virtio-serial, exec `true`)
#
# Min and median over N boots of each (default 5), the ratios (brood's goal: <= 1.3x against
# the bare boot), and the CPU time QEMU used (medians): wall-clock TCG timings swing by
# 2x when other work shares the host, the CPU-time ratio much less. It runs once with a
# session's default VM size (what `brood run` boots: 2 vCPUs, 1024 MiB) and, unless
# CPUS is set, once more with 1 vCPU and 512 MiB (the VM tests' size). The full go test
# output is kept in $LOG (default /tmp/brood-bench-vm.log).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="/usr/local/go/bin:$PATH"
N="${N:-5}"
LOG="${LOG:-/tmp/brood-bench-vm.log}"
: >"$LOG"
run() { # label [VAR=value...]
  local label=$1; shift
  local out
  out=$(env "$@" go test -count=1 -run '^$' -bench '^BenchmarkVMBootRatio$' -benchtime "${N}x" ./sandbox/vmtest 2>&1) || { echo "$out" >>"$LOG"; grep -v '^\[' "$LOG" | tail -40 >&2; echo "full output: $LOG" >&2; exit 1; }
  echo "$out" >>"$LOG"
  metric() { echo "$out" | awk -v m="$1" '{for (i = 2; i <= NF; i++) if ($i == m) print $(i-1)}'; }
  awk -v l="$label" -v b="$(metric bare-ms)" -v bm="$(metric bare-min-ms)" -v p="$(metric panic-ms)" -v pm="$(metric panic-min-ms)" \
    -v f="$(metric first-cmd-ms)" -v fm="$(metric first-cmd-min-ms)" \
    -v bc="$(metric bare-cpu-ms)" -v fc="$(metric first-cmd-cpu-ms)" -v n="$N" 'BEGIN {
    printf "%s, %d interleaved boots each\n", l, n
    printf "  bare boot (to userspace)      min %5d ms  median %5d ms\n", bm, b
    printf "  kernel panic (no init)        min %5d ms  median %5d ms\n", pm, p
    printf "  first SSH command             min %5d ms  median %5d ms\n", fm, f
    printf "  ratio to bare boot            min %.2fx    median %.2fx   (goal <= 1.3x)\n", fm / bm, f / b
    printf "  ratio to kernel panic         min %.2fx    median %.2fx\n", fm / pm, f / p
    printf "  QEMU CPU time                 bare %5d ms  first SSH command %5d ms  ratio %.2fx\n", bc, fc, fc / bc
  }'
}
if [ -n "${CPUS:-}" ]; then
  run "$CPUS vCPU(s), ${MEMORY:-1024} MiB" BROOD_VMTEST_CPUS="$CPUS" BROOD_VMTEST_MEMORY_MIB="${MEMORY:-1024}"
else
  run "session default (2 vCPUs, 1024 MiB)"
  run "1 vCPU, 512 MiB" BROOD_VMTEST_CPUS=1 BROOD_VMTEST_MEMORY_MIB=512
fi
