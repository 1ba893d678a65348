package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
)

func TestAddrPool(t *testing.T) {
	p, err := newAddrPool("10.213.0.0/28", "fd62:726f:6f64::/64")
	if err != nil {
		t.Fatal(err)
	}
	if p.slots != 4 {
		t.Fatalf("slots = %d, want 4 (/28 holds four /30)", p.slots)
	}
	var got []int
	for range 4 {
		s, err := p.take()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if _, err := p.take(); !errors.Is(err, api.ErrLimit) {
		t.Fatalf("take from a full pool = %v, want ErrLimit", err)
	}
	p.release(2)
	if s, err := p.take(); err != nil || s != 2 {
		t.Fatalf("take after release = %d, %v; want 2", s, err)
	}
	a := p.addrs(3)
	want := Addrs{
		Host4: netip.MustParseAddr("10.213.0.13"), Guest4: netip.MustParseAddr("10.213.0.14"), Net4: netip.MustParsePrefix("10.213.0.12/30"),
		Host6: netip.MustParseAddr("fd62:726f:6f64::d"), Guest6: netip.MustParseAddr("fd62:726f:6f64::e"), Net6: netip.MustParsePrefix("fd62:726f:6f64::c/126"),
		GuestLL: netip.MustParseAddr("fe80::5054:ff:fe62:7264"),
	}
	if a != want {
		t.Errorf("addrs(3) = %+v, want %+v", a, want)
	}
	// The last slot of a large pool stays inside it.
	big, _ := newAddrPool("10.0.0.0/8", "fd00::/48")
	last := big.addrs(big.slots - 1)
	if big.slots != maxSlots || !big.v4.Contains(last.Guest4) || !big.v6.Contains(last.Guest6) {
		t.Errorf("big pool: %d slots, last %+v", big.slots, last)
	}
	for _, bad := range [][2]string{
		{"10.213.0.0/31", "fd00::/64"}, {"10.213.0.1/16", "fd00::/64"}, {"fd00::/64", "fd00::/64"},
		{"10.213.0.0/16", "10.0.0.0/8"}, {"10.213.0.0/16", "fd00::/127"}, {"", ""},
	} {
		if _, err := newAddrPool(bad[0], bad[1]); !errors.Is(err, ErrConfig) {
			t.Errorf("newAddrPool(%q, %q) = %v, want ErrConfig", bad[0], bad[1], err)
		}
	}
}

// TestEgressPolicyFromTrustedSources: the provider hosts come from the helper's table,
// never the client; a missing policy file is "none"; a bad profile is a policy error.
func TestEgressPolicyFromTrustedSources(t *testing.T) {
	c := DefaultConfig()
	c.PolicyPath = filepath.Join(t.TempDir(), "absent.toml")
	eff, digest, err := resolvePolicy(&c, api.StartVMArgs{ID: "a", Egress: "locked", Agent: "claude-code"}.PolicyArgs(), nil)
	if err != nil || digest != "none" {
		t.Fatalf("resolvePolicy = %v, %q", err, digest)
	}
	if !eff.Allowed("api.anthropic.com") || eff.Allowed("api.openai.com") || eff.Allowed("registry.npmjs.org") {
		t.Errorf("locked claude-code policy:\n%s", eff)
	}
	eff, _, err = resolvePolicy(&c, api.StartVMArgs{ID: "a", Egress: "locked", Agent: "made-up"}.PolicyArgs(), nil)
	if err != nil || len(eff.Hosts) != 0 {
		t.Errorf("unknown agent: %v, hosts %v", err, eff.Hosts)
	}
	for _, a := range []api.StartVMArgs{{ID: "a", Egress: "wide"}, {ID: "a", Egress: "locked", AllowHosts: []string{"0.0.0.0/0"}}} {
		if _, _, err := resolvePolicy(&c, a.PolicyArgs(), nil); !errors.Is(err, api.ErrPolicy) {
			t.Errorf("resolvePolicy(%+v) = %v, want ErrPolicy", a, err)
		}
	}
	// Client layers: the user may deny and add; a workspace may only remove.
	eff, _, err = resolvePolicy(&c, api.ResolvePolicyArgs{Egress: "locked", Agent: "opencode",
		UserEgress:      &api.EgressLayer{AllowHosts: []string{"mirror.example.org"}, Hosts: []api.EgressLayerHost{{Name: "git.example.org", Ports: []string{"22"}}}},
		WorkspaceEgress: &api.EgressLayer{DenyHosts: []string{"openrouter.ai"}}}, nil)
	if err != nil || !eff.Allowed("mirror.example.org") || !eff.Allowed("git.example.org") || eff.Allowed("openrouter.ai") || !eff.Allowed("api.openai.com") {
		t.Errorf("layers: %v\n%s", err, eff)
	}
	for _, a := range []api.StartVMArgs{
		{ID: "a", Egress: "locked", WorkspaceEgress: &api.EgressLayer{AllowHosts: []string{"x.example"}}},
		{ID: "a", Egress: "locked", UserEgress: &api.EgressLayer{DenyHosts: []string{"*bad"}}},
		{ID: "a", Egress: "permissive", UserEgress: &api.EgressLayer{Profile: "locked"}},
	} {
		if _, _, err := resolvePolicy(&c, a.PolicyArgs(), nil); !errors.Is(err, api.ErrPolicy) {
			t.Errorf("resolvePolicy(%+v) = %v, want ErrPolicy", a, err)
		}
	}
	if d := PolicyDigest(c.PolicyPath); d != "none" {
		t.Errorf("digest of a missing policy = %q", d)
	}
	bad := filepath.Join(t.TempDir(), "policy.toml")
	os.WriteFile(bad, []byte("max_profile = 3\n"), 0o644)
	if d := PolicyDigest(bad); !strings.HasPrefix(d, "invalid: ") {
		t.Errorf("digest of a malformed policy = %q", d)
	}
}

// TestEgressPolicyUserDiscovered: registries the client discovered in the user's own
// configuration enter the standard profile with their source, and the system policy
// filters them as it filters user-added hosts: its denials remove them, forbid_allow_host
// drops them (while an explicit --allow-host is refused), and locked ignores them. A
// workspace cannot send any; malformed or oversized lists are refused.
func TestEgressPolicyUserDiscovered(t *testing.T) {
	dir := t.TempDir()
	c := DefaultConfig()
	c.PolicyPath = filepath.Join(dir, "policy.toml")
	npm := api.EgressDiscovered{Name: "npm.corp.test", Tool: "npm", From: "/home/u/.npmrc"}
	pip := api.EgressDiscovered{Name: "pypi.mirror.test", Ports: []string{"8443"}, Tool: "pip", From: "/home/u/.config/pip/pip.conf"}
	user := &api.EgressLayer{Discovered: []api.EgressDiscovered{npm, pip}}
	args := func(profile string, allow ...string) api.StartVMArgs {
		return api.StartVMArgs{ID: "a", Egress: profile, Agent: "claude-code", UserEgress: user, AllowHosts: allow}
	}
	writePolicy := func(s string) {
		t.Helper()
		if err := os.WriteFile(c.PolicyPath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// No system policy: both are allowed under standard, on their ports, with their source.
	eff, _, err := resolvePolicy(&c, args("standard").PolicyArgs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, _, ok := eff.Check("npm.corp.test")
	if !ok || g.Source.Layer != netpolicy.LayerDiscovered || !strings.Contains(g.Source.String(), "npm: /home/u/.npmrc") {
		t.Errorf("npm.corp.test: %+v %v\n%s", g, ok, eff)
	}
	if g, _, ok := eff.Check("pypi.mirror.test"); !ok || !strings.Contains(g.Entry.String(), "8443/tcp") {
		t.Errorf("pypi.mirror.test: %+v %v", g, ok)
	}
	if !strings.Contains(eff.String(), "discovered (pip: /home/u/.config/pip/pip.conf)") {
		t.Errorf("policy text lacks the pip source:\n%s", eff)
	}
	// Locked: the agent's provider only.
	if eff, _, err := resolvePolicy(&c, args("locked").PolicyArgs(), nil); err != nil || eff.Allowed("npm.corp.test") {
		t.Errorf("locked: %v\n%s", err, eff)
	}
	// System denial: removed (and said so).
	writePolicy("deny_hosts = [\"*.corp.test\"]\n")
	if eff, _, err := resolvePolicy(&c, args("standard").PolicyArgs(), nil); err != nil || eff.Allowed("npm.corp.test") || !eff.Allowed("pypi.mirror.test") ||
		!strings.Contains(eff.String(), "dropped\tnpm.corp.test") {
		t.Errorf("system deny: %v\n%s", err, eff)
	}
	// forbid_allow_host: user discoveries dropped even if the client calls them system
	// files; system-wide ones the helper found itself stay; --allow-host is refused.
	writePolicy("forbid_allow_host = true\n")
	sysDisc := []netpolicy.Discovered{{Entry: mustEntry(t, "deb.corp.test"), Tool: "apt", From: "/etc/apt/sources.list"}}
	eff, _, err = resolvePolicy(&c, args("standard").PolicyArgs(), sysDisc)
	if err != nil || eff.Allowed("npm.corp.test") || eff.Allowed("pypi.mirror.test") || !eff.Allowed("deb.corp.test") {
		t.Errorf("forbid_allow_host: %v\n%s", err, eff)
	}
	if _, _, err := resolvePolicy(&c, args("standard", "npm.corp.test").PolicyArgs(), nil); !errors.Is(err, netpolicy.ErrAllowHostForbidden) {
		t.Errorf("--allow-host under forbid_allow_host = %v", err)
	}
	os.Remove(c.PolicyPath)

	many := &api.EgressLayer{}
	for i := range maxClientDiscovered + 1 {
		many.Discovered = append(many.Discovered, api.EgressDiscovered{Name: fmt.Sprintf("r%d.test", i), Tool: "npm", From: "x"})
	}
	for name, a := range map[string]api.StartVMArgs{
		"workspace": {ID: "a", Egress: "standard", WorkspaceEgress: &api.EgressLayer{Discovered: []api.EgressDiscovered{npm}}},
		"wildcard":  {ID: "a", Egress: "standard", UserEgress: &api.EgressLayer{Discovered: []api.EgressDiscovered{{Name: "*.corp.test", Tool: "npm", From: "x"}}}},
		"cidr":      {ID: "a", Egress: "standard", UserEgress: &api.EgressLayer{Discovered: []api.EgressDiscovered{{Name: "0.0.0.0/0", Tool: "npm", From: "x"}}}},
		"bad port":  {ID: "a", Egress: "standard", UserEgress: &api.EgressLayer{Discovered: []api.EgressDiscovered{{Name: "a.test", Ports: []string{"0"}, Tool: "npm", From: "x"}}}},
		"control":   {ID: "a", Egress: "standard", UserEgress: &api.EgressLayer{Discovered: []api.EgressDiscovered{{Name: "a.test", Tool: "npm", From: "x\n\x1b[2J"}}}},
		"too many":  {ID: "a", Egress: "standard", UserEgress: many},
	} {
		if _, _, err := resolvePolicy(&c, a.PolicyArgs(), nil); !errors.Is(err, api.ErrPolicy) {
			t.Errorf("%s: resolvePolicy = %v, want ErrPolicy", name, err)
		}
	}
}

func mustEntry(t *testing.T, name string, ports ...string) netpolicy.Entry {
	t.Helper()
	e, err := netpolicy.ParseEntry(name, ports...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
