package guest

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/vishvananda/netlink"

	"brood.dev/brood/sandbox/guestcfg"
)

// configureNet brings lo up and, when n is set, gives eth0 its address, a default
// route via the gateway and /etc/resolv.conf. Without n the VM has no NIC at all.
func configureNet(n *guestcfg.Net) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set lo up: %w", err)
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
