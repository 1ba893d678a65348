#!/usr/bin/env bash
# Rewrites the generated package list in docs/ARCHITECTURE.md (between the "packages"
# markers) from the tree: one line per package with the binaries that link it, its doc
# comment's first and "Privilege:" paragraphs, and the module packages it imports. Run it
# after adding, removing or re-importing a package or editing a package doc comment;
# internal/archdoc's TestArchitecturePackageList fails until the list matches again.
# With --check it only compares (what CI does through go test).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--check" ]]; then
	exec go test -count=1 -run '^TestArchitecturePackageList$' ./internal/archdoc
fi
go test -count=1 -run '^TestArchitecturePackageList$' ./internal/archdoc -args -update
git --no-pager diff --stat -- docs/ARCHITECTURE.md 2>/dev/null || true
