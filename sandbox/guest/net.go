package guest

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"brood.dev/brood/sandbox/guestcfg"
)

// configureNet brings lo up and, when n is set, gives eth0 its address, a default
// route via the gateway, the same for IPv6 when n.Address6 is set, and /etc/resolv.conf.
// Without n the VM has no NIC at all.
func configureNet(n *guestcfg.Net) error {
	if err := linkUp("lo"); err != nil {
		return err
	}
	if n == nil {
		return nil
	}
	eth, err := netlink.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("find eth0: %w", err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: n.Address.Addr().AsSlice(), Mask: net.CIDRMask(n.Address.Bits(), n.Address.Addr().BitLen())}}
	if err := netlink.AddrAdd(eth, addr); err != nil {
		return fmt.Errorf("add address %s to eth0: %w", n.Address, err)
	}
	if err := netlink.LinkSetUp(eth); err != nil {
		return fmt.Errorf("set eth0 up: %w", err)
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: n.Gateway.AsSlice()}); err != nil {
		return fmt.Errorf("add default route via %s: %w", n.Gateway, err)
	}
	if n.Address6.IsValid() {
		// No DAD: the /126 is the session's alone, and a tentative address could not be
		// used for the first seconds.
		a6 := &netlink.Addr{IPNet: &net.IPNet{IP: n.Address6.Addr().AsSlice(), Mask: net.CIDRMask(n.Address6.Bits(), 128)},
			Flags: unix.IFA_F_NODAD}
		if err := netlink.AddrAdd(eth, a6); err != nil {
			return fmt.Errorf("add address %s to eth0: %w", n.Address6, err)
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: n.Gateway6.AsSlice(),
			Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}}); err != nil {
			return fmt.Errorf("add default route via %s: %w", n.Gateway6, err)
		}
	}
	var rc strings.Builder
	for _, d := range n.DNS {
		fmt.Fprintf(&rc, "nameserver %s\n", d)
	}
	os.Remove("/etc/resolv.conf") // may be a dangling symlink in the image
	if err := os.WriteFile("/etc/resolv.conf", []byte(rc.String()), 0o644); err != nil {
		return fmt.Errorf("write resolv.conf: %w", err)
	}
	return nil
}

// linkUp sets IFF_UP on the interface called name with SIOCGIFFLAGS/SIOCSIFFLAGS
// (netdevice(7)). For lo, which every session needs, this is a few syscalls where
// netlink would first run (and under TCG, translate) a link dump and its parser.
func linkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("set %s up: %w", name, os.NewSyscallError("socket", err))
	}
	defer unix.Close(fd)
	ifr, err := ifFlags(fd, name)
	if err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set %s up: %w", name, os.NewSyscallError("ioctl SIOCSIFFLAGS", err))
	}
	return nil
}

// ifFlags reads the flags of the interface called name (SIOCGIFFLAGS, netdevice(7))
// through the socket fd; they are ifr.Uint16() (IFF_* bits). A name the kernel would
// not accept (over 15 bytes) or a missing interface is an error.
func ifFlags(fd int, name string) (*unix.Ifreq, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return nil, err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return nil, os.NewSyscallError("ioctl SIOCGIFFLAGS", err)
	}
	return ifr, nil
}
