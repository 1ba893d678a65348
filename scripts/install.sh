#!/usr/bin/env bash
# Installs everything `brood run` needs on a fresh Debian/Ubuntu machine, from this checkout:
#   1. Debian packages and Go modules (scripts/deps.sh: QEMU, mmdebstrap, erofs-utils, kmod, ...)
#   2. brood and broodd-helper in /usr/local/bin, the static brood-guest in /usr/libexec/brood
#   3. the group `brood` (who may use the helper); the developer joins it: $BROOD_USER, else
#      the user who ran sudo ($SUDO_USER)
#   4. the guest kernel (Debian's, apt-get download + dpkg-deb -x, never installed on the host),
#      the initramfs with brood-guest, and the rootfs images: `test` (busybox, git, sh: what
#      `brood run shell` boots) plus any named in BROOD_IMAGES (e.g. BROOD_IMAGES="test codex")
#   5. the helper: systemd socket activation when systemd is PID 1, otherwise started in the
#      background with --listen /run/brood/helper.sock (log: /var/log/brood/helper.log)
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

step "2/5 binaries"
mkdir -p bin
go build -trimpath -o bin/brood ./cmd/brood
go build -trimpath -o bin/broodd-helper ./cmd/broodd-helper
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/brood-guest ./cmd/brood-guest
install -m 0755 bin/brood bin/broodd-helper /usr/local/bin/
install -d -m 0755 /usr/libexec/brood
install -m 0755 bin/brood-guest /usr/libexec/brood/brood-guest

step "3/5 group brood"
getent group brood >/dev/null || groupadd --system brood
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
# The privileged binary builds into the helper's artifact store (its state_dir); brood
# itself never runs as root.
for img in $IMAGES; do
  /usr/local/bin/broodd-helper image build "$img" >/dev/null
done

step "5/5 helper"
if [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ]; then
  install -m 0644 systemd/broodd-helper.socket systemd/broodd-helper.service /etc/systemd/system/
  systemctl daemon-reload
  systemctl enable broodd-helper.socket
  # A running helper keeps the old binary: restart it (socket activation starts the new one).
  systemctl stop broodd-helper.service 2>/dev/null || true
  systemctl restart broodd-helper.socket
else
  # No systemd: one helper in the background, never idle-exiting (nothing would restart it).
  pidfile=/run/broodd-helper.pid
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null &&
     [ "$(readlink "/proc/$(cat "$pidfile")/exe")" = /usr/local/bin/broodd-helper ]; then
    kill "$(cat "$pidfile")"   # the helper we started last time (an old binary)
    for _ in $(seq 50); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.1; done
  fi
  install -d -m 0755 /var/log/brood
  rm -f "$SOCKET"
  nohup /usr/local/bin/broodd-helper --listen "$SOCKET" --idle-timeout 0 >>/var/log/brood/helper.log 2>&1 </dev/null &
  echo $! >"$pidfile"
  for _ in $(seq 100); do [ -S "$SOCKET" ] && break; sleep 0.1; done
  [ -S "$SOCKET" ] || { echo "install: the helper did not start; see /var/log/brood/helper.log" >&2; exit 1; }
  echo "install: broodd-helper running (pid $(cat "$pidfile")), socket $SOCKET"
fi
BROOD_HELPER_SOCKET="$SOCKET" /usr/local/bin/brood doctor
BROOD_HELPER_SOCKET="$SOCKET" /usr/local/bin/brood image list
echo
echo "install: done. In a repository: sg brood -c 'brood run shell'  (after your next login: brood run shell)"
