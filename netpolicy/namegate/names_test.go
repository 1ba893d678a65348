package namegate

import (
	"net/netip"
	"testing"
	"time"

	"brood.dev/brood/netpolicy"
)

func TestNames(t *testing.T) {
	now := time.Unix(1000, 0)
	n := &Names{Now: func() time.Time { return now }}
	a, b := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.20")
	https := []netpolicy.Port{{Proto: netpolicy.TCP, Num: 443}}
	n.Add("Ok.Test.", []netip.Addr{a}, https, 30*time.Second)
	check := func(name string, dst netip.AddrPort, want bool) {
		t.Helper()
		if ok, why := n.Admits(name, dst); ok != want {
			t.Errorf("Admits(%s, %v) = %v (%s), want %v", name, dst, ok, why, want)
		}
	}
	check("ok.test", netip.AddrPortFrom(a, 443), true)
	check("OK.TEST.", netip.AddrPortFrom(a, 443), true)
	check("ok.test", netip.AddrPortFrom(b, 443), false)   // another address
	check("ok.test", netip.AddrPortFrom(a, 80), false)    // a port the entry does not allow
	check("evil.test", netip.AddrPortFrom(a, 443), false) // another name, same address
	now = now.Add(29 * time.Second)
	check("ok.test", netip.AddrPortFrom(a, 443), true)
	// A repeated answer sets the expiry again.
	n.Add("ok.test", []netip.Addr{a}, https, 30*time.Second)
	now = now.Add(29 * time.Second)
	check("ok.test", netip.AddrPortFrom(a, 443), true)
	now = now.Add(time.Second)
	check("ok.test", netip.AddrPortFrom(a, 443), false) // expired
	// IPv4-mapped destinations are the IPv4 address.
	n.Add("ok.test", []netip.Addr{a}, https, time.Minute)
	check("ok.test", netip.AddrPortFrom(netip.AddrFrom16(a.As16()), 443), true)
}

func TestNamesBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	n := &Names{Now: func() time.Time { return now }}
	https := []netpolicy.Port{{Proto: netpolicy.TCP, Num: 443}}
	a := netip.MustParseAddr("192.0.2.10")
	for i := range MaxNames + 10 {
		n.Add(string(rune('a'+i%26))+netip.AddrFrom4([4]byte{byte(i >> 16), byte(i >> 8), byte(i), 1}).String()+".test", []netip.Addr{a}, https, time.Minute)
	}
	if n.Len() != MaxNames {
		t.Fatalf("Len = %d, want the bound %d", n.Len(), MaxNames)
	}
	// Full of live entries: a new name is not recorded (the gate fails closed for it).
	n.Add("late.test", []netip.Addr{a}, https, time.Minute)
	if ok, _ := n.Admits("late.test", netip.AddrPortFrom(a, 443)); ok {
		t.Error("an entry past the bound was admitted")
	}
	// Once they expired, they make room.
	now = now.Add(2 * time.Minute)
	n.Add("late.test", []netip.Addr{a}, https, time.Minute)
	if ok, why := n.Admits("late.test", netip.AddrPortFrom(a, 443)); !ok || n.Len() != 1 {
		t.Errorf("after expiry: %v (%s), Len %d", ok, why, n.Len())
	}
}
