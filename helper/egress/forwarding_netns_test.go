package egress

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy/nftrules"
)

// forwardingNetnsEnv carries "host,lan,other,guest" netns names to the re-executed test
// binary that plays the helper inside "host".
const forwardingNetnsEnv = "BROOD_FORWARDING_NETNS"

// TestUplinkForwardingRestored: a session switches its uplink's forwarding on; while it
// runs, what the LAN sends through the host to another host network is dropped; when the
// last session ends (and with RestoreForwarding, as `--cleanup` runs it, after a helper
// that died) the uplink's IPv4 forwarding and IPv6 force_forwarding are what they were.
// An uplink that forwarded before (a router) is left forwarding and not held. Topology
// (nothing leaves these namespaces):
//
//	lan 172.31.254.2, fd31::2 ──veth── up0 (host; default route) 172.31.254.1, fd31::1
//	host other0 10.77.0.1, fd77::1 ──veth── other 10.77.0.2, fd77::2 (a container bridge, a VPN)
//	guest eth0 ──veth── brd<id> (the session's tap)
func TestUplinkForwardingRestored(t *testing.T) {
	if v := os.Getenv(forwardingNetnsEnv); v != "" {
		forwardingScenario(t, strings.Split(v, ","))
		return
	}
	names := bedNetns(t, "h", "l", "o", "g")
	host, lan, other := names[0], names[1], names[2]
	bedVeth(t, "up0", host, lan)
	bedVeth(t, "other0", host, other)
	ipAll(t, [][]string{
		{"-n", host, "addr", "add", "172.31.254.1/24", "dev", "up0"},
		{"-n", host, "-6", "addr", "add", "fd31::1/64", "dev", "up0", "nodad"},
		{"-n", host, "addr", "add", "10.77.0.1/24", "dev", "other0"},
		{"-n", host, "-6", "addr", "add", "fd77::1/64", "dev", "other0", "nodad"},
		{"-n", host, "link", "set", "up0", "up"}, {"-n", host, "link", "set", "other0", "up"},
		{"-n", host, "route", "add", "default", "via", "172.31.254.2"},
		{"-n", host, "-6", "route", "add", "default", "via", "fd31::2"},
		{"-n", lan, "addr", "add", "172.31.254.2/24", "dev", "up0"},
		{"-n", lan, "-6", "addr", "add", "fd31::2/64", "dev", "up0", "nodad"},
		{"-n", lan, "link", "set", "up0", "up"},
		{"-n", lan, "route", "add", "10.77.0.0/24", "via", "172.31.254.1"},
		{"-n", lan, "-6", "route", "add", "fd77::/64", "via", "fd31::1"},
		{"-n", other, "addr", "add", "10.77.0.2/24", "dev", "other0"},
		{"-n", other, "-6", "addr", "add", "fd77::2/64", "dev", "other0", "nodad"},
		{"-n", other, "link", "set", "other0", "up"},
		{"-n", other, "route", "add", "default", "via", "10.77.0.1"},
		{"-n", other, "-6", "route", "add", "default", "via", "fd77::1"},
	})
	runInHost(t, "TestUplinkForwardingRestored", forwardingNetnsEnv, names)
}

// readSysctl returns /proc/sys/<key> of this process's netns, trimmed.
func readSysctl(t *testing.T, key string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + key)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func writeSysctl(t *testing.T, key, v string) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/"+key, []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
}

// upForwarding returns up0's IPv4 forwarding and IPv6 force_forwarding.
func upForwarding(t *testing.T) string {
	return readSysctl(t, "net/ipv4/conf/up0/forwarding") + "," + readSysctl(t, "net/ipv6/conf/up0/force_forwarding")
}

// heldDrops returns the packet counters of tap_forward's two held-uplink rules.
func heldDrops(t *testing.T, fw *nftrules.NFT, conn *nftables.Conn) (v4, v6 uint64) {
	t.Helper()
	rules, err := conn.GetRules(nftrules.Table(), &nftables.Chain{Table: nftrules.Table(), Name: nftrules.FwdChainName})
	if err != nil {
		t.Fatal(err)
	}
	var counts []uint64
	for _, r := range rules {
		held := false
		for _, e := range r.Exprs {
			if l, ok := e.(*expr.Lookup); ok && (l.SetName == nftrules.HeldV4Name || l.SetName == nftrules.HeldV6Name) {
				held = true
			}
			if c, ok := e.(*expr.Counter); ok && held {
				counts = append(counts, c.Packets)
			}
		}
	}
	if len(counts) != 2 {
		t.Fatalf("%d held-uplink rules with counters in %s, want 2", len(counts), nftrules.FwdChainName)
	}
	return counts[0], counts[1]
}

// sendUDPIn sends one datagram to dst from netns ns.
func sendUDPIn(t *testing.T, ns, dst string) {
	t.Helper()
	if err := testenv.InNetns(ns, func() error {
		c, err := net.Dial("udp", dst)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("from the LAN"))
		return err
	}); err != nil {
		t.Fatalf("send to %s from %s: %v", dst, ns, err)
	}
}

func forwardingScenario(t *testing.T, names []string) {
	lan, guest := names[1], names[3]                                                                       // names[2] is the other network, only routed to
	b := newBed(t, bedOpts{upstream: "172.31.254.2:53", guests: []string{guest, guest, guest}, ipv6: true, // the upstream is never asked
		policy: "[[host]]\nname = \"ok.pkg.test\"\n"})
	e, links, fw, v6, logDir := b.e, b.links, b.fw, b.v6, b.logDir
	conn, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"net/ipv4/conf/up0/forwarding", "net/ipv6/conf/up0/force_forwarding"} {
		writeSysctl(t, k, "0")
	}
	record := filepath.Join(logDir, ForwardingRecord)

	start := func(id string) {
		t.Helper()
		if _, err := e.Start(api.StartVMArgs{ID: id, Egress: "locked"}, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		if got := upForwarding(t); got != "1,1" {
			t.Fatalf("up0 forwarding during the session = %s, want 1,1", got)
		}
	}
	t.Run("forwarded LAN traffic to other networks is dropped", func(t *testing.T) {
		start("fwd00001")
		if _, err := os.Stat(record); err != nil {
			t.Errorf("no forwarding record while held: %v", err)
		}
		b4, b6 := heldDrops(t, fw, conn)
		sendUDPIn(t, lan, "10.77.0.2:9")
		sendUDPIn(t, lan, "[fd77::2]:9")
		for deadline := time.Now().Add(10 * time.Second); ; {
			a4, a6 := heldDrops(t, fw, conn)
			if a4 == b4+1 && a6 == b6+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("held drops %d,%d -> %d,%d; want one more of each", b4, b6, a4, a6)
			}
			time.Sleep(10 * time.Millisecond) // poll interval; the deadline decides failure
		}
		if _, err := e.Stop("fwd00001"); err != nil {
			t.Fatal(err)
		}
		if got := upForwarding(t); got != "0,0" {
			t.Errorf("up0 forwarding after the last session = %s, want 0,0 (as before)", got)
		}
		if _, err := os.Stat(record); !os.IsNotExist(err) {
			t.Errorf("forwarding record left after restoring: %v", err)
		}
	})
	t.Run("a helper that died is undone by RestoreForwarding", func(t *testing.T) {
		start("fwd00002")
		// A new helper (or --cleanup) finds the record the dead one left.
		restored, err := RestoreForwarding(logDir, links, v6)
		if err != nil || len(restored) != 1 || restored[0] != "up0" {
			t.Fatalf("RestoreForwarding = %v, %v; want [up0]", restored, err)
		}
		if got := upForwarding(t); got != "0,0" {
			t.Errorf("up0 forwarding after RestoreForwarding = %s, want 0,0", got)
		}
		e.Stop("fwd00002")
	})
	t.Run("an uplink that forwarded before is left forwarding", func(t *testing.T) {
		writeSysctl(t, "net/ipv4/conf/up0/forwarding", "1")
		start("fwd00003")
		held4, _ := heldList(t, conn)
		if len(held4) != 0 {
			t.Errorf("held_v4 = %q, want empty (up0 forwarded before brood)", held4)
		}
		e.Stop("fwd00003")
		if got := upForwarding(t); got != "1,0" {
			t.Errorf("up0 forwarding after the session = %s, want 1,0 (as before)", got)
		}
	})
}

// heldList returns the elements of held_v4 and held_v6 as interface names.
func heldList(t *testing.T, conn *nftables.Conn) (v4, v6 []string) {
	t.Helper()
	for i, name := range []string{nftrules.HeldV4Name, nftrules.HeldV6Name} {
		els, err := conn.GetSetElements(&nftables.Set{Table: nftrules.Table(), Name: name, KeyType: nftables.TypeIFName})
		if err != nil {
			t.Fatal(err)
		}
		for _, el := range els {
			n := strings.TrimRight(string(el.Key), "\x00")
			if i == 0 {
				v4 = append(v4, n)
			} else {
				v6 = append(v6, n)
			}
		}
	}
	return v4, v6
}
