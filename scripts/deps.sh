#!/usr/bin/env bash
# Installs everything brood's build and tests need on a fresh Debian/Ubuntu machine:
# Debian packages and Go modules. Idempotent. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
pkgs=(
  git ca-certificates
  qemu-system-x86          # VM backend (TCG/KVM)
  nftables iproute2        # egress tests (namespaces, nft for inspection only)
  kmod cpio xz-utils       # guest kernel modules, initramfs
  mmdebstrap busybox-static e2fsprogs erofs-utils  # guest images
  btrfs-progs xfsprogs     # reflink tests on loop filesystems
  tmux                     # interactive PTY tests
  systemd libxml2-utils    # systemd-analyze verify, plist XML check
  systemd-container        # systemd-nspawn: the packaged units under a real systemd
  rpm rpmlint lintian      # package checks (packaging/)
  selinux-policy-dev checkpolicy semodule-utils  # the SELinux module (selinux/)
)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if ! command -v go >/dev/null; then
  echo "deps: Go toolchain not found on PATH (need Go >= 1.26; /usr/local/go/bin)" >&2
  exit 1
fi
go mod download
