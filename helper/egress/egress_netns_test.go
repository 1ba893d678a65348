package egress

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy/nftrules"
)

// egressNetnsEnv carries "host,internet,guest1,guest2" netns names to the re-executed
// test binary that plays the helper inside the "host" netns.
const egressNetnsEnv = "BROOD_EGRESS_NETNS"

// TestEgressNetns runs the helper's egress layer (Manager.Start/Stop: addresses, per-
// interface forwarding, nft chains, sets and masquerade, the DNS proxy) in a network
// namespace the test creates, with a veth standing in for each tap (its peer is the
// guest's eth0 in a "guest" netns). Topology (nothing leaves these namespaces):
//
//	guest1 eth0 ─veth─ brd<id1> ┐
//	guest2 eth0 ─veth─ brd<id2> ┴ host (the helper) ── up0 (default route) ──veth── internet
//	internet: 192.0.2.10, 192.0.2.20 (TCP 443), fake upstream DNS 192.0.2.53:53
//
// The parent builds the namespaces and re-executes the test binary in "host" (`ip netns
// exec`), so the code under test runs unchanged in its own netns.
func TestEgressNetns(t *testing.T) {
	if v := os.Getenv(egressNetnsEnv); v != "" {
		egressScenario(t, strings.Split(v, ","))
		return
	}
	names := newEgressBed(t)
	ipAll(t, [][]string{
		{"-n", names[1], "addr", "add", "192.0.2.10/32", "dev", "lo"},
		{"-n", names[1], "addr", "add", "192.0.2.20/32", "dev", "lo"},
	})
	runInHost(t, "TestEgressNetns", egressNetnsEnv, names)
}

func egressScenario(t *testing.T, names []string) {
	inet, g1, g2 := names[1], names[2], names[3]
	// The internet: the fake upstream (logs every question) and TCP 443 servers.
	up := fakeUpstream(t, inet,
		"ok.pkg.test. 60 IN A 192.0.2.10",
		"other.pkg.test. 60 IN A 192.0.2.20",
		"evil.pkg.test. 60 IN A 192.0.2.20",
	)
	acceptAndClose(t, inet, "192.0.2.10:443", "192.0.2.20:443")
	// Each session's DNS proxy is an egress process.
	b := newBed(t, bedOpts{upstream: "192.0.2.53:53", guests: []string{g1, g2}, conntrack: true, proxyProcess: true,
		policy: "deny_hosts = [\"evil.pkg.test\"]\n[[host]]\nname = \"ok.pkg.test\"\n"})
	e, links, taps, ct := b.e, b.links, b.taps, b.ct

	// Refusals come before anything is created.
	t.Run("malformed policy refuses start", func(t *testing.T) {
		good := e.cfg.PolicyPath
		defer func() { e.cfg.PolicyPath = good }()
		e.cfg.PolicyPath = writeRootPolicy(t, "max_profile = \"lockd\"\n")
		_, err := e.Start(api.StartVMArgs{ID: "bad00001", Egress: "locked"}, 1000, 1000)
		if !errors.Is(err, api.ErrPolicy) {
			t.Fatalf("Start with a malformed policy = %v, want ErrPolicy", err)
		}
		if _, err := links.h.LinkByName("brdbad00001"); err == nil {
			t.Error("a refused start created a tap")
		}
	})
	t.Run("allow-host refused when forbidden", func(t *testing.T) {
		good := e.cfg.PolicyPath
		defer func() { e.cfg.PolicyPath = good }()
		e.cfg.PolicyPath = writeRootPolicy(t, "forbid_allow_host = true\n")
		_, err := e.Start(api.StartVMArgs{ID: "bad00002", Egress: "locked", AllowHosts: []string{"other.pkg.test"}}, 1000, 1000)
		if !errors.Is(err, api.ErrPolicy) {
			t.Fatalf("Start with --allow-host under forbid_allow_host = %v, want ErrPolicy", err)
		}
	})

	// Values from requests that are not exactly one name, port or profile are refused before
	// anything is created: the nft ruleset and the links are unchanged by them.
	t.Run("request values never reach a rule", func(t *testing.T) {
		before, err := exec.Command("nft", "list", "ruleset").CombinedOutput()
		if err != nil {
			t.Fatalf("nft list ruleset: %v\n%s", err, before)
		}
		linksBefore, _ := links.h.LinkList()
		id := "bad00003"
		withUser := func(l api.EgressLayer) api.StartVMArgs {
			return api.StartVMArgs{ID: id, Egress: "standard", UserEgress: &l}
		}
		for name, a := range map[string]api.StartVMArgs{
			"cidr allow-host":      {ID: id, Egress: "locked", AllowHosts: []string{"0.0.0.0/0"}},
			"brace allow-host":     {ID: id, Egress: "locked", AllowHosts: []string{"a.test }; flush ruleset"}},
			"fullwidth allow-host": {ID: id, Egress: "locked", AllowHosts: []string{"１９２.０.２.１"}},
			"port range":           {ID: id, Egress: "locked", AllowHosts: []string{"a.test:1-65535"}},
			"profile text":         {ID: id, Egress: "permissive }"},
			"session id":           {ID: "x}; flush ruleset", Egress: "locked"},
			"user host port":       withUser(api.EgressLayer{Hosts: []api.EgressLayerHost{{Name: "a.test", Ports: []string{"443 }"}}}}),
			"user deny":            withUser(api.EgressLayer{DenyHosts: []string{"*"}}),
			"user discovered cidr": withUser(api.EgressLayer{Discovered: []api.EgressDiscovered{{Name: "0.0.0.0/0", Tool: "npm", From: "x"}}}),
		} {
			if _, err := e.Start(a, 1000, 1000); err == nil {
				t.Errorf("%s: Start(%+v) accepted", name, a)
			}
		}
		after, _ := exec.Command("nft", "list", "ruleset").CombinedOutput()
		if string(after) != string(before) {
			t.Errorf("ruleset changed by refused requests:\n%s\n---\n%s", before, after)
		}
		if linksAfter, _ := links.h.LinkList(); len(linksAfter) != len(linksBefore) {
			t.Errorf("links %d -> %d after refused requests", len(linksBefore), len(linksAfter))
		}
	})
	t.Run("unreadable or insecure policy refuses start", func(t *testing.T) {
		good := e.cfg.PolicyPath
		defer func() { e.cfg.PolicyPath = good }()
		ww := writeRootPolicy(t, "[[host]]\nname = \"ok.pkg.test\"\n")
		if err := os.Chmod(ww, 0o666); err != nil {
			t.Fatal(err)
		}
		for name, path := range map[string]string{"world-writable": ww, "a directory": t.TempDir()} {
			e.cfg.PolicyPath = path
			if _, err := e.Start(api.StartVMArgs{ID: "bad00004", Egress: "locked"}, 1000, 1000); !errors.Is(err, api.ErrPolicy) {
				t.Errorf("Start with a %s policy = %v, want ErrPolicy", name, err)
			}
		}
	})

	t0 := time.Now()
	sa := startLocked(t, e, "aaaa0001")
	t.Logf("egress start (policy, link, forwarding, nft session, proxy): %v", time.Since(t0))
	sb, err := e.Start(api.StartVMArgs{ID: "bbbb0002", Egress: "locked", Agent: "shell", AllowHosts: []string{"other.pkg.test"}}, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); strings.TrimSpace(string(b)) != "0" {
		t.Errorf("global ip_forward = %q, want 0 (forwarding only per interface)", b)
	}
	for _, f := range []string{"up0", sa.tap} {
		if b, _ := os.ReadFile("/proc/sys/net/ipv4/conf/" + f + "/forwarding"); strings.TrimSpace(string(b)) != "1" {
			t.Errorf("%s forwarding = %q, want 1", f, b)
		}
	}
	dnsA, dnsB := net.JoinHostPort(sa.Info.DNS, "53"), net.JoinHostPort(sb.Info.DNS, "53")
	if sa.Info.Profile != "locked" || !slices.Contains(sa.Info.Hosts, "ok.pkg.test (443/tcp)") || !strings.HasPrefix(sa.Info.Digest, "sha256:") {
		t.Errorf("session A info = %+v", sa.Info)
	}

	t.Run("allowed name resolves and connects", func(t *testing.T) {
		for _, network := range []string{"udp", "tcp"} {
			r, err := queryIn(g1, network, dnsA, "ok.pkg.test.", dns.TypeA)
			if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
				t.Fatalf("%s query ok.pkg.test = %v, %v", network, r, err)
			}
		}
		if err := connectIn(g1, "192.0.2.10:443", 3*time.Second); err != nil {
			t.Fatalf("connect to the resolved address: %v", err)
		}
		// The pin carries the answer's TTL (60 s) as its timeout, and counts down. nft
		// prints the time left as "1m" while under a millisecond has passed, else as
		// "59s996ms", "59s" or "996ms".
		out, err := exec.Command("nft", "list", "table", "inet", "brood").CombinedOutput()
		if err != nil || !regexp.MustCompile(`192\.0\.2\.10 \. tcp \. 443 timeout 1m expires (?:1m|[1-5]?[0-9]s(?:[0-9]{1,3}ms)?|[0-9]{1,3}ms)[ ,\n}]`).Match(out) {
			t.Errorf("pin with its timeout not visible (%v):\n%s", err, out)
		}
	})
	t.Run("never-resolved address unreachable", func(t *testing.T) {
		if err := connectIn(g1, "192.0.2.20:443", time.Second); err == nil {
			t.Fatal("connect to a never-resolved address succeeded")
		}
	})
	t.Run("denied names never reach the upstream", func(t *testing.T) {
		up.ResetQueries()
		for _, q := range []struct {
			name string
			typ  uint16
		}{{"evil.pkg.test.", dns.TypeA}, {"other.pkg.test.", dns.TypeA}, {"mfrggzdfmztwq2lk.x.attacker.test.", dns.TypeA}, {"ok.pkg.test.", dns.TypeTXT}} {
			r, err := queryIn(g1, "udp", dnsA, q.name, q.typ)
			if err != nil || r.Rcode != dns.RcodeRefused {
				t.Errorf("query %s %s = %v, %v; want REFUSED", q.name, dns.TypeToString[q.typ], r, err)
			}
		}
		if qs := up.Queries(); len(qs) != 0 {
			t.Errorf("the upstream was asked %v", qs)
		}
	})
	t.Run("DNS to another server blocked", func(t *testing.T) {
		if r, err := queryIn(g1, "udp", "192.0.2.53:53", "ok.pkg.test.", dns.TypeA); err == nil {
			t.Errorf("direct UDP query answered: %v", r)
		}
		if err := connectIn(g1, "192.0.2.53:53", time.Second); err == nil {
			t.Error("direct TCP DNS connect succeeded")
		}
		if r, err := queryIn(g1, "udp", dnsB, "ok.pkg.test.", dns.TypeA); err == nil {
			t.Errorf("session A asked session B's proxy and got %v", r)
		}
	})
	t.Run("pins are per session", func(t *testing.T) {
		// B allows other.pkg.test (its --allow-host) but never resolved ok.pkg.test.
		if err := connectIn(g2, "192.0.2.10:443", time.Second); err == nil {
			t.Fatal("session B reached an address only session A resolved")
		}
		if r, err := queryIn(g2, "udp", dnsB, "other.pkg.test.", dns.TypeA); err != nil || r.Rcode != dns.RcodeSuccess {
			t.Fatalf("B query other.pkg.test = %v, %v", r, err)
		}
		if err := connectIn(g2, "192.0.2.20:443", 3*time.Second); err != nil {
			t.Fatalf("B connect to its resolved address: %v", err)
		}
		if err := connectIn(g1, "192.0.2.20:443", time.Second); err == nil {
			t.Fatal("session A reached an address only session B resolved")
		}
	})
	t.Run("stop removes chains, sets, tap, proxy at once", func(t *testing.T) {
		t0 := time.Now()
		sum, err := e.Stop("aaaa0001")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("egress stop (proxy, nft session, conntrack, link, log summary): %v", time.Since(t0))
		if sum == nil || sum.Allowed["ok.pkg.test."] != 2 || sum.Refused["evil.pkg.test."] != 1 || !slices.Contains(sum.Pinned, "192.0.2.10") {
			t.Errorf("summary = %+v", sum)
		}
		c, err := nftables.New()
		if err != nil {
			t.Fatal(err)
		}
		chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, ch := range chains {
			names = append(names, ch.Name)
		}
		fwdA, _ := nftrules.ChainNames("aaaa0001")
		fwdB, _ := nftrules.ChainNames("bbbb0002")
		if slices.Contains(names, fwdA) || !slices.Contains(names, fwdB) || !slices.Contains(names, nftrules.NATChainName) {
			t.Errorf("chains after stopping A: %v", names)
		}
		sets, err := c.GetSets(nftrules.Table())
		if err != nil {
			t.Fatal(err)
		}
		v4A, _ := nftrules.SetNames("aaaa0001")
		for _, s := range sets {
			if s.Name == v4A {
				t.Errorf("set %s still present", v4A)
			}
		}
		if _, err := links.h.LinkByName(sa.tap); err == nil {
			t.Errorf("tap %s still present", sa.tap)
		}
		// The one owner of a live tap's deletion is Manager.Stop: exactly one delete.
		if n := taps.deletes[sa.tap]; n != 1 {
			t.Errorf("tap %s deleted %d times, want once", sa.tap, n)
		}
		m := new(dns.Msg)
		m.SetQuestion("ok.pkg.test.", dns.TypeA)
		if r, _, err := (&dns.Client{Timeout: time.Second}).Exchange(m, dnsA); err == nil {
			t.Errorf("A's proxy still answers: %v", r)
		}
		// B is untouched.
		if err := connectIn(g2, "192.0.2.20:443", 3*time.Second); err != nil {
			t.Errorf("B after A stopped: %v", err)
		}
		if n, err := ct.Count(sa.Addrs.Net4); err != nil || n != 0 {
			t.Errorf("conntrack entries of A after stop: %d, %v", n, err)
		}
	})
}
