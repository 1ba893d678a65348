#!/bin/sh
# brood postinstall, shared by the .deb (postinst: $1 = configure [old-version], or an
# abort-* action) and the .rpm (%post: $1 = 1 install, 2 upgrade). Idempotent.
set -e

case "$1" in
	abort-*) exit 0 ;;
esac

# Who may use the helper (helper.toml allow_group).
if ! getent group brood >/dev/null; then
	groupadd --system brood
fi
# The artifact store (helper.toml state_dir): kernels, initramfs, images.
install -d -m 0755 -o root -g root /var/lib/brood

# The SELinux module (rpm only), where SELinux is enabled: the helper's own domain.
if [ -f /usr/share/selinux/packages/brood/brood.pp ] && command -v selinuxenabled >/dev/null && selinuxenabled; then
	semodule -i /usr/share/selinux/packages/brood/brood.pp
	restorecon -R /usr/sbin/broodd-helper /etc/brood /var/lib/brood || true
fi

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	systemctl enable broodd-helper.socket
	# Starting the socket is enough: a connection starts the helper. On an upgrade a
	# running helper keeps serving its sessions with the old binary until its idle exit;
	# the next connection then starts the new one (nothing is stopped here).
	systemctl start broodd-helper.socket
	mode="systemd socket activation (broodd-helper.socket)"
else
	mode="no systemd: start the helper yourself (see /usr/share/doc/brood/packaging.md):
    broodd-helper --listen /run/brood/helper.sock --idle-timeout 0"
fi

if [ ! -d /var/lib/brood/images ] || [ -z "$(ls -A /var/lib/brood/images 2>/dev/null)" ]; then
	artifacts="  - build the guest kernel and the default image (downloads Debian packages
    through apt, about 600 MB, some minutes):  broodd-helper image build test"
else
	artifacts="  - images present in /var/lib/brood/images (rebuild: broodd-helper image build NAME)"
fi
cat <<MSG
brood: helper mode: $mode
brood: next steps for the administrator:
$artifacts
  - enrol each developer:  usermod -aG brood NAME   (effective at their next login)
  - set the egress policy in /etc/brood/policy.toml; check with: brood doctor
MSG
exit 0
