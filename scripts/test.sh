#!/usr/bin/env bash
# The test command (README.md): installs what the tests need, then runs every tier.
# Run as root for the real-kernel and VM tiers; with CI=true a missing capability fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
./scripts/deps.sh
go vet ./...
go test -count=1 -timeout 60m ./...
FUZZTIME="${FUZZTIME:-5s}" ./fuzz/run.sh
