//go:build linux

package nftrules

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/netpolicy"
)

// pinExpiry reads the pin addr . 443/tcp of session id back through nftables and returns
// its timeout and the time left before it expires, as the kernel reports them.
func pinExpiry(t *testing.T, n *NFT, id string, addr netip.Addr) (timeout, expires time.Duration) {
	t.Helper()
	v4, v6 := SessionSets(id)
	set := v4
	if addr.Is6() {
		set = v6
	}
	n.mu.Lock()
	els, err := n.conn.GetSetElements(set)
	n.mu.Unlock()
	if err != nil {
		t.Fatalf("list %s: %v", set.Name, err)
	}
	key := string(PinKey(addr, netpolicy.Port{Proto: netpolicy.TCP, Num: 443}))
	for _, e := range els {
		if string(e.Key) == key {
			return e.Timeout, e.Expires
		}
	}
	t.Fatalf("%v . tcp . 443 not in %s", addr, set.Name)
	return 0, 0
}

// TestRepinRefreshesExpiry: a name answered again pins its addresses again with the same
// timeout; the kernel's element must then expire a full timeout after the second answer,
// not keep what was left of the first. The test waits (polling the kernel's own expiry,
// no sleep) until the element has aged by at least 50 ms, re-pins with the same timeout,
// and requires the expiry the kernel reports to have grown back above its aged value.
func TestRepinRefreshesExpiry(t *testing.T) {
	_, n := testNetns(t)
	if err := n.EnsureTable(); err != nil {
		t.Fatal(err)
	}
	s := goldenSession()
	if err := n.AddSession(s); err != nil {
		t.Fatal(err)
	}
	const timeout = time.Hour
	const age = 50 * time.Millisecond
	for _, addr := range []netip.Addr{netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("2001:db8::9")} {
		if err := n.Pin(s.ID, []netip.Addr{addr}, tcp443, timeout); err != nil {
			t.Fatal(err)
		}
		var aged time.Duration
		for {
			to, exp := pinExpiry(t, n, s.ID, addr)
			if to != timeout {
				t.Fatalf("%v: timeout %v, want %v", addr, to, timeout)
			}
			if exp <= timeout-age {
				aged = exp
				break
			}
		}
		start := time.Now()
		if err := n.Pin(s.ID, []netip.Addr{addr}, tcp443, timeout); err != nil {
			t.Fatal(err)
		}
		t.Logf("%v: re-pin took %v", addr, time.Since(start))
		to, exp := pinExpiry(t, n, s.ID, addr)
		if to != timeout || exp <= aged || exp > timeout {
			t.Errorf("%v after the second answer: timeout %v, expires in %v; want %v and an expiry above the aged %v (refreshed)",
				addr, to, exp, timeout, aged)
		}
	}
}

// TestSessionRefusedSets: a session's own refused prefixes (nested and adjacent ones
// included) are accepted by the kernel as interval sets and go with the session.
func TestSessionRefusedSets(t *testing.T) {
	ns, n := testNetns(t)
	if err := n.EnsureTable(); err != nil {
		t.Fatal(err)
	}
	s := goldenSession()
	s.AnyPort = true
	for _, p := range []string{"44.1.2.128/25", "44.1.2.0/24", "44.1.3.0/24", "45.0.0.0/16", "2a01:4f8:1::/64", "2a01:4f8::/32"} {
		s.Refused = append(s.Refused, netip.MustParsePrefix(p))
	}
	if err := n.AddSession(s); err != nil {
		t.Fatal(err)
	}
	r4, r6 := RefusedSetNames(s.ID)
	list := nsRun(t, ns, "nft", "list", "ruleset")
	for _, want := range []string{"44.1.2.0/24, 44.1.3.0/24", "45.0.0.0/16", "2a01:4f8::/32", "ip daddr @" + r4 + " counter", "ip6 daddr @" + r6 + " counter"} {
		if !strings.Contains(list, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, list)
		}
	}
	if err := n.DeleteSession(s.ID); err != nil {
		t.Fatal(err)
	}
	if list := nsRun(t, ns, "nft", "list", "ruleset"); strings.Contains(list, r4) || strings.Contains(list, r6) {
		t.Errorf("refused sets left after DeleteSession:\n%s", list)
	}
}
