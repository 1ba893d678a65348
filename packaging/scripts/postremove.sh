#!/bin/sh
# brood postremove, shared by the .deb (postrm: $1 = remove, purge, upgrade,
# disappear, failed-upgrade, abort-install or abort-upgrade) and the .rpm (%postun: $1 = 0
# erase, 1 upgrade). Idempotent.
#
# purge (deb only) removes the artifact store /var/lib/brood; an rpm erase keeps it, as
# rpm keeps state it did not install (remove it by hand). The group brood is kept: files
# outside the package may still name it.
set -e

case "$1" in
	purge)
		rm -rf /var/lib/brood
		;;
	0)
		# rpm erase: unload the SELinux module the postinstall loaded.
		if command -v semodule >/dev/null && semodule -l 2>/dev/null | grep -qx 'brood'; then
			semodule -r brood || true
		fi
		;;
esac
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
exit 0
