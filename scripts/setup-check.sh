#!/usr/bin/env bash
# The README's set-up command, run by CI on its fresh machine after the tests: install the
# package with scripts/install.sh for a developer whose uid is not 1000, then, as that
# developer in a new git repository, `brood doctor` and one real VM session whose change
# `brood diff` lists, then `brood session rm`. Without systemd as PID 1 the helper the
# install started (--listen) is stopped again at the end; under systemd the socket stays.
# Run as root. Exit status: 0 when every step worked.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=brood-setup-check
uid=123457
id -u "$dev" >/dev/null 2>&1 || useradd --create-home --uid "$uid" --shell /bin/bash "$dev"
BROOD_USER="$dev" ./scripts/install.sh

as_dev() { su - "$dev" -c "$1"; }
repo=$(as_dev 'mktemp -d')
as_dev "cd $repo && git init -q && echo before >a.txt && git add a.txt && git -c user.email=ci@brood.invalid -c user.name=ci commit -qm init"
as_dev "/usr/bin/brood doctor"
out=$(as_dev "cd $repo && /usr/bin/brood run-image test -- sh -c 'echo after >a.txt' 2>&1") || { echo "$out"; exit 1; }
echo "$out"
id=$(printf '%s\n' "$out" | grep -o 'session [0-9a-f]\{12\}' | head -n1 | cut -d' ' -f2)
[ -n "$id" ] || { echo "setup-check: no session id in the run's output" >&2; exit 1; }
diff_out=$(as_dev "cd $repo && /usr/bin/brood diff $id")
echo "$diff_out"
grep -q 'a.txt' <<<"$diff_out" || { echo "setup-check: brood diff $id does not list a.txt" >&2; exit 1; }
as_dev "cd $repo && /usr/bin/brood session rm $id"
if [ "$(ps -o comm= -p 1)" != systemd ] && [ -s /run/broodd-helper.pid ]; then
  kill "$(cat /run/broodd-helper.pid)" 2>/dev/null || true
fi
echo "setup-check: ok (user $dev, uid $uid, session $id)"
