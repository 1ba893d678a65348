#!/usr/bin/env bash
# Per built-in agent, measured in this one run (frontend/cli BenchmarkAgents; root, QEMU,
# mmdebstrap and the npm and Debian registries; about 25 minutes on a 2-core TCG host):
#
#   build       the agent's image built from scratch into a scratch store (the real store
#               is not touched; BROOD_BENCH_NO_BUILD=1 skips it and prints -)
#   size        the image in the store (MB)
#   bare        `brood run-image IMAGE -- echo booted` to its first output: brood, the
#               helper and a boot of the same image, nothing of the agent
#   first out   `brood run AGENT -- PROMPT` (the agent's non-interactive mode) to the
#               agent's first output, against the fake provider of the end-to-end tests
#   answer      the same run to the provider's answer on the screen
#
# and the ratios of first output and answer to the bare boot. The full go test output is
# kept in $LOG (default /tmp/brood-bench-agents.log).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
LOG="${LOG:-/tmp/brood-bench-agents.log}"
if ! BROOD_TEST_AGENT_IMAGES=all go test -count=1 -timeout 3h -run '^$' -bench '^BenchmarkAgents$' -benchtime 1x ./frontend/cli >"$LOG" 2>&1; then
  grep -v '^ *time=' "$LOG" | tail -40 >&2
  echo "full output: $LOG" >&2
  exit 1
fi
grep '^BenchmarkAgents/' "$LOG" | awk '
  function metric(name,   i) { for (i = 2; i <= NF; i++) if ($i == name) return $(i-1); return "" }
  BEGIN { printf "%-12s %9s %9s %9s %11s %9s %12s %12s\n", "agent", "build", "size", "bare", "first out", "answer", "first/bare", "answer/bare" }
  {
    split($1, p, "/"); sub(/-[0-9]+$/, "", p[2])
    b = metric("build-s"); s = metric("image-MB"); bare = metric("bare-ms"); f = metric("first-out-ms"); a = metric("answer-ms")
    printf "%-12s %9s %7.0fMB %8.1fs %10.1fs %8.1fs %11.2fx %11.2fx\n", p[2], (b == "" ? "-" : sprintf("%.0fs", b)), s, bare / 1000, f / 1000, a / 1000, f / bare, a / bare
  }'
