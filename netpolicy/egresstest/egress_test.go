package egresstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy"
	"brood.dev/brood/netpolicy/dnsproxy"
	"brood.dev/brood/netpolicy/nftrules"
)

// netns is a throw-away network namespace made with `ip netns add`.
type netns struct {
	name string
	fd   int
}

func newNetns(t *testing.T, role string) *netns {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	name := "brood" + role + hex.EncodeToString(b)
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	ns := &netns{name: name, fd: fd}
	ns.ip(t, "link", "set", "lo", "up")
	return ns
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (ns *netns) ip(t *testing.T, args ...string) {
	run(t, "ip", append([]string{"-n", ns.name}, args...)...)
}

func (ns *netns) exec(t *testing.T, args ...string) string {
	return run(t, "ip", append([]string{"netns", "exec", ns.name}, args...)...)
}

// do runs fn on an OS thread switched into ns; sockets fn creates stay in ns.
func (ns *netns) do(fn func() error) error {
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer unix.Close(orig)
	if err := unix.Setns(ns.fd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", ns.name, err)
	}
	ferr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns back: %w", err) // the thread stays locked and dies with the goroutine
	}
	runtime.UnlockOSThread()
	return ferr
}

// dial connects from ns; the connection's socket lives in ns.
func (ns *netns) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := ns.do(func() error {
		var err error
		c, err = net.DialTimeout(network, addr, timeout)
		return err
	})
	return c, err
}

// Timeouts: an operation expected to succeed gets patience (a loaded CI machine), one
// expected to fail gets impatience (a drop only ever times out).
const (
	patience   = 3 * time.Second
	impatience = time.Second
)

// connect reports whether a TCP connect from ns to addr succeeds within timeout.
func (ns *netns) connect(addr string, timeout time.Duration) error {
	c, err := ns.dial("tcp", addr, timeout)
	if err == nil {
		c.Close()
	}
	return err
}

// query asks server from ns over network ("udp" or "tcp") within timeout.
func (ns *netns) query(network, server, name string, qtype uint16, timeout time.Duration) (*dns.Msg, error) {
	c, err := ns.dial(network, server, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	cl := &dns.Client{Net: network, Timeout: timeout}
	r, _, err := cl.ExchangeWithConn(m, &dns.Conn{Conn: c})
	return r, err
}

// nsUpstream asks the fake upstream from the "host" netns (where the helper would run).
type nsUpstream struct {
	ns   *netns
	addr string
}

func (u nsUpstream) Exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	c, err := u.ns.dial("udp", u.addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r, _, err := (&dns.Client{Timeout: 2 * time.Second}).ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: c})
	return r, err
}

func addrs(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch r := rr.(type) {
		case *dns.A:
			out = append(out, r.A.String())
		case *dns.AAAA:
			out = append(out, r.AAAA.String())
		}
	}
	return out
}

// TestEgress is the egress acceptance test on a real kernel. Topology (all namespaces made
// here; nothing leaves them):
//
//	guest1 eth0 10.200.0.2, fd20::2  ──veth──  brdg1 10.200.0.1, fd20::1 ┐
//	guest2 eth0 10.200.0.6, fd20::6  ──veth──  brdg2 10.200.0.5, fd20::5 ├ host ── up0 ──veth── internet
//	guest3 eth0 10.200.0.10, fd20::a ──veth──  brdg3 10.200.0.9, fd20::9 │
//	                                                                      ┘ 172.31.255.1       172.31.255.2
//	internet (lo): 192.0.2.10, .20, .53, 2001:db8::10, ::20, 10.0.0.5, 100.64.0.1;
//	TCP 443, 8443, 853 on all; the fake upstream DNS on 192.0.2.53:53 (UDP, TCP) and :5353.
func TestEgress(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "ip")
	testenv.RequireCommand(t, "nft")
	host, inet := newNetns(t, "h"), newNetns(t, "i")
	guests := []*netns{newNetns(t, "g"), newNetns(t, "g"), newNetns(t, "g")}

	for i, g := range guests {
		tap := fmt.Sprintf("brdg%d", i+1)
		run(t, "ip", "link", "add", tap, "netns", host.name, "type", "veth", "peer", "name", "eth0", "netns", g.name)
		h4, g4 := fmt.Sprintf("10.200.0.%d", 4*i+1), fmt.Sprintf("10.200.0.%d", 4*i+2)
		h6, g6 := fmt.Sprintf("fd20::%x", 4*i+1), fmt.Sprintf("fd20::%x", 4*i+2)
		host.ip(t, "addr", "add", h4+"/30", "dev", tap)
		host.ip(t, "-6", "addr", "add", h6+"/126", "dev", tap, "nodad")
		host.ip(t, "link", "set", tap, "up")
		g.ip(t, "addr", "add", g4+"/30", "dev", "eth0")
		g.ip(t, "-6", "addr", "add", g6+"/126", "dev", "eth0", "nodad")
		g.ip(t, "link", "set", "eth0", "up")
		g.ip(t, "route", "add", "default", "via", h4)
		g.ip(t, "-6", "route", "add", "default", "via", h6)
	}
	run(t, "ip", "link", "add", "up0", "netns", host.name, "type", "veth", "peer", "name", "up0", "netns", inet.name)
	host.ip(t, "addr", "add", "172.31.255.1/30", "dev", "up0")
	host.ip(t, "-6", "addr", "add", "fd21::1/126", "dev", "up0", "nodad")
	host.ip(t, "link", "set", "up0", "up")
	inet.ip(t, "addr", "add", "172.31.255.2/30", "dev", "up0")
	inet.ip(t, "-6", "addr", "add", "fd21::2/126", "dev", "up0", "nodad")
	inet.ip(t, "link", "set", "up0", "up")
	for _, a := range []string{"192.0.2.10/32", "192.0.2.20/32", "192.0.2.30/32", "192.0.2.53/32", "10.0.0.5/32", "100.64.0.1/32", "169.254.169.254/32"} {
		inet.ip(t, "addr", "add", a, "dev", "lo")
		host.ip(t, "route", "add", a, "via", "172.31.255.2")
	}
	for _, a := range []string{"2001:db8::10/128", "2001:db8::20/128", "fd00::1/128", "64:ff9b::a9fe:a9fe/128"} {
		inet.ip(t, "-6", "addr", "add", a, "dev", "lo", "nodad")
		host.ip(t, "-6", "route", "add", a, "via", "fd21::2")
	}
	inet.ip(t, "route", "add", "10.200.0.0/24", "via", "172.31.255.1")
	inet.ip(t, "-6", "route", "add", "fd20::/64", "via", "fd21::1")
	// Forwarding in the throw-away "host" netns (/proc/sys/net is per netns of the writer).
	err := host.do(func() error {
		for _, f := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
			if err := os.WriteFile(f, []byte("1\n"), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The "internet": TCP servers and the fake upstream resolver.
	up, err := dnsproxy.NewFakeUpstream([]string{
		"api.allowed.test. 300 IN A 192.0.2.10",
		"api.allowed.test. 300 IN AAAA 2001:db8::10",
		"api.allowed.test. 300 IN TXT \"secret\"",
		"internal.pkg.test. 300 IN A 10.0.0.5",
		"cgnat.pkg.test. 300 IN A 100.64.0.1",
		"mapped.pkg.test. 300 IN AAAA ::ffff:192.0.2.20",
		"loop.pkg.test. 300 IN A 127.0.0.1",
		"metadata.pkg.test. 300 IN A 169.254.169.254",
		"loop6.pkg.test. 300 IN AAAA ::1",
		"ula.pkg.test. 300 IN AAAA fd00::1",
		"mappedloop.pkg.test. 300 IN AAAA ::ffff:127.0.0.1",
		"nat64.pkg.test. 300 IN AAAA 64:ff9b::a9fe:a9fe",
		"evil.attacker.test. 300 IN A 192.0.2.20",
		"git.allowed.test. 300 IN A 192.0.2.20",
		// A CDN: an allowed name whose chain runs through names no policy lists.
		"cdn.pkg.test. 300 IN CNAME edge1.cdnprovider.test.",
		"edge1.cdnprovider.test. 300 IN CNAME edge2.cdnprovider.test.",
		"edge2.cdnprovider.test. 300 IN A 192.0.2.30",
	})
	if err != nil {
		t.Fatal(err)
	}
	err = inet.do(func() error {
		for _, port := range []string{"443", "8443", "853"} {
			l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", ":"+port)
			if err != nil {
				return err
			}
			testenv.Serve(t, l, nil)
		}
		for _, a := range []string{"192.0.2.53:53", "192.0.2.10:53", "192.0.2.10:5353"} {
			srv, err := dnsproxy.Listen(up, a)
			if err != nil {
				return err
			}
			t.Cleanup(func() { srv.Close(context.Background()) })
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Controls: from the host itself (not filtered) the servers answer.
	for _, a := range []string{"192.0.2.20:443", "10.0.0.5:443", "100.64.0.1:443", "169.254.169.254:443", "[fd00::1]:443", "[64:ff9b::a9fe:a9fe]:443", "[2001:db8::20]:443", "192.0.2.10:8443", "192.0.2.10:853"} {
		if err := host.connect(a, patience); err != nil {
			t.Fatalf("control: host cannot reach %s: %v", a, err)
		}
	}
	if r, err := guests[0].query("udp", "192.0.2.53:53", "api.allowed.test.", dns.TypeA, patience); err != nil || len(addrs(r)) != 1 {
		t.Fatalf("control: guest cannot ask the upstream before the firewall is applied: %v %v", r, err)
	}
	up.ResetQueries() // the control query went to the upstream directly

	// The firewall and the proxies of two sessions.
	fw, err := nftrules.NewNFT(nftables.WithNetNSFd(host.fd))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Close() })
	if err := fw.EnsureTable(); err != nil {
		t.Fatal(err)
	}
	// api.allowed.test's entry names the DNS ports too: they are dropped all the same.
	api, err := netpolicy.ParseEntry("api.allowed.test", "443", "53/udp", "53/tcp", "853", "5353/udp")
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := netpolicy.ParseEntry("*.pkg.test")
	if err != nil {
		t.Fatal(err)
	}
	git, err := netpolicy.ParseEntry("git.allowed.test", "8443")
	if err != nil {
		t.Fatal(err)
	}
	hosts := []netpolicy.Entry{api, pkg, git}
	locked := netpolicy.Locked
	eff, err := netpolicy.Resolve(netpolicy.Inputs{Agent: "test", AgentHosts: hosts, Flags: netpolicy.LayerConfig{Profile: &locked}})
	if err != nil {
		t.Fatal(err)
	}
	permissive := netpolicy.Permissive
	effPerm, err := netpolicy.Resolve(netpolicy.Inputs{Flags: netpolicy.LayerConfig{Profile: &permissive}})
	if err != nil {
		t.Fatal(err)
	}
	// Sessions g1 and g2 are locked; g3 is permissive.
	for i, id := range []string{"g1", "g2", "g3"} {
		policy := eff
		if id == "g3" {
			policy = effPerm
		}
		p4, p6 := netip.MustParseAddr(fmt.Sprintf("10.200.0.%d", 4*i+1)), netip.MustParseAddr(fmt.Sprintf("fd20::%x", 4*i+1))
		s := nftrules.Session{ID: id, ProxyV4: p4, ProxyV6: p6, GuestV4: p4.Next(), GuestV6: p6.Next(), AnyPort: policy.AnyPort()}
		if err := fw.AddSession(s); err != nil {
			t.Fatal(err)
		}
		proxy, err := dnsproxy.New(dnsproxy.Config{Policy: policy, Upstream: nsUpstream{host, "192.0.2.53:53"},
			Pinner: nftrules.SetPinner{FW: fw, ID: id}})
		if err != nil {
			t.Fatal(err)
		}
		err = host.do(func() error {
			for _, a := range []netip.Addr{p4, p6} {
				srv, err := dnsproxy.Listen(proxy, netip.AddrPortFrom(a, 53).String())
				if err != nil {
					return err
				}
				t.Cleanup(func() { srv.Close(context.Background()) })
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	g1, g2, g3 := guests[0], guests[1], guests[2]

	mustFail := func(g *netns, addr, why string) {
		t.Helper()
		if err := g.connect(addr, impatience); err == nil {
			t.Errorf("%s: connect to %s succeeded", why, addr)
		}
	}
	mustConnect := func(g *netns, addr, why string) {
		t.Helper()
		if err := g.connect(addr, patience); err != nil {
			t.Errorf("%s: connect to %s: %v", why, addr, err)
		}
	}

	mustFail(g1, "192.0.2.10:443", "before resolution")

	r, err := g1.query("udp", "10.200.0.1:53", "api.allowed.test.", dns.TypeA, patience)
	if err != nil || strings.Join(addrs(r), ",") != "192.0.2.10" {
		t.Fatalf("resolve api.allowed.test A via the proxy: %v %v", r, err)
	}
	mustConnect(g1, "192.0.2.10:443", "resolved and pinned")
	mustFail(g1, "192.0.2.10:8443", "port not allowed")
	mustFail(g1, "192.0.2.20:443", "never resolved")

	// Ports are per entry: git.allowed.test (8443 only) shares no port with api.allowed.test.
	if r, err := g1.query("udp", "10.200.0.1:53", "git.allowed.test.", dns.TypeA, patience); err != nil || strings.Join(addrs(r), ",") != "192.0.2.20" {
		t.Fatalf("resolve git.allowed.test: %v %v", r, err)
	}
	mustConnect(g1, "192.0.2.20:8443", "git.allowed.test on its port")
	mustFail(g1, "192.0.2.20:443", "git.allowed.test on api.allowed.test's port")
	mustFail(g1, "192.0.2.10:8443", "api.allowed.test on git.allowed.test's port")

	r, err = g1.query("tcp", "[fd20::1]:53", "api.allowed.test.", dns.TypeAAAA, patience)
	if err != nil || strings.Join(addrs(r), ",") != "2001:db8::10" {
		t.Fatalf("resolve api.allowed.test AAAA via the proxy over TCP/IPv6: %v %v", r, err)
	}
	mustConnect(g1, "[2001:db8::10]:443", "AAAA resolved and pinned")
	mustFail(g1, "[2001:db8::20]:443", "IPv6 never resolved")

	// DNS anywhere but the proxy, also to a pinned address whose entry allows the DNS ports.
	for _, c := range []struct{ network, server string }{
		{"udp", "192.0.2.53:53"}, {"tcp", "192.0.2.53:53"},
		{"udp", "192.0.2.10:53"}, {"tcp", "192.0.2.10:53"}, {"udp", "192.0.2.10:5353"},
	} {
		if r, err := host.query(c.network, c.server, "api.allowed.test.", dns.TypeA, patience); err != nil {
			t.Fatalf("control: host cannot ask %s %s: %v %v", c.network, c.server, r, err)
		}
		if r, err := g1.query(c.network, c.server, "api.allowed.test.", dns.TypeA, impatience); err == nil {
			t.Errorf("DNS %s to %s answered: %v", c.network, c.server, r)
		}
	}
	mustFail(g1, "192.0.2.10:853", "DNS over TLS port")

	// Denied names and types: REFUSED, never forwarded.
	exfil := "mfrggzdfmztwq2lknnwg23tpobyxe43u.x.attacker.test."
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"evil.attacker.test.", dns.TypeA}, {exfil, dns.TypeA}, {exfil, dns.TypeTXT}, {"api.allowed.test.", dns.TypeTXT}} {
		r, err := g1.query("udp", "10.200.0.1:53", q.name, q.qtype, patience)
		if err != nil || r.Rcode != dns.RcodeRefused {
			t.Errorf("%s %s: %v %v; want REFUSED", q.name, dns.Type(q.qtype), r, err)
		}
	}
	for _, q := range up.Queries() {
		if strings.Contains(q.Name, "attacker") || q.Qtype == dns.TypeTXT {
			t.Errorf("upstream received %v", q)
		}
	}

	// Allowed names answering refused ranges pin nothing.
	for _, q := range []struct {
		name  string
		qtype uint16
		addr  string
	}{{"internal.pkg.test.", dns.TypeA, "10.0.0.5:443"}, {"cgnat.pkg.test.", dns.TypeA, "100.64.0.1:443"}, {"mapped.pkg.test.", dns.TypeAAAA, "192.0.2.20:443"},
		{"metadata.pkg.test.", dns.TypeA, "169.254.169.254:443"}, {"ula.pkg.test.", dns.TypeAAAA, "[fd00::1]:443"},
		{"nat64.pkg.test.", dns.TypeAAAA, "[64:ff9b::a9fe:a9fe]:443"},
		// Loopback answers: the guest's own loopback is not the host's, nothing to connect to.
		{"loop.pkg.test.", dns.TypeA, ""}, {"loop6.pkg.test.", dns.TypeAAAA, ""}, {"mappedloop.pkg.test.", dns.TypeAAAA, ""}} {
		r, err := g1.query("udp", "10.200.0.1:53", q.name, q.qtype, patience)
		if err != nil || len(addrs(r)) != 0 {
			t.Errorf("%s: %v %v; want no addresses", q.name, r, err)
		}
		if q.addr != "" {
			mustFail(g1, q.addr, q.name+" answered a refused address")
		}
	}
	// Nothing of those answers was pinned (elements read "ADDR . PROTO . PORT").
	sets := host.exec(t, "nft", "list", "set", "inet", "brood", "sg1_v4") + host.exec(t, "nft", "list", "set", "inet", "brood", "sg1_v6")
	if !strings.Contains(sets, " 192.0.2.10 . tcp . 443 ") || !strings.Contains(sets, " 2001:db8::10 . tcp . 443 ") {
		t.Errorf("control: the allowed name's pins are not listed as expected:\n%s", sets)
	}
	for _, a := range []string{"127.0.0.1", "10.0.0.5", "100.64.0.1", "169.254.169.254", "::1", "fd00::1", "::ffff:127.0.0.1", "::ffff:192.0.2.20", "64:ff9b::a9fe:a9fe"} {
		if strings.Contains(sets, " "+a+" . ") {
			t.Errorf("refused address %s was pinned:\n%s", a, sets)
		}
	}

	// The static deny comes before the set: a refused address that got into the set anyway
	// (here through the nft CLI, bypassing CheckElement) stays unreachable, while a public
	// one added the same way is reachable.
	host.exec(t, "nft", "add", "element", "inet", "brood", "sg1_v4", "{ 10.0.0.5 . tcp . 443, 192.0.2.20 . tcp . 443 }")
	mustFail(g1, "10.0.0.5:443", "refused range although in the set")
	mustConnect(g1, "192.0.2.20:443", "element added by the nft CLI (control)")

	// Permissive (g3): public addresses on any port without resolving; refused ranges and
	// DNS elsewhere still blocked; every name resolves through the proxy.
	mustConnect(g3, "192.0.2.20:8443", "permissive, never resolved")
	mustConnect(g3, "[2001:db8::20]:443", "permissive IPv6, never resolved")
	mustFail(g3, "10.0.0.5:443", "permissive to a private address")
	mustFail(g3, "100.64.0.1:443", "permissive to CGNAT")
	if r, err := g3.query("udp", "192.0.2.53:53", "api.allowed.test.", dns.TypeA, impatience); err == nil {
		t.Errorf("permissive: DNS to another server answered: %v", r)
	}
	if r, err := g3.query("udp", "10.200.0.9:53", "evil.attacker.test.", dns.TypeA, patience); err != nil || strings.Join(addrs(r), ",") != "192.0.2.20" {
		t.Errorf("permissive: resolve any name: %v %v", r, err)
	}

	// A CNAME chain through names no policy lists: the question name decides, and the
	// chain end's address is pinned for it (and reachable) in the real kernel.
	mustFail(g2, "192.0.2.30:443", "CDN edge before resolution")
	if r, err := g2.query("udp", "10.200.0.5:53", "cdn.pkg.test.", dns.TypeA, patience); err != nil || strings.Join(addrs(r), ",") != "192.0.2.30" {
		t.Fatalf("resolve cdn.pkg.test through its CNAME chain: %v %v", r, err)
	}
	mustConnect(g2, "192.0.2.30:443", "CDN edge pinned for cdn.pkg.test")

	// Session isolation: g1's pin is not g2's.
	mustFail(g2, "192.0.2.10:443", "pinned by another session")
	if r, err := g2.query("udp", "10.200.0.5:53", "api.allowed.test.", dns.TypeA, patience); err != nil || len(addrs(r)) != 1 {
		t.Fatalf("g2 resolve: %v %v", r, err)
	}
	mustConnect(g2, "192.0.2.10:443", "g2 after its own resolution")

	// Destroying session g1 removes its pins, chains and sets at once; its tap is dropped.
	if err := fw.DeleteSession("g1"); err != nil {
		t.Fatal(err)
	}
	mustFail(g1, "192.0.2.10:443", "session deleted")
	if list := host.exec(t, "nft", "list", "ruleset"); strings.Contains(list, "sg1_") || strings.Contains(list, `"brdg1"`) {
		t.Errorf("session g1 left objects:\n%s", list)
	}
	mustConnect(g2, "192.0.2.10:443", "g2 after g1 was deleted")

	// Its conntrack entries go too (g2's stay).
	ct, err := nftrules.NewConntrack(host.fd)
	if err != nil {
		t.Fatal(err)
	}
	defer ct.Close()
	g1Net, g2Net := netip.MustParsePrefix("10.200.0.0/30"), netip.MustParsePrefix("10.200.0.4/30")
	before1, err1 := ct.Count(g1Net)
	before2, err2 := ct.Count(g2Net)
	if err1 != nil || err2 != nil || before1 == 0 || before2 == 0 {
		t.Fatalf("conntrack entries before: g1 %d %v, g2 %d %v", before1, err1, before2, err2)
	}
	n, err := ct.Forget(g1Net, netip.MustParsePrefix("fd20::/126"))
	if err != nil || n < uint(before1) {
		t.Errorf("Forget: %d, %v; want at least %d", n, err, before1)
	}
	if after1, _ := ct.Count(g1Net); after1 != 0 {
		t.Errorf("%d conntrack entries of g1 left", after1)
	}
	if after2, _ := ct.Count(g2Net); after2 < before2 {
		t.Errorf("g2 conntrack entries %d -> %d", before2, after2)
	}
}
