#!/usr/bin/env bash
# Builds brood's OS packages into dist/: a .deb and an .rpm for amd64 and arm64, with the
# version from `git describe` (packaging/, github.com/goreleaser/nfpm/v2 as a library).
#   ./scripts/package.sh                  all four
#   ARCHES=amd64 FORMATS=deb ./scripts/package.sh
# Prints the paths of the packages it wrote. Needs only Go (and git).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
rm -f dist/brood[_-]*.deb dist/brood[_-]*.rpm
go run ./packaging -out dist -arch "${ARCHES:-amd64,arm64}" -format "${FORMATS:-deb,rpm}"
