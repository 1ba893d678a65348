package egress

import (
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy/nftrules"
)

// permissiveNetnsEnv carries "host,lan,guest" netns names to the re-executed test binary
// that plays the helper inside "host".
const permissiveNetnsEnv = "BROOD_PERMISSIVE_NETNS"

// TestPermissiveRefusesHostNetworks: a permissive session reaches the internet but not the
// host's own networks when they are public addresses: the uplink's connected prefix (a
// public-looking IPv4 LAN 44.1.2.0/24 and a global IPv6 LAN 2a01:4f8:1::/64) and a network
// the host routes to (45.0.0.0/16 via the LAN), and those it joins or routes to while the
// session runs (laterNetworks). Topology (nothing leaves these namespaces;
// the addresses exist only in them):
//
//	guest eth0 ──veth── brd<id> host up0 44.1.2.1/24, 2a01:4f8:1::1/64 ──veth── lan up0 44.1.2.2, 2a01:4f8:1::2
//	lan lo: 45.0.0.1 (behind the host's route) and 192.0.2.10 (the internet, the default route)
func TestPermissiveRefusesHostNetworks(t *testing.T) {
	if v := os.Getenv(permissiveNetnsEnv); v != "" {
		permissiveScenario(t, strings.Split(v, ","))
		return
	}
	names := bedNetns(t, "h", "l", "g")
	host, lan := names[0], names[1]
	bedVeth(t, "up0", host, lan)
	ipAll(t, [][]string{
		{"-n", host, "addr", "add", "44.1.2.1/24", "dev", "up0"},
		{"-n", host, "-6", "addr", "add", "2a01:4f8:1::1/64", "dev", "up0", "nodad"},
		{"-n", host, "link", "set", "up0", "up"},
		{"-n", host, "route", "add", "default", "via", "44.1.2.2"},
		{"-n", host, "-6", "route", "add", "default", "via", "2a01:4f8:1::2"},
		{"-n", host, "route", "add", "45.0.0.0/16", "via", "44.1.2.2"},
		{"-n", lan, "addr", "add", "44.1.2.2/24", "dev", "up0"},
		{"-n", lan, "-6", "addr", "add", "2a01:4f8:1::2/64", "dev", "up0", "nodad"},
		{"-n", lan, "addr", "add", "45.0.0.1/32", "dev", "lo"},
		{"-n", lan, "addr", "add", "192.0.2.10/32", "dev", "lo"},
		{"-n", lan, "addr", "add", "46.1.1.2/24", "dev", "up0"}, // the host joins this LAN later
		{"-n", lan, "addr", "add", "47.0.0.1/32", "dev", "lo"},  // the host routes to this later
		{"-n", lan, "link", "set", "up0", "up"},
	})
	runInHost(t, "TestPermissiveRefusesHostNetworks", permissiveNetnsEnv, names)
}

func permissiveScenario(t *testing.T, names []string) {
	lan, guest := names[1], names[2]
	targets := []string{"192.0.2.10:443", "44.1.2.2:443", "45.0.0.1:443", "[2a01:4f8:1::2]:443", "46.1.1.2:443", "47.0.0.1:443"}
	acceptAndClose(t, lan, targets...)
	e := newBed(t, bedOpts{upstream: "192.0.2.10:53", guests: []string{guest}, ipv6: true}).e // the upstream is never asked
	refreshed := make(chan struct{}, 1)
	e.onRefresh = func() {
		select {
		case refreshed <- struct{}{}:
		default:
		}
	}
	s, err := e.Start(api.StartVMArgs{ID: "perm0001", Egress: "permissive"}, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	r4, r6 := refusedSetStarts(t, conn, s.id)
	t.Logf("session refuses %v %v", r4, r6)
	for _, want := range []string{"44.1.2.0", "45.0.0.0", "2a01:4f8:1::"} {
		if a := netip.MustParseAddr(want); !slices.Contains(r4, a) && !slices.Contains(r6, a) {
			t.Errorf("the session's refused sets lack %s", want)
		}
	}
	if err := connectIn(guest, targets[0], 5*time.Second); err != nil {
		t.Fatalf("permissive session cannot reach the internet stand-in: %v", err)
	}
	for _, a := range targets[1:4] {
		if err := connectIn(guest, a, 5*time.Second); err == nil {
			t.Errorf("permissive session reached the host's network at %s", a)
		}
	}
	laterNetworks(t, s.id, conn, refreshed, guest, targets[4:])
}

// laterNetworks: the host joins a LAN (46.1.1.1/24 on up0) and routes a network (47.0.0.0/16
// via the LAN) after the session started. Before, the session reaches both through the
// default route (they are public addresses); after, both are in its refused sets and
// unreachable; the LAN address going away again does not take its prefix out.
func laterNetworks(t *testing.T, id string, conn *nftables.Conn, refreshed <-chan struct{}, guest string, targets []string) {
	for _, a := range targets {
		if err := connectIn(guest, a, 5*time.Second); err != nil {
			t.Fatalf("before the host joins its network the session cannot reach %s (the test bed is broken): %v", a, err)
		}
	}
	for _, c := range [][]string{
		{"addr", "add", "46.1.1.1/24", "dev", "up0"},
		{"route", "add", "47.0.0.0/16", "via", "44.1.2.2"},
	} {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", c, err, out)
		}
	}
	waitRefused(t, conn, id, refreshed, "46.1.1.0", "47.0.0.0")
	for _, a := range targets {
		if err := connectIn(guest, a, 5*time.Second); err == nil {
			t.Errorf("permissive session reached %s after the host joined its network", a)
		}
	}
	// The address goes, then a marker route comes: once the marker is refused, a refresh
	// that saw the address gone has run.
	for _, c := range [][]string{{"addr", "del", "46.1.1.1/24", "dev", "up0"}, {"route", "add", "48.0.0.0/16", "via", "44.1.2.2"}} {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", c, err, out)
		}
	}
	waitRefused(t, conn, id, refreshed, "48.0.0.0")
	if r4, _ := refusedSetStarts(t, conn, id); !slices.Contains(r4, netip.MustParseAddr("46.1.1.0")) {
		t.Errorf("46.1.1.0/24 left the refused set when the host's address went: %v", r4)
	}
}

// waitRefused waits until session id's IPv4 refused set holds a range starting at each
// of starts, checking after each refresh.
func waitRefused(t *testing.T, conn *nftables.Conn, id string, refreshed <-chan struct{}, starts ...string) {
	t.Helper()
	guard := time.After(time.Minute) // a hang guard, not a timing assertion
	for {
		r4, _ := refusedSetStarts(t, conn, id)
		missing := slices.IndexFunc(starts, func(a string) bool { return !slices.Contains(r4, netip.MustParseAddr(a)) })
		if missing < 0 {
			return
		}
		select {
		case <-refreshed:
		case <-guard:
			t.Fatalf("the session's refused set does not gain %s: %v", starts[missing], r4)
		}
	}
}

// refusedSetStarts returns the start keys of the session's own refused sets.
func refusedSetStarts(t *testing.T, conn *nftables.Conn, id string) (v4, v6 []netip.Addr) {
	t.Helper()
	n4, n6 := nftrules.RefusedSetNames(id)
	for _, x := range []struct {
		name string
		typ  nftables.SetDatatype
		out  *[]netip.Addr
	}{{n4, nftables.TypeIPAddr, &v4}, {n6, nftables.TypeIP6Addr, &v6}} {
		els, err := conn.GetSetElements(&nftables.Set{Table: nftrules.Table(), Name: x.name, KeyType: x.typ, Interval: true})
		if err != nil {
			t.Fatalf("list %s: %v", x.name, err)
		}
		for _, el := range els {
			if a, ok := netip.AddrFromSlice(el.Key); ok && !el.IntervalEnd {
				*x.out = append(*x.out, a)
			}
		}
	}
	return v4, v6
}
