package helper

import (
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/egress"
	"brood.dev/brood/netpolicy/nftrules"
)

// host holds the kernel seams the helper opens before confinement: the one netlink
// handle for links and the one nftables connection, shared by the startup cleanup and
// the egress layer, and the /proc runner scanner.
type host struct {
	links   *egress.NetlinkLinks
	fw      *nftrules.NFT
	runners *ProcRunners
}

// openHost opens netlink and nftables in the current network namespace and the /proc
// runner scanner (for runners executed from the helper or its copy under runtimeDir).
func openHost(runtimeDir string) (*host, error) {
	links, err := egress.NewNetlinkLinks(-1)
	if err != nil {
		return nil, err
	}
	fw, err := nftrules.NewNFT()
	if err != nil {
		links.Close()
		return nil, err
	}
	runners, err := NewProcRunners(runtimeDir)
	if err != nil {
		links.Close()
		fw.Close()
		return nil, err
	}
	return &host{links: links, fw: fw, runners: runners}, nil
}

// cleanup runs Cleanup on the host's seams.
func (h *host) cleanup(log *slog.Logger) (CleanupReport, error) {
	return Cleanup(log, h.links, h.fw, h.runners)
}

// Close releases the netlink sockets.
func (h *host) Close() {
	h.links.Close()
	h.fw.Close()
}

// cloexecInherited marks every descriptor above stderr close-on-exec with close_range(2)
// (CLOSE_RANGE_CLOEXEC, Linux >= 5.11); Go's own descriptors already are.
func cloexecInherited() error {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return os.NewSyscallError("close_range", err)
	}
	return nil
}
