package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"brood.dev/brood/netpolicy"
	"brood.dev/brood/netpolicy/dnsproxy"
	"brood.dev/brood/netpolicy/nftrules"
	"golang.org/x/sys/unix"
)

// listenDNS serves h on UDP and classic TCP (not MPTCP, which Landlock's TCP rules do not
// cover) at ap, under the session's caps lim. The sockets are IP_FREEBIND: the tap has no
// carrier until the VMM opens it, and its IPv6 address is not usable before that. They
// receive only what enters by the session's own tap (tapOnly), so neither a local process
// nor the uplink's LAN nor another session's guest reaches this session's proxy.
func listenDNS(h *dnsproxy.Proxy, ap netip.AddrPort, tap string, lim *proxyLimits) (*dnsproxy.Server, error) {
	pc, l, err := bindDNS(ap, tap)
	if err != nil {
		return nil, err
	}
	return dnsproxy.Serve(lim.handler(h), pc, lim.listener(l)), nil
}

// bindDNS binds the UDP socket and the listening TCP socket of a session's DNS proxy at
// ap, receiving only from tap (see listenDNS).
func bindDNS(ap netip.AddrPort, tap string) (net.PacketConn, net.Listener, error) {
	lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if ap.Addr().Is4() {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
			} else {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
			}
			if serr == nil {
				serr = tapOnly(int(fd), tap)
			}
		})
		return errors.Join(err, serr)
	}}
	lc.SetMultipathTCP(false)
	pc, err := lc.ListenPacket(context.Background(), "udp", ap.String())
	if err != nil {
		return nil, nil, fmt.Errorf("listen DNS proxy on udp %s: %w", ap, err)
	}
	l, err := lc.Listen(context.Background(), "tcp", ap.String())
	if err != nil {
		pc.Close()
		return nil, nil, fmt.Errorf("listen DNS proxy on tcp %s: %w", ap, err)
	}
	return pc, l, nil
}

// sessionPinner pins into one session's sets.
type sessionPinner struct {
	fw nftrules.Firewall
	id string
}

func (p sessionPinner) Pin(_ context.Context, addrs []netip.Addr, ports []netpolicy.Port, timeout time.Duration) error {
	return p.fw.Pin(p.id, addrs, ports, timeout)
}
