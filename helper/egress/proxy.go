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
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"brood.dev/brood/netpolicy/dnsproxy"
	"brood.dev/brood/netpolicy/namegate"
	"brood.dev/brood/netpolicy/nftrules"
)

// listenDNS serves h on UDP and classic TCP (not MPTCP, which Landlock's TCP rules do not
// cover) at ap, under the session's caps lim. The sockets are IP_FREEBIND: the tap has no
// carrier until the VMM opens it, and its IPv6 address is not usable before that. They
// receive only what enters by the session's own tap (tapOnly), so neither a local process
// nor the uplink's LAN nor another session's guest reaches this session's proxy.
func listenDNS(h dns.Handler, ap netip.AddrPort, tap string, lim *proxyLimits) (*dnsproxy.Server, error) {
	pc, l, err := bindDNS(ap, tap)
	if err != nil {
		return nil, err
	}
	return dnsproxy.Serve(lim.handler(h), pc, lim.listener(l)), nil
}

// bindDNS binds the UDP socket and the listening TCP socket of a session's DNS proxy at
// ap, receiving only from tap (see listenDNS).
func bindDNS(ap netip.AddrPort, tap string) (net.PacketConn, net.Listener, error) {
	lc := tapListenConfig(ap, tap)
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

// bindGate binds the listening TCP socket of a session's name gate on address a of its
// tap, at a port the kernel chooses (the session's nft chain redirects to it, so no
// fixed port can collide with a host service), receiving only from tap like the DNS
// sockets. It returns the listener and its port.
func bindGate(a netip.Addr, tap string) (*net.TCPListener, uint16, error) {
	ap := netip.AddrPortFrom(a, 0)
	lc := tapListenConfig(ap, tap)
	l, err := lc.Listen(context.Background(), "tcp", ap.String())
	if err != nil {
		return nil, 0, fmt.Errorf("listen name gate on tcp %s: %w", ap, err)
	}
	tl := l.(*net.TCPListener)
	return tl, tl.Addr().(*net.TCPAddr).AddrPort().Port(), nil
}

// tapListenConfig is the listen configuration of a session's sockets on ap: IP_FREEBIND
// (the tap has no carrier before the VMM opens it), tapOnly, classic TCP (not MPTCP).
func tapListenConfig(ap netip.AddrPort, tap string) net.ListenConfig {
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
	return lc
}

// sessionPinner pins into one session's sets.
type sessionPinner struct {
	fw nftrules.Firewall
	id string
}

func (p sessionPinner) Pin(_ context.Context, addrs []netip.Addr, ports []netpolicy.Port, timeout time.Duration) error {
	return p.fw.Pin(p.id, addrs, ports, timeout)
}

// namesPinner pins through next and, once that succeeded, records the pin for the
// question's name (nameKey) in the session's name gate table.
type namesPinner struct {
	next  netpolicy.Pinner
	names *namegate.Names
}

func (p namesPinner) Pin(ctx context.Context, addrs []netip.Addr, ports []netpolicy.Port, timeout time.Duration) error {
	if err := p.next.Pin(ctx, addrs, ports, timeout); err != nil {
		return err
	}
	if name, _ := ctx.Value(nameKey{}).(string); name != "" {
		p.names.Add(name, addrs, ports, timeout)
	}
	return nil
}

// gateDialer is the name gate's dialer: classic TCP (Landlock's TCP rules do not cover
// MPTCP), namegate.DefaultDialTimeout.
func gateDialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: namegate.DefaultDialTimeout}
	d.SetMultipathTCP(false)
	return d.DialContext
}
