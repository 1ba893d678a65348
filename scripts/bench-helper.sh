#!/usr/bin/env bash
# Prints broodd-helper's resident memory idle and under load (32 clients doing
# hello/create/destroy for 10 s against a real, Landlock-confined helper process), from one
# run of helper.TestLoad. Targets: < 20 MiB idle, < 40 MiB under load. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
out=$(go test -count=1 -run '^TestLoad$' -v ./helper/ 2>&1) || { echo "$out" >&2; exit 1; }
echo "$out" | grep -E 'helper RSS|load:' | sed -E 's/^ *load_test.go:[0-9]+: //'
