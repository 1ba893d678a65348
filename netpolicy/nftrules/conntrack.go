//go:build linux

package nftrules

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Conntrack forgets the connections of a session's guest addresses. DeleteSession already
// cuts a deleted session's tap off (its traffic falls to the "brd*" drop rules), but its
// conntrack entries live on until they time out; a later session that reuses the tap name
// and addresses must not inherit them as "established".
type Conntrack struct {
	h *netlink.Handle
}

// NewConntrack opens a conntrack netlink handle in the netns referred to by nsFd, or in the
// caller's netns when nsFd < 0. Close releases it.
func NewConntrack(nsFd int) (*Conntrack, error) {
	var h *netlink.Handle
	var err error
	if nsFd < 0 {
		h, err = netlink.NewHandle(unix.NETLINK_NETFILTER)
	} else {
		h, err = netlink.NewHandleAt(netns.NsHandle(nsFd), unix.NETLINK_NETFILTER)
	}
	if err != nil {
		return nil, fmt.Errorf("open conntrack netlink handle: %w", err)
	}
	return &Conntrack{h: h}, nil
}

// Close closes the handle.
func (c *Conntrack) Close() { c.h.Close() }

// Forget deletes every conntrack entry whose original source address is in one of
// prefixes (the guest's /30 and /126) and returns how many were deleted.
func (c *Conntrack) Forget(prefixes ...netip.Prefix) (uint, error) {
	var total uint
	var errs []error
	for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		var filters []netlink.CustomConntrackFilter
		for _, p := range prefixes {
			if p.Addr().Is4() != (fam == unix.AF_INET) {
				continue
			}
			f := &netlink.ConntrackFilter{}
			ipn := &net.IPNet{IP: p.Masked().Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
			if err := f.AddIPNet(netlink.ConntrackOrigSrcIP, ipn); err != nil {
				return total, fmt.Errorf("conntrack filter %v: %w", p, err)
			}
			filters = append(filters, f)
		}
		if len(filters) == 0 {
			continue
		}
		n, err := c.h.ConntrackDeleteFilters(netlink.ConntrackTable, fam, filters...)
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("delete conntrack entries of %v: %w", prefixes, err))
		}
	}
	return total, errors.Join(errs...)
}

// Count returns how many conntrack entries have their original source in prefix (tests
// and diagnostics).
func (c *Conntrack) Count(prefix netip.Prefix) (int, error) {
	fam := netlink.InetFamily(unix.AF_INET6)
	if prefix.Addr().Is4() {
		fam = unix.AF_INET
	}
	flows, err := c.h.ConntrackTableList(netlink.ConntrackTable, fam)
	if err != nil {
		return 0, fmt.Errorf("list conntrack entries: %w", err)
	}
	n := 0
	for _, f := range flows {
		if a, ok := netip.AddrFromSlice(f.Forward.SrcIP); ok && prefix.Contains(a.Unmap()) {
			n++
		}
	}
	return n, nil
}
