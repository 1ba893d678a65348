//go:build linux

package nftrules

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy"
)

// TestQUICRejected: a gated (locked or standard) session's UDP 443 is rejected with ICMP
// port unreachable in both families, even to an address pinned on 443/udp, so a QUIC
// client gets ECONNREFUSED at once and falls back to TCP; a permissive session's passes.
func TestQUICRejected(t *testing.T) {
	_, n, guest, inet := spoofBed(t)
	if err := n.EnsureTable(); err != nil {
		t.Fatal(err)
	}
	dsts := []netip.AddrPort{netip.MustParseAddrPort("192.0.2.10:443"), netip.MustParseAddrPort("[2001:db8::10]:443")}
	var ls []*net.UDPConn
	for _, d := range dsts {
		ls = append(ls, listenUDP(t, inet, d))
	}
	quic := []netpolicy.Port{{Proto: netpolicy.UDP, Num: 443}}
	for _, permissive := range []bool{false, true} {
		s := goldenSession()
		s.AnyPort = permissive
		if err := n.AddSession(s); err != nil {
			t.Fatal(err)
		}
		if err := n.Pin(s.ID, []netip.Addr{dsts[0].Addr(), dsts[1].Addr()}, quic, time.Hour); err != nil {
			t.Fatal(err)
		}
		for i, d := range dsts {
			src := map[bool]netip.Addr{true: s.GuestV4, false: s.GuestV6}[d.Addr().Is4()] // not the spoofable extra addresses
			err := testenv.InNetns(guest, func() error {
				c, err := net.DialUDP("udp", &net.UDPAddr{IP: src.AsSlice()}, net.UDPAddrFromAddrPort(d))
				if err != nil {
					return err
				}
				defer c.Close()
				if _, err := c.Write([]byte("quic initial")); err != nil || permissive {
					return err // permissive: the server's side is checked below
				}
				c.SetReadDeadline(time.Now().Add(spoofPatience))
				_, err = c.Read(make([]byte, 16))
				return err
			})
			if !permissive {
				if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("gated session: UDP to %v: %v, want ECONNREFUSED (ICMP port unreachable)", d, err)
				}
				continue
			}
			// Permissive: the datagram reaches the server (which does not answer).
			ls[i].SetReadDeadline(time.Now().Add(spoofPatience))
			buf := make([]byte, 64)
			if m, _, rerr := ls[i].ReadFromUDPAddrPort(buf); rerr != nil || string(buf[:m]) != "quic initial" {
				t.Errorf("permissive session: UDP to %v not received: %q, %v (client: %v)", d, buf[:m], rerr, err)
			}
		}
		if err := n.DeleteSession(s.ID); err != nil {
			t.Fatal(err)
		}
	}
}
