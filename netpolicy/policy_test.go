package netpolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func entries(t *testing.T, names ...string) []Entry {
	t.Helper()
	var out []Entry
	for _, n := range names {
		e, err := ParseAllowHostFlag(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func patterns(t *testing.T, names ...string) []Pattern {
	t.Helper()
	var out []Pattern
	for _, n := range names {
		p, err := ParsePattern(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func prof(p Profile) *Profile { return &p }

func TestZeroEffectiveDeniesEverything(t *testing.T) {
	var eff Effective
	for _, n := range []string{"github.com", "example.com", "a"} {
		if eff.Allowed(n) {
			t.Errorf("zero Effective allows %q", n)
		}
	}
	var nilEff *Effective
	if nilEff.Allowed("github.com") || nilEff.AnyPort() {
		t.Error("nil Effective allows something")
	}
	eff2, err := Resolve(Inputs{Workspace: LayerConfig{Profile: prof(Locked)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(eff2.Hosts) != 0 || eff2.Allowed("github.com") || len(eff2.Ports()) != 0 {
		t.Errorf("locked with no agent hosts allows %v", eff2.Hosts)
	}
}

func TestResolveProfiles(t *testing.T) {
	disc := []Discovered{{Entry: entries(t, "mirror.corp.example")[0], Tool: "go", From: "go env GOPROXY", UserControlled: true}}
	in := Inputs{Agent: "codex", AgentHosts: entries(t, "api.openai.com"), Discovered: disc}

	eff, err := Resolve(in)
	if err != nil {
		t.Fatal(err)
	}
	if eff.Profile != Standard || eff.ProfileLayer != LayerDefault {
		t.Errorf("default profile = %v by %v", eff.Profile, eff.ProfileLayer)
	}
	for _, n := range []string{"api.openai.com", "mirror.corp.example", "github.com", "raw.githubusercontent.com"} {
		if !eff.Allowed(n) {
			t.Errorf("standard refuses %q", n)
		}
	}
	if eff.Allowed("example.com") {
		t.Error("standard allows example.com")
	}
	if g, _, _ := eff.Check("mirror.corp.example"); g.Source.Layer != LayerDiscovered || !strings.Contains(g.Source.Detail, "go env GOPROXY") {
		t.Errorf("discovered source = %v", g.Source)
	}

	in.Flags.Profile = prof(Locked)
	eff, err = Resolve(in)
	if err != nil {
		t.Fatal(err)
	}
	if eff.Profile != Locked || eff.ProfileLayer != LayerFlags {
		t.Errorf("profile = %v by %v", eff.Profile, eff.ProfileLayer)
	}
	if !eff.Allowed("api.openai.com") || eff.Allowed("github.com") || eff.Allowed("mirror.corp.example") {
		t.Errorf("locked hosts = %v", eff.Hosts)
	}

	in.Flags.Profile = prof(Permissive)
	eff, err = Resolve(in)
	if err != nil {
		t.Fatal(err)
	}
	if !eff.Allowed("example.com") || !eff.AnyPort() || eff.Allowed("not a name") {
		t.Error("permissive does not allow public names / any port")
	}
}

// TestResolveDefaultProfile: with no layer setting a profile, the system's default_profile
// chooses it (layer system, source default_profile), else Standard (built-in default), and
// max_profile caps either; a layer's profile still wins, up to the cap, even above the
// default (the default is not a cap).
func TestResolveDefaultProfile(t *testing.T) {
	for _, c := range []struct {
		name    string
		sys     *SystemPolicy
		flags   *Profile
		want    Profile
		layer   Layer
		source  string
		printed string
	}{
		{"no policy", nil, nil, Standard, LayerDefault, ProfileBuiltin, "standard\t(default (built-in default))"},
		{"default_profile", &SystemPolicy{DefaultProfile: prof(Locked)}, nil, Locked, LayerSystem, ProfileFromDefault, "locked\t(system (default_profile))"},
		{"permissive default", &SystemPolicy{DefaultProfile: prof(Permissive)}, nil, Permissive, LayerSystem, ProfileFromDefault, "(system (default_profile))"},
		{"cap below built-in", &SystemPolicy{MaxProfile: prof(Locked)}, nil, Locked, LayerSystem, ProfileFromCap, "locked\t(system (max_profile))"},
		{"cap below default", &SystemPolicy{MaxProfile: prof(Standard), DefaultProfile: prof(Permissive)}, nil, Standard, LayerSystem, ProfileFromCap, "(system (max_profile))"},
		{"flag above default", &SystemPolicy{DefaultProfile: prof(Locked)}, prof(Standard), Standard, LayerFlags, "", "standard\t(flags)"},
	} {
		eff, err := Resolve(Inputs{System: c.sys, Flags: LayerConfig{Profile: c.flags}, AgentHosts: entries(t, "api.openai.com"), Agent: "codex"})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if eff.Profile != c.want || eff.ProfileLayer != c.layer || eff.ProfileSource != c.source || !strings.Contains(eff.String(), c.printed) {
			t.Errorf("%s: profile %v by %v (%q), want %v by %v (%q)\n%s", c.name, eff.Profile, eff.ProfileLayer, eff.ProfileSource, c.want, c.layer, c.source, eff)
		}
		if got := eff.Allowed("github.com"); got != (c.want >= Standard) {
			t.Errorf("%s: github.com allowed %v under %v", c.name, got, eff.Profile)
		}
	}
	if _, err := Resolve(Inputs{System: &SystemPolicy{MaxProfile: prof(Standard), DefaultProfile: prof(Locked)}, Flags: LayerConfig{Profile: prof(Permissive)}}); !errors.Is(err, ErrLoosen) {
		t.Errorf("--egress permissive over max_profile standard: %v, want ErrLoosen", err)
	}
}

func TestResolveTightenOnly(t *testing.T) {
	sys := &SystemPolicy{MaxProfile: prof(Standard), Deny: patterns(t, "*.paste.example"), Allow: entries(t, "llm-gw.corp.example")}
	base := Inputs{System: sys, AgentHosts: entries(t, "api.openai.com")}

	tests := []struct {
		name    string
		mod     func(in *Inputs)
		wantErr error
	}{
		{"user above system cap", func(in *Inputs) { in.User.Profile = prof(Permissive) }, ErrLoosen},
		{"flags above system cap", func(in *Inputs) { in.Flags.Profile = prof(Permissive) }, ErrLoosen},
		{"workspace above user", func(in *Inputs) {
			in.User.Profile = prof(Locked)
			in.Workspace.Profile = prof(Standard)
		}, ErrLoosen},
		{"flags above workspace", func(in *Inputs) {
			in.Workspace.Profile = prof(Locked)
			in.Flags.Profile = prof(Standard)
		}, ErrLoosen},
		{"workspace adds host", func(in *Inputs) { in.Workspace.Allow = entries(t, "evil.example") }, ErrLoosen},
		{"workspace tightens", func(in *Inputs) { in.Workspace.Profile = prof(Locked) }, nil},
		{"user adds host", func(in *Inputs) { in.User.Allow = entries(t, "extra.example") }, nil},
	}
	for _, tt := range tests {
		in := base
		tt.mod(&in)
		_, err := Resolve(in)
		if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.wantErr)
		}
	}

	// A workspace can remove hosts: deny wins over every allow, also under wildcards.
	in := base
	in.Flags.Allow = entries(t, "*.example.org")
	in.Workspace.Deny = patterns(t, "github.com", "bad.example.org", "api.openai.com")
	eff, err := Resolve(in)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"github.com": false, "api.openai.com": false, "bad.example.org": false, "good.example.org": true,
		"llm-gw.corp.example": true, "x.paste.example": false,
	} {
		if got := eff.Allowed(name); got != want {
			t.Errorf("Allowed(%q) = %v, want %v\n%s", name, got, want, eff)
		}
	}
	if g, _, _ := eff.Check("good.example.org"); g.Source.Layer != LayerFlags {
		t.Errorf("source of good.example.org = %v", g.Source)
	}
	if g, _, _ := eff.Check("llm-gw.corp.example"); g.Source.Layer != LayerSystem {
		t.Errorf("source of llm-gw = %v", g.Source)
	}
	if !strings.Contains(eff.String(), "dropped\tgithub.com (22/tcp, 443/tcp) from default (code hosting)\t(denied by workspace pattern github.com)") {
		t.Errorf("policy show lacks the dropped github.com:\n%s", eff)
	}
}

func TestResolveForbidAllowHost(t *testing.T) {
	sys := &SystemPolicy{ForbidAllowHost: true}
	disc := []Discovered{
		{Entry: entries(t, "proxy.user.example")[0], Tool: "go", From: "go env GOPROXY", UserControlled: true},
		{Entry: entries(t, "apt.corp.example:80")[0], Tool: "apt", From: "/etc/apt/sources.list"},
	}
	_, err := Resolve(Inputs{System: sys, Flags: LayerConfig{Allow: entries(t, "x.example")}})
	if !errors.Is(err, ErrAllowHostForbidden) {
		t.Errorf("--allow-host err = %v", err)
	}
	_, err = Resolve(Inputs{System: sys, User: LayerConfig{Allow: entries(t, "x.example")}})
	if !errors.Is(err, ErrAllowHostForbidden) {
		t.Errorf("user allow err = %v", err)
	}
	eff, err := Resolve(Inputs{System: sys, Discovered: disc})
	if err != nil {
		t.Fatal(err)
	}
	if eff.Allowed("proxy.user.example") || !eff.Allowed("apt.corp.example") {
		t.Errorf("user-controlled discovery kept or system one dropped:\n%s", eff)
	}
	if ps := eff.Ports(); !containsPort(ps, Port{TCP, 80}) || !containsPort(ps, Port{TCP, 443}) || !containsPort(ps, Port{TCP, 22}) {
		t.Errorf("ports = %v", ps)
	}
}

func containsPort(ps []Port, p Port) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

func TestSystemCapBelowDefault(t *testing.T) {
	eff, err := Resolve(Inputs{System: &SystemPolicy{MaxProfile: prof(Locked)}})
	if err != nil {
		t.Fatal(err)
	}
	if eff.Profile != Locked || eff.ProfileLayer != LayerSystem {
		t.Errorf("profile = %v by %v", eff.Profile, eff.ProfileLayer)
	}
}

// TestDigest: the digest covers what is enforced (profile, host patterns and ports in
// order, denied patterns) and nothing that only explains it (sources, dropped entries).
func TestDigest(t *testing.T) {
	base := func() *Effective {
		return &Effective{Profile: Locked, ProfileLayer: LayerFlags,
			Hosts:  []Grant{{Entry: mustEntry(t, "api.example", "443", "22"), Source: Source{Layer: LayerAgent, Detail: "x"}}, {Entry: mustEntry(t, "*.b.example")}},
			Denied: []Denial{{Pattern: mustPattern(t, "z.example"), Layer: LayerUser}, {Pattern: mustPattern(t, "a.example"), Layer: LayerSystem}, {Pattern: mustPattern(t, "z.example"), Layer: LayerFlags}}}
	}
	want := "brood egress policy v1\nprofile locked\nallow api.example 22/tcp,443/tcp\nallow *.b.example 443/tcp\ndeny a.example\ndeny z.example\n"
	if got := string(base().Canonical()); got != want {
		t.Errorf("Canonical =\n%s\nwant\n%s", got, want)
	}
	sum := sha256.Sum256([]byte(want))
	if d := base().Digest(); d != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("Digest = %s", d)
	}
	same := base()
	same.Hosts[0].Source, same.ProfileLayer, same.AllowHostForbidden = Source{Layer: LayerSystem}, LayerDefault, true
	same.Dropped = []Note{{What: "x", Why: "y"}}
	if same.Digest() != base().Digest() {
		t.Error("digest changed with sources or notes only")
	}
	for name, mod := range map[string]func(*Effective){
		"profile":    func(e *Effective) { e.Profile = Standard },
		"port":       func(e *Effective) { e.Hosts[1].Entry.Ports = []Port{{TCP, 8443}} },
		"host order": func(e *Effective) { e.Hosts[0], e.Hosts[1] = e.Hosts[1], e.Hosts[0] },
		"denial":     func(e *Effective) { e.Denied = e.Denied[:1] },
		"host":       func(e *Effective) { e.Hosts = e.Hosts[:1] },
	} {
		e := base()
		mod(e)
		if e.Digest() == base().Digest() {
			t.Errorf("%s change kept the digest", name)
		}
	}
}

func mustEntry(t *testing.T, name string, ports ...string) Entry {
	t.Helper()
	e, err := ParseEntry(name, ports...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func mustPattern(t *testing.T, s string) Pattern {
	t.Helper()
	p, err := ParsePattern(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
