package helper

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
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

// ipv4DevconfForwarding is IPV4_DEVCONF_FORWARDING (include/uapi/linux/ip.h), the index of
// net.ipv4.conf.<if>.forwarding in IFLA_INET_CONF.
const ipv4DevconfForwarding = 1

// EnableForwarding implements TapLinks: it sets net.ipv4.conf.<name>.forwarding = 1 over
// rtnetlink (RTM_SETLINK, IFLA_AF_SPEC → AF_INET → IFLA_INET_CONF; net/ipv4/devinet.c
// inet_set_link_af), not through /proc/sys: the confined helper cannot write procfs
// sysctl files of interfaces that appear after confinement (Landlock rules hold inodes,
// and procfs makes new ones per lookup). The global switch is never touched. The request
// goes out in the caller's network namespace.
func (l *NetlinkLinks) EnableForwarding(name string) error {
	link, err := l.h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("enable forwarding on %q: %w", name, err)
	}
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(link.Attrs().Index)
	req.AddData(msg)
	spec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
	conf := spec.AddRtAttr(unix.AF_INET, nil).AddRtAttr(unix.IFLA_INET_CONF, nil)
	conf.AddRtAttr(ipv4DevconfForwarding, nl.Uint32Attr(1))
	req.AddData(spec)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("enable forwarding on %q: %w", name, err)
	}
	return nil
}
