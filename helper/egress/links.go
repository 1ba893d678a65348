package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"brood.dev/brood/netpolicy/nftrules"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Links is the helper's one seam to the kernel's network links: NetlinkLinks
// (vishvananda/netlink, one handle in one network namespace) and FakeLinks (in memory).
// Every tap the helper creates is named nftrules.TapName(session id); a live session's tap
// is deleted only by Manager.Stop, a stale one (of a helper that died) only by Cleanup.
type Links interface {
	// CreateTap creates the persistent tap name (IFF_TAP|IFF_NO_PI|IFF_VNET_HDR) owned by
	// uid:gid, adds addrs (host side, no DAD), sets it up and returns an open queue
	// descriptor for the VMM. On error a tap it made may be left: the caller deletes it
	// with DeleteLink. A stand-in (tests) may return a nil file.
	CreateTap(name string, uid, gid uint32, addrs []netip.Prefix) (*os.File, error)
	// DeleteLink deletes the link name; a missing link is not an error.
	DeleteLink(name string) error
	// ListTaps returns the names of tap devices whose name starts with prefix.
	ListTaps(prefix string) ([]string, error)
	// DefaultRouteLinks names the interfaces of the IPv4 and IPv6 default routes.
	DefaultRouteLinks() ([]string, error)
	// EnableForwarding sets net.ipv4.conf.<name>.forwarding = 1 (that interface only).
	EnableForwarding(name string) error
}

// NetlinkLinks implements Links with a vishvananda/netlink handle bound to one network
// namespace.
type NetlinkLinks struct {
	h  *netlink.Handle
	ns *netns.NsHandle // the namespace of h for subscriptions (WatchNetworks); nil: the current one
}

var _ Links = (*NetlinkLinks)(nil)

// NewNetlinkLinks opens a netlink handle in the network namespace nsFD (-1: the current
// one; the caller keeps nsFD open while the links are used). Close it with Close.
func NewNetlinkLinks(nsFD int) (*NetlinkLinks, error) {
	var h *netlink.Handle
	var err error
	if nsFD < 0 {
		h, err = netlink.NewHandle()
	} else {
		h, err = netlink.NewHandleAt(netns.NsHandle(nsFD))
	}
	if err != nil {
		return nil, fmt.Errorf("open netlink handle: %w", err)
	}
	l := &NetlinkLinks{h: h}
	if nsFD >= 0 {
		ns := netns.NsHandle(nsFD)
		l.ns = &ns
	}
	return l, nil
}

// Close releases the netlink sockets.
func (l *NetlinkLinks) Close() { l.h.Close() }

// ListTaps returns tap (tuntap) links whose name starts with prefix.
func (l *NetlinkLinks) ListTaps(prefix string) ([]string, error) {
	links, err := l.h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var names []string
	for _, link := range links {
		a := link.Attrs()
		if link.Type() == "tuntap" && strings.HasPrefix(a.Name, prefix) {
			names = append(names, a.Name)
		}
	}
	return names, nil
}

// DeleteLink deletes link name; a missing link is not an error.
func (l *NetlinkLinks) DeleteLink(name string) error {
	link, err := l.h.LinkByName(name)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("find link %q: %w", name, err)
	}
	if err := l.h.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete link %q: %w", name, err)
	}
	return nil
}

// CreateTap implements Links: a persistent tap (TUNSETPERSIST, so it outlives the
// descriptor until DeleteLink) with one queue, owned by uid:gid (TUNSETOWNER/GROUP), with
// the host addresses (IFA_F_NODAD: usable at once) and set up. The returned descriptor is
// the queue the VMM uses (QEMU -netdev tap,fd=N). /dev/net/tun is opened in the caller's
// network namespace, which must be the handle's. On error the tap may exist: the caller
// deletes it (Manager.Stop does, for a failed start).
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

// DefaultRouteLinks implements Links: the interfaces of the main table's IPv4 and IPv6
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

// EnableForwarding implements Links: SetForwarding(name, true).
func (l *NetlinkLinks) EnableForwarding(name string) error { return l.SetForwarding(name, true) }

// SetForwarding implements ForwardingLinks: it sets net.ipv4.conf.<name>.forwarding over
// rtnetlink (RTM_SETLINK, IFLA_AF_SPEC → AF_INET → IFLA_INET_CONF; net/ipv4/devinet.c
// inet_set_link_af), not through /proc/sys: the confined helper cannot write procfs
// sysctl files of interfaces that appear after confinement (Landlock rules hold inodes,
// and procfs makes new ones per lookup). The global switch is never touched. The request
// goes out in the caller's network namespace.
func (l *NetlinkLinks) SetForwarding(name string, on bool) error {
	link, err := l.h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("set forwarding on %q: %w: %w", name, errNoLink, err)
	}
	v := uint32(0)
	if on {
		v = 1
	}
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(link.Attrs().Index)
	req.AddData(msg)
	spec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
	conf := spec.AddRtAttr(unix.AF_INET, nil).AddRtAttr(unix.IFLA_INET_CONF, nil)
	conf.AddRtAttr(ipv4DevconfForwarding, nl.Uint32Attr(v))
	req.AddData(spec)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("set forwarding on %q to %v: %w", name, on, err)
	}
	return nil
}

// IPv6Conf writes per-interface IPv6 sysctls through a descriptor of
// /proc/sys/net/ipv6/conf opened before Landlock confinement.
//
// Why a held descriptor: procfs sysctl dentries are dropped as soon as they are unused and
// looked up again as new inodes, and Landlock rules hold inodes. Holding the conf
// directory open pins the very dentry and inode ConfinementRules grants write access
// under, so a tap created after confinement (brdX/force_forwarding, a new child of that
// pinned directory) is still covered; the files are opened with openat relative to it.
// There is no rtnetlink equivalent: IFLA_INET6_CONF is read-only (net/ipv6/addrconf.c
// inet6_set_link_af accepts only the token and addr_gen_mode).
type IPv6Conf struct{ dir *os.File }

// forceForwarding is net.ipv6.conf.<if>.force_forwarding (Linux >= 6.17): forward IPv6
// packets arriving on that interface even though the global forwarding switch is off
// (net/ipv6/ip6_output.c ip6_forward). The per-interface `forwarding` entry does not do
// that: it only changes host/router behaviour.
const forceForwarding = "force_forwarding"

// OpenIPv6Conf opens IPv6ConfDir (O_PATH). It fails with ErrNoIPv6Forwarding when the
// kernel has no IPv6 or no force_forwarding (then guests get no IPv6). Call it before
// Confine, in the helper's network namespace.
func OpenIPv6Conf() (*IPv6Conf, error) {
	fd, err := unix.Open(IPv6ConfDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w: %w", IPv6ConfDir, ErrNoIPv6Forwarding, err)
	}
	c := &IPv6Conf{dir: os.NewFile(uintptr(fd), IPv6ConfDir)}
	if err := unix.Faccessat(fd, "default/"+forceForwarding, unix.F_OK, 0); err != nil {
		c.Close()
		return nil, fmt.Errorf("%s/default/%s: %w (Linux >= 6.17 needed): %w", IPv6ConfDir, forceForwarding, ErrNoIPv6Forwarding, err)
	}
	return c, nil
}

// Close releases the directory descriptor.
func (c *IPv6Conf) Close() error { return c.dir.Close() }

// EnableForwarding sets net.ipv6.conf.<name>.force_forwarding = 1: SetForwarding(name,
// true).
func (c *IPv6Conf) EnableForwarding(name string) error { return c.SetForwarding(name, true) }

// SetForwarding sets net.ipv6.conf.<name>.force_forwarding, for interface name only: "all"
// and "default" are refused (never the global switch), as is any name the kernel would
// not accept for an interface. A missing interface's error wraps os.ErrNotExist.
func (c *IPv6Conf) SetForwarding(name string, on bool) error {
	if err := nftrules.ValidateIfName(name); err != nil || name == "all" || name == "default" {
		return fmt.Errorf("set IPv6 forwarding on %q: not a single interface: %w", name, ErrConfig)
	}
	fd, err := unix.Openat(int(c.dir.Fd()), name+"/"+forceForwarding, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("set IPv6 forwarding on %q: %w", name, &os.PathError{Op: "openat", Path: IPv6ConfDir + "/" + name + "/" + forceForwarding, Err: err})
	}
	defer unix.Close(fd)
	v := "0\n"
	if on {
		v = "1\n"
	}
	if _, err := unix.Write(fd, []byte(v)); err != nil {
		return fmt.Errorf("set IPv6 forwarding on %q: %w", name, os.NewSyscallError("write", err))
	}
	return nil
}
