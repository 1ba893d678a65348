//go:build linux

package nftrules

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy"
)

// spoofPatience bounds each wait for a datagram or a counter; reaching it fails the test
// (it never decides a pass).
const spoofPatience = 10 * time.Second

// sysctl writes value to /proc/sys/<key> inside netns ns.
func sysctl(t *testing.T, ns, key, value string) {
	t.Helper()
	if err := testenv.InNetns(ns, func() error { return os.WriteFile("/proc/sys/"+key, []byte(value), 0o644) }); err != nil {
		t.Fatalf("sysctl %s=%s in %s: %v", key, value, ns, err)
	}
}

// spoofBed builds the test bed of TestSpoofedSourceDropped and returns the host netns,
// its NFT, the guest netns and the internet netns:
//
//	guest eth0 52:54:00:62:72:64, 10.99.0.2/30, fd99::2/126, fe80::5054:ff:fe62:7264
//	  (+ spoofable 10.99.0.6, fd99::6, fe80::bad) ──veth── brdt1 10.99.0.1, fd99::1 (host,
//	  session t1, forwarding on, rp_filter off) ── up0 ──veth── internet 192.0.2.10, 2001:db8::10
//
// The guest has permanent neighbour entries for the host, and the host for the internet,
// so no neighbour discovery (which the session chains filter too) decides what is sent.
func spoofBed(t *testing.T) (host string, n *NFT, guest, inet string) {
	host, n = testNetns(t)
	guest, inet = testenv.NewNetns(t, "g"), testenv.NewNetns(t, "i")
	hostMAC := "02:00:00:00:00:01"
	testenv.IP(t, "link", "add", "brdt1", "address", hostMAC, "netns", host, "type", "veth",
		"peer", "name", "eth0", "address", "52:54:00:62:72:64", "netns", guest)
	inetMAC := "02:00:00:00:00:02"
	testenv.IP(t, "link", "add", "up0", "netns", host, "type", "veth", "peer", "name", "up0", "address", inetMAC, "netns", inet)
	for _, key := range []string{"all", "default", "brdt1"} {
		sysctl(t, host, "net/ipv4/conf/"+key+"/rp_filter", "0")
	}
	sysctl(t, host, "net/ipv4/conf/all/forwarding", "1")
	sysctl(t, host, "net/ipv6/conf/all/forwarding", "1")
	// The guest's link-local address is added here rather than by the kernel when the link
	// comes up (asynchronously): the kernel would derive the same EUI-64 address.
	sysctl(t, guest, "net/ipv6/conf/eth0/addr_gen_mode", "1")
	for _, c := range [][]string{
		{"-n", host, "addr", "add", "10.99.0.1/30", "dev", "brdt1"},
		{"-n", host, "-6", "addr", "add", "fd99::1/126", "dev", "brdt1", "nodad"},
		{"-n", host, "addr", "add", "172.31.255.1/30", "dev", "up0"},
		{"-n", host, "-6", "addr", "add", "fd21::1/126", "dev", "up0", "nodad"},
		{"-n", host, "link", "set", "brdt1", "up"}, {"-n", host, "link", "set", "up0", "up"},
		{"-n", host, "neigh", "replace", "172.31.255.2", "lladdr", inetMAC, "dev", "up0", "nud", "permanent"},
		{"-n", host, "neigh", "replace", "fd21::2", "lladdr", inetMAC, "dev", "up0", "nud", "permanent"},
		{"-n", host, "route", "add", "192.0.2.10/32", "via", "172.31.255.2"},
		{"-n", host, "-6", "route", "add", "2001:db8::10/128", "via", "fd21::2"},
		{"-n", inet, "addr", "add", "172.31.255.2/30", "dev", "up0"},
		{"-n", inet, "-6", "addr", "add", "fd21::2/126", "dev", "up0", "nodad"},
		{"-n", inet, "addr", "add", "192.0.2.10/32", "dev", "lo"},
		{"-n", inet, "-6", "addr", "add", "2001:db8::10/128", "dev", "lo"},
		{"-n", inet, "link", "set", "up0", "up"}, {"-n", inet, "link", "set", "lo", "up"},
		{"-n", inet, "route", "add", "10.99.0.0/24", "via", "172.31.255.1"},
		{"-n", inet, "-6", "route", "add", "fd99::/64", "via", "fd21::1"},
		{"-n", guest, "addr", "add", "10.99.0.2/30", "dev", "eth0"},
		{"-n", guest, "addr", "add", "10.99.0.6/32", "dev", "eth0"},
		{"-n", guest, "-6", "addr", "add", "fd99::2/126", "dev", "eth0", "nodad"},
		{"-n", guest, "-6", "addr", "add", "fd99::6/128", "dev", "eth0", "nodad"},
		{"-n", guest, "-6", "addr", "add", "fe80::5054:ff:fe62:7264/64", "dev", "eth0", "nodad"},
		{"-n", guest, "-6", "addr", "add", "fe80::bad/64", "dev", "eth0", "nodad"},
		{"-n", guest, "link", "set", "eth0", "up"},
		{"-n", guest, "neigh", "replace", "10.99.0.1", "lladdr", hostMAC, "dev", "eth0", "nud", "permanent"},
		{"-n", guest, "neigh", "replace", "fd99::1", "lladdr", hostMAC, "dev", "eth0", "nud", "permanent"},
		{"-n", guest, "route", "add", "default", "via", "10.99.0.1"},
		{"-n", guest, "-6", "route", "add", "default", "via", "fd99::1"},
	} {
		testenv.IP(t, c...)
	}
	return host, n, guest, inet
}

// listenUDP opens a UDP socket on ap inside netns ns, closed when t ends.
func listenUDP(t *testing.T, ns string, ap netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	if err := testenv.InNetns(ns, func() (err error) { c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap)); return err }); err != nil {
		t.Fatalf("listen on udp %s in %s: %v", ap, ns, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sendFrom sends one datagram from src (bound, zone eth0 for a link-local) to dst inside
// netns ns.
func sendFrom(t *testing.T, ns string, src netip.Addr, dst netip.AddrPort, payload string) {
	t.Helper()
	laddr := &net.UDPAddr{IP: src.AsSlice()}
	if src.IsLinkLocalUnicast() {
		laddr.Zone = "eth0"
	}
	err := testenv.InNetns(ns, func() error {
		c, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(dst))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte(payload))
		return err
	})
	if err != nil {
		t.Fatalf("send from %v to %v in %s: %v", src, dst, ns, err)
	}
}

// sourceDrops returns the packet counts of chain's first two rules (the IPv4 and IPv6
// source checks) as the kernel reports them.
func sourceDrops(t *testing.T, n *NFT, chain string) (v4, v6 uint64) {
	t.Helper()
	n.mu.Lock()
	rules, err := n.conn.GetRules(Table(), &nftables.Chain{Table: Table(), Name: chain})
	n.mu.Unlock()
	if err != nil || len(rules) < 2 {
		t.Fatalf("list rules of %s: %d rules, %v", chain, len(rules), err)
	}
	count := func(i int) uint64 {
		for _, e := range rules[i].Exprs {
			if c, ok := e.(*expr.Counter); ok {
				return c.Packets
			}
		}
		t.Fatalf("rule %d of %s has no counter", i, chain)
		return 0
	}
	return count(0), count(1)
}

// TestSpoofedSourceDropped: a guest that sends with another guest's address (IPv4 and
// IPv6) or another link-local address is dropped by the first rule of its session's
// chains, through the host (input) and through the host (forward); its own addresses pass.
func TestSpoofedSourceDropped(t *testing.T) {
	host, n, guest, inet := spoofBed(t)
	if err := n.EnsureTable(); err != nil {
		t.Fatal(err)
	}
	s := goldenSession()
	if err := n.AddSession(s); err != nil {
		t.Fatal(err)
	}
	udp8443 := []netpolicy.Port{{Proto: netpolicy.UDP, Num: 8443}} // not QUICPort, which a gated session rejects
	if err := n.Pin(s.ID, []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")}, udp8443, time.Hour); err != nil {
		t.Fatal(err)
	}
	fwd, in := ChainNames(s.ID)
	for _, c := range []struct {
		ns, chain     string
		dst           netip.AddrPort
		real, spoofed netip.Addr
		v6            bool
	}{
		{host, in, netip.MustParseAddrPort("10.99.0.1:53"), s.GuestV4, netip.MustParseAddr("10.99.0.6"), false},
		{host, in, netip.MustParseAddrPort("[fd99::1]:53"), s.GuestV6, netip.MustParseAddr("fd99::6"), true},
		{host, in, netip.MustParseAddrPort("[fd99::1]:53"), s.GuestLL, netip.MustParseAddr("fe80::bad"), true},
		{inet, fwd, netip.MustParseAddrPort("192.0.2.10:8443"), s.GuestV4, netip.MustParseAddr("10.99.0.6"), false},
		{inet, fwd, netip.MustParseAddrPort("[2001:db8::10]:8443"), s.GuestV6, netip.MustParseAddr("fd99::6"), true},
	} {
		t.Run(fmt.Sprintf("%s from %v", c.chain, c.spoofed), func(t *testing.T) {
			l := listenUDP(t, c.ns, c.dst)
			b4, b6 := sourceDrops(t, n, c.chain)
			before := map[bool]uint64{false: b4, true: b6}[c.v6]
			sendFrom(t, guest, c.spoofed, c.dst, "spoofed")
			for deadline := time.Now().Add(spoofPatience); ; {
				a4, a6 := sourceDrops(t, n, c.chain)
				if map[bool]uint64{false: a4, true: a6}[c.v6] == before+1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the spoofed datagram from %v was not counted by the source check of %s", c.spoofed, c.chain)
				}
			}
			sendFrom(t, guest, c.real, c.dst, "real")
			l.SetReadDeadline(time.Now().Add(spoofPatience))
			buf := make([]byte, 64)
			m, from, err := l.ReadFromUDPAddrPort(buf)
			if err != nil {
				t.Fatalf("the real source %v did not pass to %v: %v", c.real, c.dst, err)
			}
			if got := from.Addr().WithZone(""); string(buf[:m]) != "real" || got != c.real {
				t.Errorf("first datagram at %v: %q from %v; want \"real\" from %v", c.dst, buf[:m], got, c.real)
			}
			if a4, a6 := sourceDrops(t, n, c.chain); map[bool]uint64{false: a4, true: a6}[c.v6] != before+1 {
				t.Errorf("the real source was counted as spoofed")
			}
		})
	}
}
