#!/usr/bin/env bash
# The test command (README.md): installs what the tests need, then runs every tier.
# Run as root for the real-kernel and VM tiers; with CI=true a missing capability fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
./scripts/deps.sh
go vet ./...
# The agents' images (frontend/cli's end-to-end agent tests boot them): built here, outside
# the per-package test timeout, into the default store; an image whose recipe is unchanged
# is not rebuilt. hermes is left out: its recipe needs PyPI, unreachable here.
if [ "$(id -u)" = 0 ]; then
  for a in codex claude-code opencode gemini; do
    go run ./cmd/broodd-helper image build "$a"
  done
fi
# -p 1: packages run one at a time, so the real-VM tests of frontend, helper and sandbox
# never compete for the 2 cores (TCG boots are CPU-bound; their timeouts assume that).
go test -p 1 -count=1 -timeout 60m ./...
./fuzz/run.sh
