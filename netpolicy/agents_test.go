package netpolicy

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// grantOf returns the grant of eff for the exact name, if any.
func grantOf(eff *Effective, name string) (Grant, bool) {
	for _, g := range eff.Hosts {
		if !g.Entry.Pattern.Wildcard && g.Entry.Pattern.Name == name {
			return g, true
		}
	}
	return Grant{}, false
}

// TestLoginHostsOnlyWhenForwarded: a login's hosts are allowed, 443/tcp as the agent's
// own with the login named as the source, only for a session that names the login; even
// under locked and with forbid_allow_host.
func TestLoginHostsOnlyWhenForwarded(t *testing.T) {
	sys := &SystemPolicy{ForbidAllowHost: true}
	agentHosts := entries(t, "api.openai.com")
	without, err := Resolve(Inputs{System: sys, Agent: "codex", AgentHosts: agentHosts, Flags: LayerConfig{Profile: prof(Locked)}})
	if err != nil {
		t.Fatal(err)
	}
	with, err := Resolve(Inputs{System: sys, Agent: "codex", AgentHosts: agentHosts, Logins: []string{"codex"}, Flags: LayerConfig{Profile: prof(Locked)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"chatgpt.com", "auth.openai.com"} {
		if _, ok := grantOf(without, h); ok {
			t.Errorf("%s allowed for a session that forwards no login", h)
		}
		if _, _, ok := without.Check(h); ok {
			t.Errorf("Check(%s) allows it without the login", h)
		}
		g, ok := grantOf(with, h)
		if !ok {
			t.Fatalf("%s not allowed with the codex login: %+v", h, with.Hosts)
		}
		if g.Source != (Source{LayerAgent, "codex login codex"}) || !slices.Equal(g.Entry.EffectivePorts(), []Port{{TCP, 443}}) {
			t.Errorf("%s: source %v ports %v", h, g.Source, g.Entry.EffectivePorts())
		}
		if _, _, ok := with.Check(h); !ok {
			t.Errorf("Check(%s) refuses it with the login", h)
		}
	}
	if with.Digest() == without.Digest() {
		t.Error("the login's hosts do not change the digest")
	}
}

// TestLoginHostsDenied: the system policy's denials remove a login's hosts as any
// agent host's (dropped, with the reason).
func TestLoginHostsDenied(t *testing.T) {
	sys := &SystemPolicy{Deny: patterns(t, "chatgpt.com")}
	eff, err := Resolve(Inputs{System: sys, Agent: "codex", Logins: []string{"codex"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := grantOf(eff, "chatgpt.com"); ok {
		t.Fatal("a denied login host is allowed")
	}
	if _, ok := grantOf(eff, "auth.openai.com"); !ok {
		t.Fatal("the login's other host went with the denial")
	}
	if !slices.ContainsFunc(eff.Dropped, func(n Note) bool {
		return strings.Contains(n.What, "chatgpt.com") && strings.Contains(n.What, "codex login codex") && strings.Contains(n.Why, "denied by system")
	}) {
		t.Fatalf("dropped %+v", eff.Dropped)
	}
}

// TestLoginRefusals: a login that is not one of the agent's, or named twice, is an error.
func TestLoginRefusals(t *testing.T) {
	for _, in := range []Inputs{
		{Agent: "codex", Logins: []string{"claude"}},
		{Agent: "shell", Logins: []string{"codex"}},
		{Agent: "my-agent", Logins: []string{"codex"}},
		{Agent: "codex", Logins: []string{"codex", "codex"}},
		{Agent: "opencode", Logins: []string{"opencode-google"}},
	} {
		if _, err := Resolve(in); !errors.Is(err, ErrUnknownLogin) {
			t.Errorf("%s %v: %v, want ErrUnknownLogin", in.Agent, in.Logins, err)
		}
	}
}

// TestLoginTable: every login's token endpoints are https://HOST/PATH without port or
// query, its hosts grantable exact names, and the agents with a login file have one.
func TestLoginTable(t *testing.T) {
	for agent, ls := range agentLogins {
		if _, ok := agentHosts[agent]; !ok {
			t.Errorf("%s has logins but no agent hosts entry", agent)
		}
		for _, l := range ls {
			if l.Name == "" || l.Provider == "" || len(l.Access) == 0 || len(l.TokenURLs) == 0 {
				t.Errorf("%s: incomplete login %+v", agent, l)
			}
			for _, tu := range l.TokenURLs {
				u, err := url.Parse(tu)
				if err != nil || u.Scheme != "https" || u.Port() != "" || u.RawQuery != "" || u.Path == "" {
					t.Errorf("%s %s: token URL %q", agent, l.Name, tu)
				}
			}
			for _, h := range l.Hosts() {
				e, err := ParseEntry(h, "443")
				if err != nil || e.Pattern.Wildcard {
					t.Errorf("%s %s: host %q: %v", agent, l.Name, h, err)
				} else if err := grantable(e.Pattern, Source{LayerAgent, agent}); err != nil {
					t.Errorf("%s %s: %v", agent, l.Name, err)
				}
			}
		}
	}
	for _, a := range []string{"codex", "claude-code", "gemini", "opencode"} {
		if len(BuiltinLogins(a)) == 0 {
			t.Errorf("%s has no login", a)
		}
	}
	l := BuiltinLogins("codex")
	l[0].Access[0] = "evil.example"
	if BuiltinLogins("codex")[0].Access[0] != "chatgpt.com" {
		t.Error("BuiltinLogins returns the table itself")
	}
}
