#!/bin/sh
# brood preremove, shared by the .deb (prerm: $1 = remove, upgrade, deconfigure or
# failed-upgrade) and the .rpm (%preun: $1 = 0 erase, 1 upgrade). Idempotent.
#
# Only a removal stops the helper; an upgrade leaves running sessions alone.
set -e

case "$1" in
	remove | 0) ;;
	*) exit 0 ;;
esac

if [ -d /run/systemd/system ]; then
	# Stopping the socket stops the service too (Requires=); its ExecStopPost runs
	# broodd-helper --cleanup.
	systemctl disable --now broodd-helper.socket || true
	systemctl stop broodd-helper.service || true
fi
# Taps brd*, the nft table inet brood and orphaned VM runners, also without systemd.
# Users' sessions (their snapshots and reviews) stay in their own directories.
if command -v broodd-helper >/dev/null; then
	broodd-helper --cleanup || true
fi
exit 0
