package helper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy"
	"brood.dev/brood/netpolicy/dnsproxy"
	"brood.dev/brood/netpolicy/nftrules"
)

// policyNetnsEnv marks the re-executed test binary that runs TestResolvePolicyIsEnforced
// inside its own network namespace.
const policyNetnsEnv = "BROOD_POLICY_NETNS"

// TestResolvePolicyIsEnforced: a helper whose config gives an agent its own provider host
// ([egress.agents]) and points at a non-default system policy answers resolve_policy,
// through the typed client, with exactly the hosts and ports a session started with the
// same inputs pins, and with the digest that session reports (EgressInfo.Digest, what
// `brood run` prints). The session is real (egress.Manager.Start: its DNS proxy on the session's
// address, pins into a fake firewall); it runs in a network namespace of its own, with a
// fake upstream resolver, so nothing leaves it.
func TestResolvePolicyIsEnforced(t *testing.T) {
	if os.Getenv(policyNetnsEnv) == "" {
		testenv.RequireRoot(t)
		testenv.RequireCommand(t, "ip")
		testenv.RerunInNetns(t, testenv.NewNetns(t, "p"), "TestResolvePolicyIsEnforced", []string{policyNetnsEnv + "=1"})
		return
	}
	policy := writeRootPolicy(t, "deny_hosts = [\"*.bad.test\"]\n[[host]]\nname = \"sys.corp.test\"\nports = [\"443\", \"8443\"]\n")
	fw := &nftrules.Fake{}
	guest := testenv.NewNetns(t, "g")
	var eg *egress.Manager
	ts := startServerWith(t, func(c *Config) {
		c.Egress.PolicyPath = policy
		c.Egress.Agents = map[string][]string{"claude-code": {"llm.corp.test"}}
		c.Egress.Upstream = "127.0.0.53:53"
	}, func(s *Server) {
		var err error
		if eg, err = egress.New(s.cfg.Egress, t.TempDir(), vethTaps{t, guest}, fw, nil, discardLog()); err != nil {
			t.Fatal(err)
		}
		eg.Discover = func() []netpolicy.Discovered {
			return []netpolicy.Discovered{{Entry: mustEntry(t, "deb.corp.test", "80"), Tool: "apt", From: "/etc/apt/sources.list"}}
		}
		s.EnableEgress(eg)
	})
	t.Cleanup(eg.StopAll)
	start := api.StartVMArgs{ID: "0000beef", Egress: "standard", Agent: "claude-code", AllowHosts: []string{"user.corp.test:8443"},
		UserEgress:      &api.EgressLayer{DenyHosts: []string{"gitlab.com"}, Discovered: []api.EgressDiscovered{{Name: "npm.corp.test", Tool: "npm", From: "/home/u/.npmrc"}}},
		WorkspaceEgress: &api.EgressLayer{DenyHosts: []string{"github.com"}}}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pol, err := ts.dial(t).ResolvePolicy(ctx, start.PolicyArgs())
	if err != nil {
		t.Fatal(err)
	}
	layer := map[string]string{}
	for _, h := range pol.Hosts {
		layer[h.Name] = h.Layer + " " + h.Source
	}
	data, _ := os.ReadFile(policy)
	sum := sha256.Sum256(data)
	if layer["llm.corp.test"] != "agent claude-code" || layer["sys.corp.test"] != "system " || layer["user.corp.test"] != "flags " ||
		layer["deb.corp.test"] != "discovered apt: /etc/apt/sources.list" || layer["npm.corp.test"] != "discovered npm: /home/u/.npmrc" ||
		layer["api.anthropic.com"] != "" || layer["github.com"] != "" || pol.SystemDigest != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("resolve_policy = %+v", pol)
	}

	// The session: the same inputs, through the network layer StartVM uses.
	var zone []string
	for i, h := range pol.Hosts {
		zone = append(zone, fmt.Sprintf("%s. 60 IN A 192.0.2.%d", h.Name, 10+i))
	}
	refused := []string{"api.anthropic.com", "github.com", "gitlab.com", "x.bad.test", "other.corp.test"}
	for i, n := range refused {
		zone = append(zone, fmt.Sprintf("%s. 60 IN A 198.51.100.%d", n, 10+i))
	}
	up, err := dnsproxy.NewFakeUpstream(zone)
	if err != nil {
		t.Fatal(err)
	}
	upSrv, err := dnsproxy.Listen(up, "127.0.0.53:53")
	if err != nil {
		t.Fatal(err)
	}
	defer upSrv.Close(context.Background())
	sess, err := eg.Start(start, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if sess.Info.Digest != pol.Digest || sess.Info.SystemDigest != pol.SystemDigest {
		t.Errorf("session digests %q, %q; resolve_policy %q, %q", sess.Info.Digest, sess.Info.SystemDigest, pol.Digest, pol.SystemDigest)
	}
	var shown []string
	for _, h := range pol.Hosts {
		shown = append(shown, h.Name+" ("+strings.Join(h.Ports, ", ")+")")
	}
	slices.Sort(shown)
	if !slices.Equal(shown, sess.Info.Hosts) {
		t.Errorf("resolve_policy hosts %v, session hosts %v", shown, sess.Info.Hosts)
	}
	proxy := net.JoinHostPort(sess.Info.DNS, "53")
	for i, h := range pol.Hosts {
		addr := netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)})
		if r, err := query(guest, proxy, h.Name); err != nil || r.Rcode != dns.RcodeSuccess {
			t.Errorf("query %s = %v, %v", h.Name, r, err)
		}
		for _, p := range []string{"443/tcp", "8443/tcp", "80/tcp", "22/tcp"} {
			port, _ := netpolicy.ParsePort(p)
			if _, pinned := fw.Pinned(start.ID, addr, port); pinned != slices.Contains(h.Ports, p) {
				t.Errorf("%s %s: pinned %v, shown ports %v", h.Name, p, pinned, h.Ports)
			}
		}
	}
	for i, n := range refused {
		r, err := query(guest, proxy, n)
		if err != nil || r.Rcode != dns.RcodeRefused {
			t.Errorf("query %s = %v, %v; want REFUSED", n, r, err)
		}
		if _, pinned := fw.Pinned(start.ID, netip.AddrFrom4([4]byte{198, 51, 100, byte(10 + i)}), netpolicy.Port{Proto: netpolicy.TCP, Num: 443}); pinned {
			t.Errorf("%s pinned", n)
		}
	}
}

// query asks the DNS server at addr (UDP) for name's A record from netns ns.
func query(ns, addr, name string) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	var c net.Conn
	if err := testenv.InNetns(ns, func() (err error) { c, err = net.Dial("udp", addr); return err }); err != nil {
		return nil, err
	}
	defer c.Close()
	r, _, err := (&dns.Client{Timeout: 5 * time.Second}).ExchangeWithConn(m, &dns.Conn{Conn: c})
	return r, err
}

// vethTaps stands in for taps in a test network namespace: a veth named as the tap,
// with the host's IPv4 address, whose peer is eth0 of netns guest (address .2), so the
// session's DNS proxy is reachable from guest as from a VM (it answers nothing else).
type vethTaps struct {
	t     *testing.T
	guest string
}

func (v vethTaps) CreateTap(name string, uid, gid uint32, addrs []netip.Prefix) (*os.File, error) {
	testenv.IP(v.t, "link", "add", name, "type", "veth", "peer", "name", "eth0", "netns", v.guest)
	for _, a := range addrs {
		if a.Addr().Is4() {
			testenv.IP(v.t, "addr", "add", a.String(), "dev", name)
			testenv.IP(v.t, "-n", v.guest, "addr", "add", netip.PrefixFrom(a.Addr().Next(), a.Bits()).String(), "dev", "eth0")
		}
	}
	testenv.IP(v.t, "link", "set", name, "up")
	testenv.IP(v.t, "-n", v.guest, "link", "set", "eth0", "up")
	// A fresh veth drops packets until the kernel's link watch has activated it (up to a
	// second); its operstate turns UP at the same time.
	deadline := time.Now().Add(10 * time.Second)
	for _, args := range [][]string{{"-o", "link", "show", name}, {"-n", v.guest, "-o", "link", "show", "eth0"}} {
		for {
			out, _ := exec.Command("ip", args...).Output()
			if strings.Contains(string(out), "state UP") {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("veth %s not up: %s", name, out)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil, nil
}
func (vethTaps) DeleteLink(string) error              { return nil }
func (vethTaps) ListTaps(string) ([]string, error)    { return nil, nil }
func (vethTaps) DefaultRouteLinks() ([]string, error) { return nil, nil }
func (vethTaps) EnableForwarding(name string) error   { return nil }

// writeRootPolicy writes a system policy file content into a new temporary directory
// (root-owned when the test runs as root) and returns its path.
func writeRootPolicy(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustEntry(t *testing.T, name string, ports ...string) netpolicy.Entry {
	t.Helper()
	e, err := netpolicy.ParseEntry(name, ports...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
