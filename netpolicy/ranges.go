package netpolicy

import (
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
)

// Range is one destination range that is always refused: the DNS proxy strips such
// addresses from answers, and the nft ruleset rejects them before the session's sets are
// consulted, in every profile.
type Range struct {
	Prefix netip.Prefix
	// Why names the range and its source (IANA special-purpose registries, RFC 6890 and the
	// RFC cited).
	Why string
}

// The refused ranges below cover everything that is not globally reachable. The
// documentation ranges (documentationRanges) are refused too, unless a test switched
// them off with AllowDocumentationRanges.
var refusedV4 = []Range{
	{mustPrefix("0.0.0.0/8"), "this network (RFC 791)"},
	{mustPrefix("10.0.0.0/8"), "private (RFC 1918)"},
	{mustPrefix("100.64.0.0/10"), "shared address space / CGNAT (RFC 6598)"},
	{mustPrefix("127.0.0.0/8"), "loopback (RFC 1122)"},
	{mustPrefix("169.254.0.0/16"), "link-local, incl. cloud metadata 169.254.169.254 (RFC 3927)"},
	{mustPrefix("172.16.0.0/12"), "private (RFC 1918)"},
	{mustPrefix("192.0.0.0/24"), "IETF protocol assignments, incl. Oracle metadata (RFC 6890)"},
	{mustPrefix("192.88.99.0/24"), "deprecated 6to4 relay anycast (RFC 7526)"},
	{mustPrefix("192.168.0.0/16"), "private (RFC 1918)"},
	{mustPrefix("198.18.0.0/15"), "benchmarking (RFC 2544)"},
	{mustPrefix("224.0.0.0/4"), "multicast (RFC 5771)"},
	{mustPrefix("240.0.0.0/4"), "reserved and limited broadcast (RFC 1112, RFC 919)"},
}

var refusedV6 = []Range{
	{mustPrefix("::/96"), "unspecified, loopback and IPv4-compatible (RFC 4291)"},
	{mustPrefix("::ffff:0:0/96"), "IPv4-mapped (RFC 4291); never valid on the wire"},
	{mustPrefix("64:ff9b:1::/48"), "local-use NAT64 (RFC 8215)"},
	{mustPrefix("100::/64"), "discard-only (RFC 6666)"},
	{mustPrefix("2001::/32"), "Teredo, embeds an obfuscated IPv4 address (RFC 4380)"},
	{mustPrefix("2001:2::/48"), "benchmarking (RFC 5180)"},
	{mustPrefix("2001:10::/28"), "ORCHID (RFC 4843)"},
	{mustPrefix("fc00::/7"), "unique local, incl. fd00:ec2::254 metadata (RFC 4193)"},
	{mustPrefix("fe80::/10"), "link-local (RFC 4291)"},
	{mustPrefix("fec0::/10"), "deprecated site-local (RFC 3879)"},
	{mustPrefix("ff00::/8"), "multicast (RFC 4291)"},
}

// documentationRanges are never routed on the public internet (RFC 5737, RFC 3849,
// RFC 9637). brood's namespace and VM tests use them as their stand-in internet, and
// only they switch their refusal off (AllowDocumentationRanges).
var documentationRanges = []Range{
	{mustPrefix("192.0.2.0/24"), "documentation TEST-NET-1 (RFC 5737)"},
	{mustPrefix("198.51.100.0/24"), "documentation TEST-NET-2 (RFC 5737)"},
	{mustPrefix("203.0.113.0/24"), "documentation TEST-NET-3 (RFC 5737)"},
	{mustPrefix("2001:db8::/32"), "documentation (RFC 3849)"},
	{mustPrefix("3fff::/20"), "documentation (RFC 9637)"},
}

// allowDocumentation is the test knob of AllowDocumentationRanges.
var allowDocumentation atomic.Bool

// AllowDocumentationRanges is a test knob: with on, the documentation ranges are not
// refused (RefusedReason, RefusedRanges, RefusedPrefixes), so that tests can use them as
// the internet in namespaces they make. brood itself never calls it; a test binary calls
// it from TestMain, before anything reads the ranges. Safe for concurrent use.
func AllowDocumentationRanges(on bool) { allowDocumentation.Store(on) }

// refused returns the refused ranges of one family (v6 false: IPv4) with the
// documentation ranges unless they are allowed.
func refused(v6 bool) []Range {
	rs := refusedV4
	if v6 {
		rs = refusedV6
	}
	rs = slices.Clone(rs)
	if !allowDocumentation.Load() {
		for _, r := range documentationRanges {
			if r.Prefix.Addr().Is6() == v6 {
				rs = append(rs, r)
			}
		}
	}
	return rs
}

// matchRange returns the reason of the refused range (of a's family, the documentation
// ranges unless allowed) that contains a, without allocating.
func matchRange(a netip.Addr) (string, bool) {
	rs := refusedV4
	if a.Is6() {
		rs = refusedV6
	}
	for _, r := range rs {
		if r.Prefix.Contains(a) {
			return r.Why, true
		}
	}
	if !allowDocumentation.Load() {
		for _, r := range documentationRanges {
			if r.Prefix.Contains(a) {
				return r.Why, true
			}
		}
	}
	return "", false
}

// Embedding prefixes: an IPv6 address under these carries an IPv4 address that is checked
// against the IPv4 ranges (RFC 6052 NAT64 well-known prefix: bits 96–127; RFC 3056 6to4:
// bits 16–47).
var (
	nat64Prefix = mustPrefix("64:ff9b::/96")
	sixToFour   = mustPrefix("2002::/16")
)

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// RefusedRanges returns the refused IPv4 and IPv6 ranges as documented above (copies).
func RefusedRanges() (v4, v6 []Range) {
	return refused(false), refused(true)
}

// RefusedReason reports whether a is in an always-refused range, and which. IPv6 addresses
// that embed IPv4 (NAT64 64:ff9b::/96, 6to4 2002::/16) are refused when the embedded address
// is; IPv4-mapped addresses are refused outright. A zero or zoned address is refused.
func RefusedReason(a netip.Addr) (string, bool) {
	if !a.IsValid() {
		return "invalid address", true
	}
	if a.Zone() != "" {
		return "scoped (zoned) address", true
	}
	if why, bad := matchRange(a); bad {
		return why, true
	}
	if a.Is4() {
		return "", false
	}
	b := a.As16()
	var embedded netip.Addr
	var via string
	switch {
	case nat64Prefix.Contains(a):
		embedded, via = netip.AddrFrom4([4]byte(b[12:16])), "NAT64 (RFC 6052)"
	case sixToFour.Contains(a):
		embedded, via = netip.AddrFrom4([4]byte(b[2:6])), "6to4 (RFC 3056)"
	default:
		return "", false
	}
	if why, bad := RefusedReason(embedded); bad {
		return fmt.Sprintf("%s embedding %s: %s", via, embedded, why), true
	}
	return "", false
}

// RefusedPrefixes returns every refused range as disjoint prefixes, sorted, IPv4 and IPv6
// separately, including the NAT64 and 6to4 images of each refused IPv4 range — the static
// deny sets of the nft ruleset.
func RefusedPrefixes() (v4, v6 []netip.Prefix) {
	for _, r := range refused(false) {
		v4 = append(v4, r.Prefix)
		pb := r.Prefix.Addr().As4()
		var n [16]byte
		copy(n[:], nat64Prefix.Addr().AsSlice())
		copy(n[12:], pb[:])
		v6 = append(v6, netip.PrefixFrom(netip.AddrFrom16(n), 96+r.Prefix.Bits()))
		var s [16]byte
		s[0], s[1] = 0x20, 0x02
		copy(s[2:], pb[:])
		v6 = append(v6, netip.PrefixFrom(netip.AddrFrom16(s), 16+r.Prefix.Bits()))
	}
	for _, r := range refused(true) {
		v6 = append(v6, r.Prefix)
	}
	return disjoint(v4), disjoint(v6)
}

// disjoint sorts ps and drops every prefix contained in another one. (Two CIDR prefixes
// either nest or are disjoint.)
func disjoint(ps []netip.Prefix) []netip.Prefix {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	out := ps[:0]
	for _, p := range ps {
		if n := len(out); n > 0 && out[n-1].Overlaps(p) {
			continue // sorted by address then length: the earlier, shorter prefix contains p
		}
		out = append(out, p)
	}
	return out
}

// ParseAddr parses text that must be exactly one IP address: ASCII digits and hex, no prefix
// length, no zone, no brackets or spaces, no IPv4-mapped IPv6 form. "0.0.0.0/0", "1.2.3.4}",
// fullwidth digits and similar fail with ErrBadAddress. It does not check RefusedReason.
func ParseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("parse address %q: %w", s, ErrBadAddress)
	}
	if a.Zone() != "" || a.Is4In6() {
		return netip.Addr{}, fmt.Errorf("parse address %q: zoned or IPv4-mapped: %w", s, ErrBadAddress)
	}
	return a, nil
}
