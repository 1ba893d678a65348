#!/usr/bin/env bash
# Installs brood on a fresh Debian/Ubuntu machine the way IT does: build the .deb from this
# checkout and install it with apt. Then, as the administrator would:
#   1. Debian packages and Go modules the build needs (scripts/deps.sh)
#   2. dist/brood_<version>_<arch>.deb (scripts/package.sh), installed with apt: brood in
#      /usr/bin, broodd-helper in /usr/sbin, brood-guest in /usr/libexec/brood, the units,
#      /etc/brood/{helper,policy}.toml; its postinst creates group brood and /var/lib/brood
#      and, when systemd is PID 1, enables and starts broodd-helper.socket
#   3. the developer joins group brood: $BROOD_USER, else the user who ran sudo ($SUDO_USER)
#   4. the guest kernel, initramfs and images: `broodd-helper image build NAME` for `test`
#      (what `brood run shell` boots) and any named in BROOD_IMAGES (e.g. "test codex");
#      downloads Debian packages through apt and mmdebstrap
#   5. without systemd: the documented fallback, broodd-helper --listen in the background
#      (log: /var/log/brood/helper.log)
# Idempotent. Run as root:   sudo ./scripts/install.sh   (as root itself: BROOD_USER=NAME ./scripts/install.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
if [ "$(id -u)" != 0 ]; then
  echo "install: run as root: sudo $0" >&2
  exit 1
fi
SOCKET=/run/brood/helper.sock
IMAGES="${BROOD_IMAGES:-test}"
step() { printf '\ninstall: %s\n' "$*"; }

step "1/5 packages and Go modules"
./scripts/deps.sh

step "2/5 build and install the package"
arch="$(dpkg --print-architecture)"
deb="$(ARCHES="$arch" FORMATS=deb ./scripts/package.sh | tail -n1)"
# apt resolves the dependencies (QEMU, nftables, erofs-utils, ...) and keeps edited
# /etc/brood files on an upgrade.
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall "./$deb"

step "3/5 group brood"
DEV_USER="${BROOD_USER:-${SUDO_USER:-}}"
if [ -n "$DEV_USER" ] && [ "$DEV_USER" != root ]; then
  id "$DEV_USER" >/dev/null 2>&1 || { echo "install: BROOD_USER=$DEV_USER: no such user" >&2; exit 1; }
  usermod -aG brood "$DEV_USER"
  echo "install: $DEV_USER is in group brood (new logins; until then: sg brood -c 'brood ...')"
else
  echo "install: nobody added to group brood (run it with sudo, or as root with BROOD_USER=NAME;"
  echo "  later: usermod -aG brood NAME). brood refuses to run VMs for root."
fi

step "4/5 guest kernel, initramfs and images ($IMAGES)"
for img in $IMAGES; do
  broodd-helper image build "$img" >/dev/null
done

step "5/5 helper"
if [ -d /run/systemd/system ]; then
  echo "install: systemd socket activation (broodd-helper.socket, enabled by the package)"
else
  # No systemd: one helper in the background, never idle-exiting (nothing would restart it).
  pidfile=/run/broodd-helper.pid
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null &&
     [ "$(readlink "/proc/$(cat "$pidfile")/exe")" = /usr/sbin/broodd-helper ]; then
    kill "$(cat "$pidfile")"   # the helper we started last time (an old binary)
    for _ in $(seq 50); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.1; done
  fi
  install -d -m 0755 /var/log/brood
  rm -f "$SOCKET"
  nohup broodd-helper --listen "$SOCKET" --idle-timeout 0 >>/var/log/brood/helper.log 2>&1 </dev/null &
  echo $! >"$pidfile"
  for _ in $(seq 100); do [ -S "$SOCKET" ] && break; sleep 0.1; done
  [ -S "$SOCKET" ] || { echo "install: the helper did not start; see /var/log/brood/helper.log" >&2; exit 1; }
  echo "install: broodd-helper running (pid $(cat "$pidfile")), socket $SOCKET"
fi
BROOD_HELPER_SOCKET="$SOCKET" brood doctor
BROOD_HELPER_SOCKET="$SOCKET" brood image list
echo
echo "install: done. In a repository: sg brood -c 'brood run shell'  (after your next login: brood run shell)"
