#!/usr/bin/env bash
# Measures the git-aware review (docs/git-review.md): reviewing and applying the agent's
# commits (gitreview.Inspect + Apply: every new object verified, every tree checked, a
# diffstat per commit, objects written, branch created) against `git fetch` of the same
# commits from the snapshot's repository, on a repository of BROOD_BENCH_FILES files
# (default 10000) with BROOD_BENCH_COMMITS agent commits (default 500). git runs only in
# this benchmark (fixture and the fetch it is compared with), never in brood.
#
#   scripts/bench-gitreview.sh            # 3 runs each
#   BENCHTIME=5x scripts/bench-gitreview.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
out=$(go test -count=1 -run '^$' -bench '^(BenchmarkReviewApply|BenchmarkGitFetch)$' -benchtime "${BENCHTIME:-3x}" ./frontend/gitreview/)
echo "$out"
echo "$out" | awk '
	/^BenchmarkReviewApply/ { r = $3 }
	/^BenchmarkGitFetch/    { g = $3 }
	END {
		if (r == "" || g == "") { print "missing results"; exit 1 }
		printf "review+apply %.1f ms, git fetch %.1f ms: ratio %.2f\n", r / 1e6, g / 1e6, r / g
	}'
