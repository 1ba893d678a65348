//go:build linux

package nftrules

import (
	"net/netip"
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
