package helper

import (
	"net/netip"
	"os"
)

// Links is the helper's one seam to the kernel's network links: NetlinkLinks
// (vishvananda/netlink, one handle in one network namespace) and FakeLinks (in memory).
// Every tap the helper creates is named nftrules.TapName(session id); a live session's tap
// is deleted only by Egress.Stop, a stale one (of a helper that died) only by Cleanup.
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
