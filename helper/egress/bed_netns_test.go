package egress

// The netns test bed every *_netns_test.go scenario runs on: the namespaces and veths the
// parent test builds, the re-execution of the test binary in the "host" netns (where the
// code under test runs unchanged, as the helper), and, inside it, the Manager with veth
// stand-ins for taps, the fake upstream DNS and the internet's servers. Nothing leaves
// the namespaces a test makes.

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy/dnsproxy"
	"brood.dev/brood/netpolicy/nftrules"
	"brood.dev/brood/sandbox"
)

// bedNetns skips t without root or ip(8), and returns a new netns for each name prefix,
// each removed when t ends.
func bedNetns(t *testing.T, prefixes ...string) []string {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "ip")
	names := make([]string, len(prefixes))
	for i, p := range prefixes {
		names[i] = testenv.NewNetns(t, p)
	}
	return names
}

// bedVeth links netns a and b by a veth whose two ends are both named name.
func bedVeth(t *testing.T, name, a, b string) {
	testenv.IP(t, "link", "add", name, "netns", a, "type", "veth", "peer", "name", name, "netns", b)
}

// ipAll runs ip(8) with each of cmds' argument lists, failing t at the first that fails.
func ipAll(t *testing.T, cmds [][]string) {
	for _, c := range cmds {
		testenv.IP(t, c...)
	}
}

// newEgressBed builds the topology of TestEgressNetns (host, internet with the fake
// upstream at 192.0.2.53, two guests) and returns the netns names in that order:
//
//	host up0 172.31.255.1/30 (default route) ──veth── internet up0 172.31.255.2/30, lo 192.0.2.53
//
// The guests' veths are made by the scenario's Manager (vethTaps).
func newEgressBed(t *testing.T) []string {
	names := bedNetns(t, "h", "i", "g", "g")
	host, inet := names[0], names[1]
	bedVeth(t, "up0", host, inet)
	ipAll(t, [][]string{
		{"-n", host, "addr", "add", "172.31.255.1/30", "dev", "up0"},
		{"-n", host, "link", "set", "up0", "up"},
		{"-n", host, "route", "add", "default", "via", "172.31.255.2"},
		{"-n", inet, "addr", "add", "172.31.255.2/30", "dev", "up0"},
		{"-n", inet, "link", "set", "up0", "up"},
		{"-n", inet, "addr", "add", "192.0.2.53/32", "dev", "lo"},
	})
	return names
}

// unitCaps is the capability bounding set of systemd/broodd-helper.service, in setpriv's
// syntax, plus cap_net_bind_service (the daemon binds each proxy's port 53; the unit's
// comment says egress adds it, its bounding set does not yet) and cap_sys_admin (the
// scenario's own guest side enters namespaces with setns, which the helper never does).
const unitCaps = "-all,+net_admin,+setuid,+setgid,+kill,+chown,+net_bind_service,+sys_admin"

// runInHost re-executes test in the bed's host netns with env=names and fails t unless
// it passed there. With caps, the scenario runs under setpriv with that bounding
// set, no inheritable capability and no_new_privs, as the helper runs under its unit.
func runInHost(t *testing.T, test, env string, names []string, caps ...string) {
	t.Helper()
	var prefix []string
	if len(caps) > 0 {
		testenv.RequireCommand(t, "setpriv")
		prefix = []string{"setpriv", "--bounding-set", caps[0], "--inh-caps=-all", "--no-new-privs"}
	}
	testenv.RerunInNetns(t, names[0], test, []string{env + "=" + strings.Join(names, ",")}, prefix...)
}

// bedOpts says how newBed makes the scenario's Manager.
type bedOpts struct {
	upstream     string   // Config.Upstream
	policy       string   // the policy file's content
	guests       []string // the guest netns, one per tap in the order sessions start
	ipv6         bool     // open IPv6Conf (force_forwarding) and give it to the Manager
	conntrack    bool     // give the Manager a conntrack handle
	proxyProcess bool     // run each session's DNS proxy as the egress process (this binary)
	helperLog    bool     // the Manager's own log goes to logDir/helper.log (else discarded)
}

// bed is a scenario's Manager and what it was built with; everything is closed when t
// ends (the sessions stopped first).
type bed struct {
	e      *Manager
	links  *NetlinkLinks
	taps   *vethTaps
	fw     *nftrules.NFT
	ct     *nftrules.Conntrack // nil unless bedOpts.conntrack
	v6     *IPv6Conf           // nil unless bedOpts.ipv6
	logDir string              // the Manager's decision log directory
}

// newBed makes a Manager in this process's netns (the bed's host) as o says, with the
// policy file written as IT would write it.
func newBed(t *testing.T, o bedOpts) *bed {
	b := &bed{logDir: t.TempDir()}
	var err error
	if b.links, err = NewNetlinkLinks(-1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.links.Close() })
	if b.fw, err = nftrules.NewNFT(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.fw.Close() })
	if o.conntrack {
		if b.ct, err = nftrules.NewConntrack(-1); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.ct.Close() })
	}
	if o.ipv6 {
		if b.v6, err = OpenIPv6Conf(); err != nil {
			t.Fatalf("IPv6 force_forwarding: %v", err)
		}
		t.Cleanup(func() { b.v6.Close() })
	}
	cfg := DefaultConfig()
	cfg.Upstream = o.upstream
	cfg.PolicyPath = writeRootPolicy(t, o.policy)
	b.taps = &vethTaps{NetlinkLinks: b.links, guests: o.guests}
	var logTo io.Writer = io.Discard
	if o.helperLog {
		hl, err := os.Create(filepath.Join(b.logDir, "helper.log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hl.Close() })
		logTo = hl
	}
	if b.e, err = New(cfg, b.logDir, b.taps, b.fw, b.ct, slog.New(slog.NewTextHandler(logTo, nil))); err != nil {
		t.Fatal(err)
	}
	if b.v6 != nil {
		b.e.IPv6 = b.v6
	}
	if o.proxyProcess {
		b.e.ProxyExe = publicTestBinary(t)
		t.Cleanup(func() { os.RemoveAll(filepath.Dir(b.e.ProxyExe)) })
	}
	t.Cleanup(b.e.StopAll)
	return b
}

// fakeUpstream serves zone (dnsproxy.NewFakeUpstream's records) as the upstream DNS at
// 192.0.2.53:53 in netns ns until t ends.
func fakeUpstream(t *testing.T, ns string, zone ...string) *dnsproxy.FakeUpstream {
	up, err := dnsproxy.NewFakeUpstream(zone)
	if err != nil {
		t.Fatal(err)
	}
	var upSrv *dnsproxy.Server
	if err := testenv.InNetns(ns, func() (err error) { upSrv, err = dnsproxy.Listen(up, "192.0.2.53:53"); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { upSrv.Close(t.Context()) })
	return up
}

// acceptAndClose listens on TCP at each of addrs in netns ns until t ends, closing every
// connection it accepts.
func acceptAndClose(t *testing.T, ns string, addrs ...string) {
	for _, a := range addrs {
		var l net.Listener
		if err := testenv.InNetns(ns, func() (err error) { l, err = net.Listen("tcp", a); return err }); err != nil {
			t.Fatal(err)
		}
		testenv.Serve(t, l, nil)
	}
}

// startBedManager starts the fake upstream in the bed's internet netns and a Manager with
// one veth stand-in tap per guest, under a policy allowing ok.pkg.test.
func startBedManager(t *testing.T, names []string) *Manager {
	fakeUpstream(t, names[1], "ok.pkg.test. 60 IN A 192.0.2.10")
	return newBed(t, bedOpts{upstream: "192.0.2.53:53", policy: "[[host]]\nname = \"ok.pkg.test\"\n",
		guests: names[2:], proxyProcess: true}).e
}

// startLocked starts session id of the "shell" agent under the locked profile for uid and
// gid 1000 (the session owner of these tests), failing t on an error.
func startLocked(t *testing.T, e *Manager, id string) *Session {
	t.Helper()
	s, err := e.Start(api.StartVMArgs{ID: id, Egress: "locked", Agent: "shell"}, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitAnswered queries addr from netns ns over TCP until it answers ok.pkg.test (at most
// 10 s): a fresh veth drops packets until the kernel's link watch has brought its carrier
// up, which may take up to a second.
func waitAnswered(t *testing.T, ns, addr string) {
	t.Helper()
	waitAnsweredName(t, ns, addr, "ok.pkg.test.")
}

// waitAnsweredName is waitAnswered for an A query of name.
func waitAnsweredName(t *testing.T, ns, addr, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := queryIn(ns, "tcp", addr, name, dns.TypeA)
		if err == nil && r.Rcode == dns.RcodeSuccess {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("query %s from %s = %v, %v", addr, ns, r, err)
		}
	}
}

func dialIn(ns, network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := testenv.InNetns(ns, func() (err error) {
		c, err = net.DialTimeout(network, addr, timeout)
		return err
	})
	return c, err
}

func connectIn(ns, addr string, timeout time.Duration) error {
	c, err := dialIn(ns, "tcp", addr, timeout)
	if err == nil {
		c.Close()
	}
	return err
}

func queryIn(ns, network, server, name string, qtype uint16) (*dns.Msg, error) {
	c, err := dialIn(ns, network, server, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	r, _, err := (&dns.Client{Net: network, Timeout: 2 * time.Second}).ExchangeWithConn(m, &dns.Conn{Conn: c})
	return r, err
}

// vethTaps stands in for taps: CreateTap makes a veth whose peer is eth0 of the next
// guest netns, configured as the guest would be (address .2, default route via .1).
// DeleteLink counts the deletes of each name.
type vethTaps struct {
	*NetlinkLinks
	guests  []string
	next    int
	deletes map[string]int
}

func (v *vethTaps) DeleteLink(name string) error {
	if v.deletes == nil {
		v.deletes = map[string]int{}
	}
	v.deletes[name]++
	return v.NetlinkLinks.DeleteLink(name)
}

func (v *vethTaps) CreateTap(name string, uid, gid uint32, addrs []netip.Prefix) (*os.File, error) {
	if v.next >= len(v.guests) {
		return nil, errors.New("no guest netns left")
	}
	g := v.guests[v.next]
	v.next++
	gns, err := netns.GetFromName(g)
	if err != nil {
		return nil, err
	}
	defer gns.Close()
	mac, _ := net.ParseMAC(sandbox.DefaultMAC) // the guest NIC's, as QEMU gives it
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "eth0", PeerNamespace: netlink.NsFd(gns),
		PeerHardwareAddr: mac}
	if err := v.h.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("create veth %q: %w", name, err)
	}
	gh, err := netlink.NewHandleAt(gns)
	if err != nil {
		return nil, err
	}
	defer gh.Close()
	eth0, err := gh.LinkByName("eth0")
	if err != nil {
		return nil, err
	}
	for _, p := range addrs {
		ga := p.Addr().Next()
		gw := p.Addr()
		if err := gh.AddrAdd(eth0, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(ga, p.Bits())), Flags: unix.IFA_F_NODAD}); err != nil {
			return nil, err
		}
		defer func() {
			if err == nil {
				err = gh.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: gw.AsSlice()})
			}
		}()
		if err := v.h.AddrAdd(veth, &netlink.Addr{IPNet: prefixNet(p), Flags: unix.IFA_F_NODAD}); err != nil {
			return nil, err
		}
	}
	if err := gh.LinkSetUp(eth0); err != nil {
		return nil, err
	}
	if err := v.h.LinkSetUp(veth); err != nil {
		return nil, err
	}
	return nil, nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// writeRootPolicy writes a policy file as IT would (root-owned, 0644, in a 0700 dir).
func writeRootPolicy(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
