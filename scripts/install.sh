#!/usr/bin/env bash
# Installs brood from this checkout on a fresh Debian/Ubuntu machine: Debian packages and Go
# modules (scripts/deps.sh), then builds and installs the binaries into /usr/local/bin.
# Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
./scripts/deps.sh
mkdir -p bin
for c in brood broodd-helper; do
  [ -d "cmd/$c" ] && [ -n "$(ls cmd/$c/*.go 2>/dev/null)" ] || continue
  go build -trimpath -o "bin/$c" "./cmd/$c"
  install -m 0755 "bin/$c" "/usr/local/bin/$c"
done
if [ -n "$(ls cmd/brood-guest/*.go 2>/dev/null)" ]; then
  CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/brood-guest ./cmd/brood-guest
fi
echo "install: brood installed in /usr/local/bin"
