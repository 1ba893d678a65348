package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
	"brood.dev/brood/netpolicy/dnsproxy"
	"brood.dev/brood/netpolicy/nftrules"
	"golang.org/x/sys/unix"
)

// listenDNS serves h on UDP and classic TCP (not MPTCP, which Landlock's TCP rules do not
// cover) at ap. The sockets are IP_FREEBIND: the tap has no carrier until the VMM opens
// it, and its IPv6 address is not usable before that.
func listenDNS(h *dnsproxy.Proxy, ap netip.AddrPort) (*dnsproxy.Server, error) {
	lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if ap.Addr().Is4() {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
			} else {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
			}
		})
		return errors.Join(err, serr)
	}}
	lc.SetMultipathTCP(false)
	pc, err := lc.ListenPacket(context.Background(), "udp", ap.String())
	if err != nil {
		return nil, fmt.Errorf("listen DNS proxy on udp %s: %w", ap, err)
	}
	l, err := lc.Listen(context.Background(), "tcp", ap.String())
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("listen DNS proxy on tcp %s: %w", ap, err)
	}
	return dnsproxy.Serve(h, pc, l), nil
}

// sessionPinner pins into one session's sets.
type sessionPinner struct {
	fw nftrules.Firewall
	id string
}

func (p sessionPinner) Pin(_ context.Context, addrs []netip.Addr, ports []netpolicy.Port, timeout time.Duration) error {
	return p.fw.Pin(p.id, addrs, ports, timeout)
}

// summarizeLog condenses a decision log; an unreadable log gives an empty summary.
func summarizeLog(path string) *api.EgressSummary {
	f, err := os.Open(path)
	if err != nil {
		return &api.EgressSummary{}
	}
	defer f.Close()
	s, err := dnsproxy.Summarize(f)
	if err != nil {
		return &api.EgressSummary{}
	}
	out := &api.EgressSummary{Allowed: s.AllowedNames, Refused: s.RefusedNames,
		Failed: s.Queries[dnsproxy.Failed], Stripped: s.Stripped}
	for _, a := range s.Pinned {
		out.Pinned = append(out.Pinned, a.String())
	}
	return out
}
