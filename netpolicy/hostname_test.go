package netpolicy

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/publicsuffix"
)

// notAddresses are ipForms examples that are not addresses for any parser, only refused
// because they end in a number (WHATWG); every other example must parse as an address.
var notAddresses = map[string]bool{"1.2.3.4.5": true, "1.2.3.256": true, "example.123": true, "a.0x1f": true, "[]": true}

func TestIPFormsRefused(t *testing.T) {
	for _, f := range ipForms {
		if len(f.Examples) == 0 {
			t.Errorf("form %q has no examples", f.Name)
		}
		for _, ex := range f.Examples {
			if form, _ := ipLiteral(ex); form != f.Name {
				t.Errorf("ipLiteral(%q) = %q, want its own row %q", ex, form, f.Name)
			}
			if !notAddresses[ex] && !isAddress(ex) {
				t.Errorf("example %q of %q is no address for the test's parsers", ex, f.Name)
			}
			for _, s := range []string{ex, "*." + ex, strings.ToUpper(ex)} {
				_, err := ParsePattern(s)
				if !errors.Is(err, ErrIPLiteral) || !errors.Is(err, ErrBadPattern) {
					t.Errorf("ParsePattern(%q) err = %v, want ErrIPLiteral", s, err)
					continue
				}
				if msg := err.Error(); !strings.Contains(msg, strconv.Quote(s)) || !strings.Contains(msg, f.Name) {
					t.Errorf("ParsePattern(%q) error %q does not name the input and %q", s, msg, f.Name)
				}
			}
			for _, s := range []string{ex, ex + ":443", ex + ":443,22"} {
				if _, err := ParseAllowHostFlag(s); !errors.Is(err, ErrIPLiteral) {
					t.Errorf("ParseAllowHostFlag(%q) err = %v, want ErrIPLiteral", s, err)
				}
			}
			if _, err := CanonicalName(ex); !errors.Is(err, ErrBadPattern) {
				t.Errorf("CanonicalName(%q) err = %v, want ErrBadPattern", ex, err)
			}
		}
	}
}

// TestIPNamesNeverAllowed: an address-shaped DNS question is not a host name, even under
// Permissive (which allows every other valid name).
func TestIPNamesNeverAllowed(t *testing.T) {
	eff, err := Resolve(Inputs{Flags: LayerConfig{Profile: prof(Permissive)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"169.254.169.254", "2852039166.", "0xa9.254.169.254", "127.1", "0251.0376.0251.0376"} {
		if _, why, ok := eff.Check(n); ok || why != "not a host name" {
			t.Errorf("Check(%q) = %v %q, want refused as not a host name", n, ok, why)
		}
	}
	if !eff.Allowed("example.com") {
		t.Error("permissive refuses example.com")
	}
}

// TestNumericLookingNamesAccepted: digits and hex letters are fine in any label but the
// last, and in a last label that is not a number.
func TestNumericLookingNamesAccepted(t *testing.T) {
	for _, s := range []string{
		"1password.com", "3com.com", "1e100.net", "123.example.com", "0x.example", "0xdeadbeef.com",
		"a.b1", "a.0x1g", "a.1x", "deadbeef.cafe", "face.cafe", "169-254-169-254.nip.example",
		"x.0a", "*.0x10.example", "*.1.example",
	} {
		if _, err := ParsePattern(s); err != nil {
			t.Errorf("ParsePattern(%q): %v", s, err)
		}
	}
	for _, s := range []string{"deadbeef.cafe:443", "face.cafe:443,22", "add.ad:22/tcp"} {
		if _, err := ParseAllowHostFlag(s); err != nil {
			t.Errorf("ParseAllowHostFlag(%q): %v", s, err)
		}
	}
}

func TestSuffixRules(t *testing.T) {
	for kind, r := range suffixRules {
		if len(r.Examples) == 0 {
			t.Errorf("suffix kind %d has no examples", kind)
		}
		for _, ex := range r.Examples {
			if got := classifySuffix(ex); got != kind {
				t.Errorf("classifySuffix(%q) = %d, want %d", ex, got, kind)
			}
			p, err := ParsePattern("*." + ex)
			if r.Refused {
				if !errors.Is(err, ErrPublicSuffix) || !strings.Contains(err.Error(), strconv.Quote(ex)) || !strings.Contains(err.Error(), r.What) {
					t.Errorf("ParsePattern(*.%s) err = %v, want ErrPublicSuffix naming %q", ex, err, ex)
				}
				continue
			}
			if err != nil {
				t.Errorf("ParsePattern(*.%s): %v", ex, err)
				continue
			}
			checkSuffixLayers(t, p, r)
		}
	}
}

// checkSuffixLayers resolves an allow entry for p from every layer: a SystemOnly wildcard
// is refused (naming layer and suffix) from all but the system policy, dropped when
// discovered, and may be denied by any layer.
func checkSuffixLayers(t *testing.T, p Pattern, r suffixRule) {
	t.Helper()
	e := Entry{Pattern: p}
	locked := LayerConfig{Profile: prof(Locked)}
	withAllow := func(l LayerConfig) LayerConfig { l.Allow = []Entry{e}; return l }
	cases := []struct {
		layer string
		in    Inputs
	}{
		{"user", Inputs{User: withAllow(LayerConfig{}), Flags: locked}},
		{"flags", Inputs{Flags: withAllow(locked)}},
		{"agent (codex)", Inputs{Agent: "codex", AgentHosts: []Entry{e}, Flags: locked}},
	}
	for _, c := range cases {
		eff, err := Resolve(c.in)
		if r.SystemOnly {
			if !errors.Is(err, ErrPublicSuffix) || !strings.Contains(err.Error(), c.layer) || !strings.Contains(err.Error(), strconv.Quote(p.Name)) {
				t.Errorf("%s allows %v: err = %v, want ErrPublicSuffix naming layer and suffix", c.layer, p, err)
			}
			continue
		}
		if err != nil || !eff.Allowed("a."+p.Name) {
			t.Errorf("%s allows %v: err = %v", c.layer, p, err)
		}
	}
	eff, err := Resolve(Inputs{System: &SystemPolicy{Allow: []Entry{e}}, Flags: locked})
	if err != nil || !eff.Allowed("a."+p.Name) || eff.Allowed(p.Name) {
		t.Errorf("system allows %v: err = %v, hosts %v", p, err, eff)
	}
	eff, err = Resolve(Inputs{Discovered: []Discovered{{Entry: e, Tool: "npm", From: "~/.npmrc", UserControlled: true}}})
	if err != nil || eff.Allowed("a."+p.Name) == r.SystemOnly {
		t.Errorf("discovered %v: err = %v, policy\n%s", p, err, eff)
	}
	eff, err = Resolve(Inputs{System: &SystemPolicy{Allow: []Entry{e}}, Workspace: LayerConfig{Deny: []Pattern{p}}})
	if err != nil || eff.Allowed("a."+p.Name) {
		t.Errorf("workspace denies %v: err = %v, policy\n%s", p, err, eff)
	}
}

// TestPublicSuffixExactNames: an exact name is one host even when it is a public suffix.
func TestPublicSuffixExactNames(t *testing.T) {
	for _, s := range []string{"co.uk", "github.io", "githubusercontent.com", "com"} {
		e, err := ParseAllowHostFlag(s)
		if err != nil {
			t.Errorf("ParseAllowHostFlag(%q): %v", s, err)
			continue
		}
		eff, err := Resolve(Inputs{Flags: LayerConfig{Profile: prof(Locked), Allow: []Entry{e}}})
		if err != nil || !eff.Allowed(s) || eff.Allowed("x."+s) {
			t.Errorf("--allow-host %s: err = %v, policy\n%s", s, err, eff)
		}
	}
}

// TestHandBuiltPatternsChecked: a Pattern built in Go rather than parsed passes the same
// checks when it reaches Resolve.
func TestHandBuiltPatternsChecked(t *testing.T) {
	for _, p := range []Pattern{{Name: "co.uk", Wildcard: true}, {Name: "com", Wildcard: true}, {Name: "169.254.169.254"}, {Name: "0xa9fea9fe"}} {
		_, err := Resolve(Inputs{System: &SystemPolicy{Allow: []Entry{{Pattern: p}}}})
		if !errors.Is(err, ErrBadPattern) || !strings.Contains(err.Error(), "system") {
			t.Errorf("system allows hand-built %+v: err = %v", p, err)
		}
		_, err = Resolve(Inputs{Flags: LayerConfig{Deny: []Pattern{p}}})
		if !errors.Is(err, ErrBadPattern) || !strings.Contains(err.Error(), "flags") {
			t.Errorf("flags deny hand-built %+v: err = %v", p, err)
		}
	}
}

// TestDefaultHosts: brood's own code hosts and agent provider hosts are exact names that
// even the strictest layer may allow, and the GitHub content hosts are the named ones only.
func TestDefaultHosts(t *testing.T) {
	for _, e := range DefaultCodeHosts() {
		if e.Pattern.Wildcard {
			t.Errorf("default code host %v is a wildcard", e)
		}
		if err := grantable(e.Pattern, Source{Layer: LayerFlags}); err != nil {
			t.Errorf("default code host: %v", err)
		}
	}
	for agent := range agentHosts {
		hosts, _ := BuiltinAgentHosts(agent)
		for _, h := range hosts {
			e, err := ParseAllowHostFlag(h)
			if err != nil || e.Pattern.Wildcard {
				t.Errorf("agent %s host %q: %v %v", agent, h, e, err)
				continue
			}
			if err := grantable(e.Pattern, Source{LayerAgent, agent}); err != nil {
				t.Errorf("agent %s: %v", agent, err)
			}
		}
	}
	eff, err := Resolve(Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"github.com": true, "codeload.github.com": true, "raw.githubusercontent.com": true,
		"objects.githubusercontent.com": true, "release-assets.githubusercontent.com": true,
		"media.githubusercontent.com": true, "github-cloud.githubusercontent.com": true,
		"gitlab.com": true, "bitbucket.org": true, "codeberg.org": true,
		"user-images.githubusercontent.com": false, "attacker.githubusercontent.com": false,
		"githubusercontent.com": false, "attacker.github.io": false, "api.github.com": false,
	} {
		if got := eff.Allowed(name); got != want {
			t.Errorf("standard default Allowed(%q) = %v, want %v", name, got, want)
		}
	}
	if g, _, _ := eff.Check("raw.githubusercontent.com"); len(g.Entry.Ports) != 1 || g.Entry.Ports[0] != (Port{TCP, 443}) {
		t.Errorf("raw.githubusercontent.com ports = %v, want 443/tcp only", g.Entry.Ports)
	}
}

// inetAton reports whether s is an IPv4 address for inet_aton(3) (glibc
// resolv/inet_addr.c) or the WHATWG URL IPv4 parser: one to four parts separated by
// dots (WHATWG: plus one trailing dot), each decimal, octal with a leading 0, or hex
// after 0x/0X (nothing after 0x is 0); all parts but the last at most 255, the last
// filling the remaining bytes. Written independently of the code under test.
func inetAton(s string) bool {
	s = strings.TrimSuffix(s, ".")
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return false
	}
	for i, p := range parts {
		base, digits := 10, p
		switch {
		case len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X"):
			base, digits = 16, p[2:]
			if digits == "" {
				digits = "0"
			}
		case len(p) >= 2 && p[0] == '0':
			base, digits = 8, p[1:]
		}
		if digits == "" || digits[0] == '+' || digits[0] == '-' {
			return false
		}
		v, err := strconv.ParseUint(digits, base, 64)
		if err != nil {
			return false
		}
		bits := 8
		if i == len(parts)-1 {
			bits = 32 - 8*(len(parts)-1)
		}
		if v >= 1<<bits {
			return false
		}
	}
	return true
}

// isAddress reports whether s is an address for netip (plain, zoned or bracketed) or
// inetAton.
func isAddress(s string) bool {
	if inetAton(s) {
		return true
	}
	if strings.HasPrefix(s, "[") {
		host, _, _ := strings.Cut(s[1:], "]")
		host = strings.Replace(host, "%25", "%", 1)
		_, err := netip.ParseAddr(host)
		return err == nil
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	// An IPv6 address with an inet_aton IPv4 tail ("::ffff:0251.0376.0251.0376").
	if i := strings.LastIndexByte(s, ':'); i >= 0 && strings.Contains(s[i:], ".") {
		_, err := netip.ParseAddr(s[:i+1] + "0.0.0.0")
		return err == nil && inetAton(s[i+1:])
	}
	return false
}

func TestOracleParsers(t *testing.T) {
	for s, want := range map[string]bool{
		"169.254.169.254": true, "2852039166": true, "0xa9fea9fe": true, "0xa9.254.169.254": true,
		"0251.0376.0251.0376": true, "169.254.43518": true, "127.1": true, "127.1.": true, "0x": true,
		"256.1.1.1": false, "1.2.3.4.5": false, "08": false, "0x1g": false, "example.com": false,
		"4294967296": false, "1..2": false, "": false, "+1": false, "1.2.3.-4": false,
	} {
		if got := inetAton(s); got != want {
			t.Errorf("inetAton(%q) = %v, want %v", s, got, want)
		}
	}
}

// FuzzHostName checks ParsePattern and ParseAllowHostFlag against independent oracles:
// nothing accepted is an IP address for inetAton or netip, and no wildcard that a layer
// accepts has a public suffix (publicsuffix.PublicSuffix) as its suffix: none from the
// flags layer, none of the ICANN section from the system policy.
func FuzzHostName(f *testing.F) {
	for _, form := range ipForms {
		for _, ex := range form.Examples {
			f.Add(ex)
			f.Add("*." + ex)
		}
	}
	for _, r := range suffixRules {
		for _, ex := range r.Examples {
			f.Add("*." + ex)
		}
	}
	for _, s := range []string{"github.com", "deadbeef.cafe:443", "a.0x1g", "*.corp.internal", "x.example:443,22"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if p, err := ParsePattern(s); err == nil {
			checkAccepted(t, s, p)
		} else if !errors.Is(err, ErrBadPattern) {
			t.Fatalf("ParsePattern(%q) error %v does not wrap ErrBadPattern", s, err)
		}
		if e, err := ParseAllowHostFlag(s); err == nil {
			checkAccepted(t, s, e.Pattern)
		}
	})
}

func checkAccepted(t *testing.T, s string, p Pattern) {
	t.Helper()
	if isAddress(p.Name) || isAddress(strings.TrimPrefix(s, "*.")) {
		t.Fatalf("%q accepted as %v, but it is an IP address", s, p)
	}
	if !p.Wildcard {
		return
	}
	ps, icann := publicsuffix.PublicSuffix(p.Name)
	public := ps == p.Name || !strings.Contains(p.Name, ".")
	if public && icann {
		t.Fatalf("%q accepted as %v: suffix is an ICANN public suffix", s, p)
	}
	e := Entry{Pattern: p}
	_, errFlags := Resolve(Inputs{Flags: LayerConfig{Profile: prof(Locked), Allow: []Entry{e}}})
	if public && errFlags == nil {
		t.Fatalf("--allow-host %q accepted: suffix %q is a public suffix", s, p.Name)
	}
	if !public && errFlags != nil {
		t.Fatalf("--allow-host %q refused: %v", s, errFlags)
	}
	if _, err := Resolve(Inputs{System: &SystemPolicy{Allow: []Entry{e}}}); err != nil {
		t.Fatalf("system policy allow %q refused though it parses: %v", s, err)
	}
}
