package nftrules

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables/expr"

	"brood.dev/brood/netpolicy"
)

func TestIfNames(t *testing.T) {
	for _, bad := range []string{"", ".", "..", "a/b", "a:b", "a b", "a\tb", "a\x00", "brd0123456789abc"} {
		if err := ValidateIfName(bad); !errors.Is(err, ErrBadIfName) {
			t.Errorf("ValidateIfName(%q) = %v", bad, err)
		}
	}
	b, err := IfNameBytes("brd1")
	if err != nil || len(b) != IfNameSize || string(b[:4]) != "brd1" || b[4] != 0 || b[15] != 0 {
		t.Errorf("IfNameBytes = %q, %v", b, err)
	}
	if n, err := TapName("0123456789ab"); err != nil || n != "brd0123456789ab" || ValidateIfName(n) != nil {
		t.Errorf("TapName(12 bytes) = %q, %v", n, err)
	}
	for _, bad := range []string{"", "0123456789abc", "A1", "a-1", "a_1", "a/1", "é"} {
		if _, err := TapName(bad); !errors.Is(err, ErrBadSession) {
			t.Errorf("TapName(%q) = %v", bad, err)
		}
	}
}

// TestIfNameExact: a session's traffic is dispatched by map elements keyed by the full
// 16-byte tap name, so brd1 does not match brd12; only the base chains' catch-all drops use
// the "brd" prefix.
func TestIfNameExact(t *testing.T) {
	rs, err := SessionRuleset(goldenSession())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Elements) != 3 { // fwd_taps, in_taps, nat_taps (the golden session is gated)
		t.Fatalf("map elements: %v", rs.Elements)
	}
	for _, m := range rs.Elements {
		for _, e := range m.Elements {
			if string(e.Key) != "brdt1"+strings.Repeat("\x00", 11) || e.VerdictData == nil || e.VerdictData.Kind != expr.VerdictJump {
				t.Errorf("map %s element %q -> %v", m.Set.Name, e.Key, e.VerdictData)
			}
		}
	}
	for _, r := range rs.Rules {
		for _, e := range r.Exprs {
			if m, ok := e.(*expr.Meta); ok && (m.Key == expr.MetaKeyIIFNAME || m.Key == expr.MetaKeyOIFNAME) {
				t.Errorf("session rule matches an interface itself: %v", r.Exprs)
			}
		}
	}
	for _, r := range BaseRuleset().Rules {
		if m, ok := r.Exprs[0].(*expr.Meta); ok && m.Key == expr.MetaKeyNFPROTO {
			continue // the held-uplink drops: a family, then a set of uplinks
		}
		if c, ok := r.Exprs[1].(*expr.Cmp); ok && string(c.Data) != TapPrefix {
			t.Errorf("base rule compares interface %q", c.Data)
		}
	}
}

func TestSessionRulesetVariants(t *testing.T) {
	if _, err := SessionRuleset(Session{ID: "x1"}); !errors.Is(err, ErrBadSession) {
		t.Errorf("no proxy: %v", err)
	}
	if _, err := SessionRuleset(Session{ID: "x1", ProxyV4: netip.MustParseAddr("fd00::1")}); !errors.Is(err, ErrBadSession) {
		t.Errorf("v6 proxy as v4: %v", err)
	}
	if _, err := SessionRuleset(Session{ID: "x1", ProxyV6: netip.MustParseAddr("::ffff:10.0.0.1")}); !errors.Is(err, ErrBadSession) {
		t.Errorf("mapped v6 proxy: %v", err)
	}

	// Pinned traffic is matched by address . protocol . port in the session's sets.
	rs, err := SessionRuleset(Session{ID: "x1", ProxyV4: netip.MustParseAddr("10.99.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	var setLookups int
	for _, r := range rs.Rules {
		for _, e := range r.Exprs {
			if l, ok := e.(*expr.Lookup); ok && strings.HasPrefix(l.SetName, "sx1_") {
				setLookups++
			}
		}
	}
	if setLookups != 2 {
		t.Errorf("%d lookups of the session sets, want 2 (IPv4, IPv6)", setLookups)
	}
	if k := PinKey(netip.MustParseAddr("192.0.2.7"), netpolicy.Port{Proto: netpolicy.UDP, Num: 443}); string(k) != "\xc0\x00\x02\x07\x11\x00\x00\x00\x01\xbb\x00\x00" {
		t.Errorf("PinKey = %x", k)
	}

	// AnyPort: one unconditional accept after the refused ranges, no set lookups.
	rs, err = SessionRuleset(Session{ID: "x1", ProxyV4: netip.MustParseAddr("10.99.0.1"), AnyPort: true})
	if err != nil {
		t.Fatal(err)
	}
	refusedSeen := false
	for _, r := range rs.Rules {
		for _, e := range r.Exprs {
			if l, ok := e.(*expr.Lookup); ok && l.SetName == RefusedV6Name {
				refusedSeen = true
			}
		}
		if len(r.Exprs) == 1 {
			if v, ok := r.Exprs[0].(*expr.Verdict); ok && v.Kind == expr.VerdictAccept && !refusedSeen {
				t.Error("permissive accept comes before the refused ranges")
			}
		}
	}
}

// TestSourceCheckFirst: the first two rules of both session chains drop IPv4 and IPv6
// packets whose source is not the guest's own; guest addresses of the wrong kind are
// refused; a session without IPv6 addresses drops all IPv6 from its tap.
func TestSourceCheckFirst(t *testing.T) {
	rs, err := SessionRuleset(goldenSession())
	if err != nil {
		t.Fatal(err)
	}
	fwd, in := ChainNames("t1")
	for _, chain := range []string{fwd, in} {
		var rules [][]expr.Any
		for _, r := range rs.Rules {
			if r.Chain.Name == chain {
				rules = append(rules, r.Exprs)
			}
		}
		for i, off := range []uint32{12, 8} {
			r := rules[i]
			p, ok := r[2].(*expr.Payload)
			v, vok := r[len(r)-1].(*expr.Verdict)
			if !ok || p.Offset != off || !vok || v.Kind != expr.VerdictDrop {
				t.Errorf("%s rule %d = %v; want the source check (saddr at %d, drop)", chain, i, r, off)
			}
		}
	}
	for _, s := range []Session{
		{GuestV4: netip.MustParseAddr("fd99::2")},
		{GuestV6: netip.MustParseAddr("10.99.0.2")},
		{GuestV6: netip.MustParseAddr("fe80::1")},
		{GuestLL: netip.MustParseAddr("fd99::2")},
		{GuestLL: netip.MustParseAddr("fe80::1%eth0")},
		{GuestV6: netip.MustParseAddr("::ffff:10.99.0.2")},
	} {
		s.ID, s.ProxyV4 = "x1", netip.MustParseAddr("10.99.0.1")
		if _, err := SessionRuleset(s); !errors.Is(err, ErrBadSession) {
			t.Errorf("guest addresses %v %v %v: %v, want ErrBadSession", s.GuestV4, s.GuestV6, s.GuestLL, err)
		}
	}
	rs, err = SessionRuleset(Session{ID: "x1", ProxyV4: netip.MustParseAddr("10.99.0.1"), GuestV4: netip.MustParseAddr("10.99.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	if r := rs.Rules[1].Exprs; len(r) != 4 {
		t.Errorf("IPv6 rule without guest IPv6 addresses = %v; want nfproto ipv6 counter drop", r)
	}
}

// TestDisjoint: nested prefixes collapse to the outer one, in address order.
func TestDisjoint(t *testing.T) {
	in := []netip.Prefix{netip.MustParsePrefix("44.1.2.128/25"), netip.MustParsePrefix("10.1.0.0/16"),
		netip.MustParsePrefix("44.1.2.0/24"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("44.1.3.0/24")}
	got := disjoint(in)
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("44.1.2.0/24"), netip.MustParsePrefix("44.1.3.0/24")}
	if !slices.Equal(got, want) {
		t.Errorf("disjoint = %v, want %v", got, want)
	}
}
