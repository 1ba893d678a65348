package netpolicy

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

func TestRefusedReason(t *testing.T) {
	refused := []string{
		"127.0.0.1", "10.0.0.5", "169.254.169.254", "100.64.0.1", "172.16.3.4", "192.168.1.1",
		"0.0.0.0", "224.0.0.251", "255.255.255.255", "198.18.0.1", "192.0.0.192",
		"::1", "::", "fd00::1", "fe80::1", "ff02::fb", "::ffff:127.0.0.1", "::ffff:8.8.8.8",
		"64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", "64:ff9b:1::1", "2002:a00:1::1", "2002:7f00:1::",
		"2001:0:4136:e378:8000:63bf:3fff:fdd2", "fd00:ec2::254", "::7f00:1",
	}
	for _, s := range refused {
		if why, bad := RefusedReason(netip.MustParseAddr(s)); !bad || why == "" {
			t.Errorf("RefusedReason(%s) = %q, %v; want refused", s, why, bad)
		}
	}
	allowed := []string{
		"140.82.112.3", "2606:4700::6810:84e5", "64:ff9b::8c52:7003", "2002:8c52:7003::1", "1.1.1.1",
	}
	for _, s := range allowed {
		if why, bad := RefusedReason(netip.MustParseAddr(s)); bad {
			t.Errorf("RefusedReason(%s) = refused (%s), want allowed", s, why)
		}
	}
	// Documentation ranges: refused, unless the test knob allows them.
	docs := []string{"192.0.2.10", "198.51.100.7", "203.0.113.9", "2001:db8::50", "3fff::1", "64:ff9b::c000:20a", "2002:c000:20a::1"}
	for _, on := range []bool{false, true} {
		AllowDocumentationRanges(on)
		for _, s := range docs {
			if why, bad := RefusedReason(netip.MustParseAddr(s)); bad == on {
				t.Errorf("knob %v: RefusedReason(%s) = %q, %v", on, s, why, bad)
			}
		}
		v4, _ := RefusedPrefixes()
		if got := slices.Contains(v4, netip.MustParsePrefix("192.0.2.0/24")); got == on {
			t.Errorf("knob %v: RefusedPrefixes has 192.0.2.0/24: %v", on, got)
		}
	}
	AllowDocumentationRanges(false)
	if _, bad := RefusedReason(netip.Addr{}); !bad {
		t.Error("zero address not refused")
	}
	if _, bad := RefusedReason(netip.MustParseAddr("2606:4700::1%eth0")); !bad {
		t.Error("zoned address not refused")
	}
}

// TestRefusedPrefixesAgree checks that the static deny prefixes cover exactly what
// RefusedReason refuses, at the boundaries of every prefix.
func TestRefusedPrefixesAgree(t *testing.T) {
	v4, v6 := RefusedPrefixes()
	in := func(a netip.Addr) bool {
		for _, p := range append(v4, v6...) {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	for _, ps := range [][]netip.Prefix{v4, v6} {
		for i, p := range ps {
			if i > 0 && (ps[i-1].Overlaps(p) || ps[i-1].Addr().Compare(p.Addr()) >= 0) {
				t.Errorf("prefixes %v and %v overlap or are unsorted", ps[i-1], p)
			}
			last := lastAddr(p)
			for _, a := range []netip.Addr{p.Addr(), last, p.Addr().Prev(), last.Next()} {
				if !a.IsValid() {
					continue
				}
				_, bad := RefusedReason(a)
				if bad != in(a) {
					t.Errorf("%s: RefusedReason=%v, in static prefixes=%v", a, bad, in(a))
				}
			}
		}
	}
	if r4, _ := RefusedRanges(); len(v4) != len(r4) {
		t.Errorf("v4 prefixes: %d, want %d", len(v4), len(r4))
	}
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func TestParseAddr(t *testing.T) {
	for _, s := range []string{"0.0.0.0/0", "1.2.3.4}", "1.2.3.4 ", "１.２.３.４", "1.2.3.4,5.6.7.8",
		"fe80::1%eth0", "::ffff:1.2.3.4", "[::1]", "01.2.3.4", "", "1.2.3.4\x00", "1.2.3.4/32"} {
		if a, err := ParseAddr(s); !errors.Is(err, ErrBadAddress) {
			t.Errorf("ParseAddr(%q) = %v, %v; want ErrBadAddress", s, a, err)
		}
	}
	for _, s := range []string{"192.0.2.1", "2001:db8::1"} {
		if a, err := ParseAddr(s); err != nil || a.String() != s {
			t.Errorf("ParseAddr(%q) = %v, %v", s, a, err)
		}
	}
}
