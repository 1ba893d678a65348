package helper

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

var _ TapLinks = (*NetlinkLinks)(nil)

// CreateTap implements TapLinks: a persistent tap (TUNSETPERSIST, so it outlives the
// descriptor until DeleteLink) with one queue, owned by uid:gid (TUNSETOWNER/GROUP), with
// the host addresses (IFA_F_NODAD: usable at once) and set up. The returned descriptor is
// the queue the VMM uses (LAB.md 4: QEMU -netdev tap,fd=N). /dev/net/tun is opened in the
// caller's network namespace, which must be the handle's.
func (l *NetlinkLinks) CreateTap(name string, uid, gid uint32, addrs []netip.Prefix) (*os.File, error) {
	tap := &netlink.Tuntap{
		LinkAttrs: netlink.LinkAttrs{Name: name},
		Mode:      netlink.TUNTAP_MODE_TAP,
		Flags:     netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR,
		Queues:    1,
		Owner:     uid,
		Group:     gid,
	}
	if err := l.h.LinkAdd(tap); err != nil {
		return nil, fmt.Errorf("create tap %q: %w", name, err)
	}
	fail := func(err error) (*os.File, error) {
		for _, f := range tap.Fds {
			f.Close()
		}
		l.DeleteLink(name)
		return nil, err
	}
	if len(tap.Fds) != 1 {
		return fail(fmt.Errorf("create tap %q: got %d queues, want 1", name, len(tap.Fds)))
	}
	for _, p := range addrs {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
			Flags: unix.IFA_F_NODAD}
		if err := l.h.AddrAdd(tap, a); err != nil {
			return fail(fmt.Errorf("add address %s to tap %q: %w", p, name, err))
		}
	}
	if err := l.h.LinkSetUp(tap); err != nil {
		return fail(fmt.Errorf("set tap %q up: %w", name, err))
	}
	return tap.Fds[0], nil
}

// DefaultRouteLinks implements TapLinks: the interfaces of the main table's IPv4 and IPv6
// default routes, sorted, without duplicates.
func (l *NetlinkLinks) DefaultRouteLinks() ([]string, error) {
	var names []string
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := l.h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("list routes: %w", err)
		}
		for _, r := range routes {
			if r.Dst != nil {
				if ones, _ := r.Dst.Mask.Size(); ones != 0 {
					continue
				}
			}
			idx := r.LinkIndex
			if idx == 0 && len(r.MultiPath) > 0 {
				idx = r.MultiPath[0].LinkIndex
			}
			link, err := l.h.LinkByIndex(idx)
			if err != nil {
				return nil, fmt.Errorf("default route link %d: %w", idx, err)
			}
			names = append(names, link.Attrs().Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}
