package egress

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NetworkLinks is a Links that also lists the host's own networks (NetlinkLinks,
// FakeLinks). A permissive session needs one: it refuses those networks, and a Links that
// cannot list them cannot start a permissive session.
type NetworkLinks interface {
	Links
	// HostNetworks returns the prefixes of the addresses on the interfaces uplinks and the
	// destinations of every route of the main table but the default routes, IPv4 and IPv6.
	HostNetworks(uplinks []string) ([]netip.Prefix, error)
	// WatchNetworks reports changes of the host's addresses and routes until stop is
	// closed: the returned channel receives a value after one or more changes (coalesced)
	// and is closed when the watch ends (stop, or the subscription failed).
	WatchNetworks(stop <-chan struct{}) (<-chan struct{}, error)
}

// hostNetworks returns what a permissive session refuses beyond the refused ranges: the
// uplinks' connected prefixes and the host's routed networks (NetworkLinks.HostNetworks),
// read at the session's start. Errors name the operation.
func (e *Manager) hostNetworks() ([]netip.Prefix, error) {
	nl, ok := e.links.(NetworkLinks)
	if !ok {
		return nil, fmt.Errorf("permissive egress: the host's networks cannot be listed on %T: %w", e.links, ErrConfig)
	}
	uplinks, err := e.uplinks()
	if err != nil {
		return nil, err
	}
	nets, err := nl.HostNetworks(uplinks)
	if err != nil {
		return nil, fmt.Errorf("permissive egress: %w", err)
	}
	e.log.Info("audit: permissive session refuses the host's networks", "networks", nets)
	return nets, nil
}

// permissiveRefused makes s hold the watch of the host's networks (netwatch.go) and then
// reads them (hostNetworks): a change after the read is seen by the watch.
func (e *Manager) permissiveRefused(s *Session) ([]netip.Prefix, error) {
	nl, ok := e.links.(NetworkLinks)
	if !ok {
		return nil, fmt.Errorf("permissive egress: the host's networks cannot be listed on %T: %w", e.links, ErrConfig)
	}
	if err := e.watchNetworks(nl, s); err != nil {
		return nil, fmt.Errorf("permissive egress: %w", err)
	}
	return e.hostNetworks()
}

// HostNetworks implements NetworkLinks with the handle's address and route dumps.
func (l *NetlinkLinks) HostNetworks(uplinks []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, name := range uplinks {
		link, err := l.h.LinkByName(name)
		if err != nil {
			return nil, fmt.Errorf("list networks of uplink %q: %w", name, err)
		}
		addrs, err := l.h.AddrList(link, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("list addresses of uplink %q: %w", name, err)
		}
		for _, a := range addrs {
			if p, ok := ipNetPrefix(a.IPNet); ok {
				out = append(out, p)
			}
		}
	}
	routes, err := l.h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		if p, ok := ipNetPrefix(r.Dst); ok && p.Bits() > 0 {
			out = append(out, p)
		}
	}
	return out, nil
}

// WatchNetworks implements NetworkLinks with netlink address and route subscriptions
// (RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR, RTNLGRP_IPV4_ROUTE, RTNLGRP_IPV6_ROUTE;
// rtnetlink(7)) in the handle's namespace. A subscription that fails (a receive error
// such as ENOBUFS when the socket overflowed) ends the watch: the caller re-reads the
// networks and watches again.
func (l *NetlinkLinks) WatchNetworks(stop <-chan struct{}) (<-chan struct{}, error) {
	addrs := make(chan netlink.AddrUpdate, 64)
	routes := make(chan netlink.RouteUpdate, 64)
	if err := netlink.AddrSubscribeWithOptions(addrs, stop, netlink.AddrSubscribeOptions{Namespace: l.ns}); err != nil {
		return nil, fmt.Errorf("subscribe to address changes: %w", err)
	}
	if err := netlink.RouteSubscribeWithOptions(routes, stop, netlink.RouteSubscribeOptions{Namespace: l.ns}); err != nil {
		return nil, fmt.Errorf("subscribe to route changes: %w", err)
	}
	out := make(chan struct{}, 1)
	go func() {
		// Both subscriptions are drained to their end (their goroutines close their
		// channel then) so that neither blocks on a send; the watch ends (out closed) as
		// soon as one has ended, as changes may be missed from then on.
		ended := false
		for addrs != nil || routes != nil {
			select {
			case _, ok := <-addrs:
				if !ok {
					addrs = nil
				}
			case _, ok := <-routes:
				if !ok {
					routes = nil
				}
			}
			switch {
			case ended:
			case addrs == nil || routes == nil:
				ended = true
				close(out)
			default:
				select {
				case out <- struct{}{}:
				default: // a change is already pending
				}
			}
		}
	}()
	return out, nil
}

// ipNetPrefix converts n to a masked prefix (IPv4 unmapped); ok is false for a nil or
// malformed one.
func ipNetPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	if a = a.Unmap(); a.Is4() && bits == 128 {
		ones -= 96
	}
	p, err := a.Prefix(ones)
	return p, err == nil && bits != 0
}
