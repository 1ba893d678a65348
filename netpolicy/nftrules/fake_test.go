package nftrules

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"brood.dev/brood/netpolicy"
)

func TestFake(t *testing.T) {
	var f Fake
	s := goldenSession()
	if err := f.AddSession(s); err == nil {
		t.Error("AddSession without the table succeeded")
	}
	if err := f.EnsureTable(); err != nil {
		t.Fatal(err)
	}
	if err := f.AddSession(s); err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr("192.0.2.1")
	if err := f.Pin(s.ID, []netip.Addr{a}, tcp443, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d, ok := f.Pinned(s.ID, a, tcp443[0]); !ok || d != time.Minute {
		t.Errorf("Pinned = %v, %v", d, ok)
	}
	if _, ok := f.Pinned(s.ID, a, netpolicy.Port{Proto: netpolicy.TCP, Num: 22}); ok {
		t.Error("pinned on a port not asked for")
	}
	if err := f.Pin(s.ID, []netip.Addr{netip.MustParseAddr("10.0.0.1")}, tcp443, time.Minute); !errors.Is(err, ErrBadElement) {
		t.Errorf("refused pin: %v", err)
	}
	if err := f.DeleteSession(s.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Pinned(s.ID, a, tcp443[0]); ok || len(f.Sessions()) != 0 {
		t.Error("pins survive DeleteSession")
	}
}
