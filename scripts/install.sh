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
#      (log: /var/log/brood/helper.log); on a re-run every broodd-helper serving the socket
#      is stopped first (the pidfile's, any `broodd-helper --listen SOCKET`, and whatever
#      process holds a listening socket bound to SOCKET, even an unlinked one)
# It runs the packaged binaries by absolute path (/usr/bin/brood, /usr/sbin/broodd-helper)
# and warns about other copies that come first in PATH (e.g. /usr/local/bin from a source
# install), which would shadow them for the developer.
# Idempotent. Run as root:   sudo ./scripts/install.sh   (as root itself: BROOD_USER=NAME ./scripts/install.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
USER_PATH="$PATH"   # the caller's PATH (sudo: secure_path), checked for shadowing copies
export PATH="/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
if [ "$(id -u)" != 0 ]; then
  echo "install: run as root: sudo $0" >&2
  exit 1
fi
SOCKET=/run/brood/helper.sock
BROOD=/usr/bin/brood
HELPER=/usr/sbin/broodd-helper
IMAGES="${BROOD_IMAGES:-test}"
step() { printf '\ninstall: %s\n' "$*"; }
WARNINGS=()
warn() { WARNINGS+=("$*"); printf 'install: WARNING: %s\n' "$*" >&2; }

# shadow_check NAME PACKAGED: warns about every executable NAME in a PATH directory
# (the caller's PATH, this script's, and the usual login PATH) that comes before the
# packaged file, so that `command -v NAME` finds it instead.
shadow_check() {
  local name="$1" packaged="$2" want path dir f owner seen=" "
  want="$(readlink -f "$packaged")"
  for path in "$USER_PATH" "$PATH" /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin; do
    local IFS=:
    for dir in $path; do
      f="$dir/$name"
      [ -x "$f" ] && [ ! -d "$f" ] || continue
      [ "$(readlink -f "$f")" = "$want" ] && break   # the packaged file: later copies are harmless
      case "$seen" in *" $f "*) continue ;; esac
      seen="$seen$f "
      if owner="$(dpkg -S "$f" 2>/dev/null)"; then
        warn "$f shadows the packaged $packaged (it comes first in PATH); it belongs to package ${owner%%:*}: apt-get remove ${owner%%:*}"
      else
        warn "$f shadows the packaged $packaged (it comes first in PATH; a copy from an earlier source install?); remove it: sudo rm $f"
      fi
    done
  done
}

# is_helper PID: whether PID is a broodd-helper (by argv[0] or its executable, whatever
# its directory, also one deleted by an upgrade: readlink then ends in " (deleted)").
is_helper() {
  local argv0 exe
  argv0="$(tr '\0' '\n' 2>/dev/null <"/proc/$1/cmdline" | head -n1)" || return 1
  exe="$(readlink "/proc/$1/exe" 2>/dev/null)" || exe=
  [ "${argv0##*/}" = broodd-helper ] || [ "$(basename "${exe% (deleted)}")" = broodd-helper ]
}

# socket_holders PATH: the PIDs holding a listening unix socket bound to PATH (also after
# PATH was unlinked): inodes from /proc/net/unix (flag __SO_ACCEPTCON, 0x10000), matched
# against the socket:[INODE] links in /proc/*/fd (proc(5)).
socket_holders() {
  local inodes link fd pid
  inodes="$(awk -v p="$1" '$8 == p && $4 == "00010000" { printf " socket:[%s] ", $7 }' /proc/net/unix)"
  [ -n "$inodes" ] || return 0
  for fd in /proc/[0-9]*/fd/*; do
    link="$(readlink "$fd" 2>/dev/null)" || continue
    case "$inodes" in *" $link "*) pid="${fd#/proc/}"; echo "${pid%%/*}" ;; esac
  done | sort -un
  return 0
}

# listen_helpers PATH: the PIDs of every `broodd-helper --listen PATH` (any executable path).
listen_helpers() {
  local d args
  for d in /proc/[0-9]*; do
    args="$(tr '\0' ' ' 2>/dev/null <"$d/cmdline")" || continue
    case " $args " in *" --listen $1 "* | *" --listen=$1 "*) if is_helper "${d#/proc/}"; then echo "${d#/proc/}"; fi ;; esac
  done
  return 0
}

# stop_helpers PIDFILE: stops every broodd-helper serving $SOCKET (the pidfile's, any
# --listen $SOCKET, any holder of the socket) with SIGTERM, then SIGKILL after 10 s, so that
# the new one is the only root helper. A holder that is not broodd-helper is an error.
stop_helpers() {
  local pids="" pid
  if [ -f "$1" ] && pid="$(cat "$1")" && [ -n "$pid" ] && is_helper "$pid"; then pids="$pid"; fi
  pids="$pids $(listen_helpers "$SOCKET") $(socket_holders "$SOCKET")"
  pids="$(printf '%s\n' $pids | sort -un)"
  for pid in $pids; do
    [ -d "/proc/$pid" ] || continue
    if ! is_helper "$pid"; then
      echo "install: pid $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline")) listens on $SOCKET and is not broodd-helper; stop it first" >&2
      exit 1
    fi
    echo "install: stopping the earlier helper, pid $pid ($(readlink "/proc/$pid/exe" 2>/dev/null))"
    kill "$pid" 2>/dev/null || true
  done
  for pid in $pids; do
    for _ in $(seq 100); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    if [ -d "/proc/$pid" ]; then
      echo "install: pid $pid did not exit on SIGTERM in 10 s; sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    fi
    [ ! -d "/proc/$pid" ] || { echo "install: could not stop helper pid $pid" >&2; exit 1; }
  done
  rm -f "$1"
}

step "1/5 packages and Go modules"
./scripts/deps.sh

step "2/5 build and install the package"
arch="$(dpkg --print-architecture)"
deb="$(ARCHES="$arch" FORMATS=deb ./scripts/package.sh | tail -n1)"
# --allow-downgrades: this checkout's package replaces whatever brood is installed, even one
# whose version sorts later (an untagged build's version ends in its commit hash).
# apt resolves the dependencies (QEMU, nftables, erofs-utils, ...) and keeps edited
# /etc/brood files on an upgrade.
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall --allow-downgrades "./$deb"
shadow_check brood "$BROOD"
shadow_check broodd-helper "$HELPER"

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
  "$HELPER" image build "$img" >/dev/null
done

step "5/5 helper"
if [ -d /run/systemd/system ]; then
  echo "install: systemd socket activation (broodd-helper.socket, enabled by the package)"
else
  # No systemd: one helper in the background, never idle-exiting (nothing would restart it).
  pidfile=/run/broodd-helper.pid
  stop_helpers "$pidfile"
  install -d -m 0755 /var/log/brood
  rm -f "$SOCKET"
  nohup "$HELPER" --listen "$SOCKET" --idle-timeout 0 >>/var/log/brood/helper.log 2>&1 </dev/null &
  echo $! >"$pidfile"
  for _ in $(seq 100); do [ -S "$SOCKET" ] && break; sleep 0.1; done
  [ -S "$SOCKET" ] || { echo "install: the helper did not start; see /var/log/brood/helper.log" >&2; exit 1; }
  echo "install: broodd-helper running (pid $(cat "$pidfile")), socket $SOCKET"
fi
BROOD_HELPER_SOCKET="$SOCKET" "$BROOD" doctor
BROOD_HELPER_SOCKET="$SOCKET" "$BROOD" image list
echo
for w in "${WARNINGS[@]}"; do echo "install: WARNING: $w"; done
echo "install: done${WARNINGS[*]:+, with ${#WARNINGS[@]} warning(s) above}. In a repository: sg brood -c 'brood run shell'  (after your next login: brood run shell)"
