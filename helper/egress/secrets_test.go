package egress

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy"
)

// TestBuildTerminatorTestRoots: an egress process whose binary did not call
// AcceptTestRoots (broodd-helper) refuses the session when the daemon offers test
// roots; one that did builds the terminator and answers the CA.
func TestBuildTerminatorTestRoots(t *testing.T) {
	_, _, rootPEM := testenv.TestCAPEM(t, "api.bound.test")
	m := procSecrets{TestRoots: rootPEM, Secrets: api.SessionSecrets{Bindings: []api.SecretBinding{
		{Name: "$API_KEY", Placeholder: phAPI, Value: canaryAPI, Hosts: []string{"api.bound.test"}}}}}
	defer func(v bool) { acceptTestRoots = v }(acceptTestRoots)
	acceptTestRoots = false
	if _, _, err := buildTerminator(m, nil); err == nil || !strings.Contains(err.Error(), "test roots offered to a production egress process") {
		t.Fatalf("production process with test roots: %v", err)
	}
	acceptTestRoots = true
	if tt, pem, err := buildTerminator(m, nil); err != nil || !tt.Covers("api.bound.test") || !strings.Contains(string(pem), "BEGIN CERTIFICATE") {
		t.Fatalf("test process with test roots: %v", err)
	}
}

// TestNarrowSecrets: a binding left with no host by the policy is refused, naming it and
// its hosts; a binding that named none stays; with no binding keeping a host nothing is
// to be terminated (bound false).
func TestNarrowSecrets(t *testing.T) {
	locked := netpolicy.Locked
	e, err := netpolicy.ParseEntry("api.bound.test", "443")
	if err != nil {
		t.Fatal(err)
	}
	eff, err := netpolicy.Resolve(netpolicy.Inputs{Flags: netpolicy.LayerConfig{Profile: &locked}, AgentHosts: []netpolicy.Entry{e}})
	if err != nil {
		t.Fatal(err)
	}
	ok := api.SecretBinding{Name: "$API_KEY", Placeholder: phAPI, Value: canaryAPI, Hosts: []string{"api.bound.test", "other.test"}}
	none := api.SecretBinding{Name: "$NOWHERE", Placeholder: phOther, Value: canaryOther}
	out, bound, err := narrowSecrets(eff, api.SessionSecrets{Bindings: []api.SecretBinding{ok, none}})
	if err != nil || !bound || len(out.Bindings) != 2 || len(out.Bindings[0].Hosts) != 1 || out.Bindings[0].Hosts[0] != "api.bound.test" {
		t.Fatalf("narrow = %+v, %v, %v", out, bound, err)
	}
	if _, bound, err := narrowSecrets(eff, api.SessionSecrets{Bindings: []api.SecretBinding{none}}); err != nil || bound {
		t.Errorf("only a hostless binding: bound %v, %v", bound, err)
	}
	lost := api.SecretBinding{Name: "$LOST", Placeholder: phOther, Value: canaryOther, Hosts: []string{"elsewhere.test"}}
	_, _, err = narrowSecrets(eff, api.SessionSecrets{Bindings: []api.SecretBinding{ok, lost}})
	if !errors.Is(err, api.ErrPolicy) || !strings.Contains(err.Error(), "$LOST") || !strings.Contains(err.Error(), "elsewhere.test") || strings.Contains(err.Error(), "canary") {
		t.Errorf("a binding left with no host: %v", err)
	}
}

// TestRefreshedLoginsKept: the daemon keeps a reported refreshed login only when the
// session's bindings asked for write-back and the login is one of theirs, the report is
// valid, and everything kept fits api.MaxSecretsBytes; the latest report of a login
// wins; take hands them out sorted and forgets them.
func TestRefreshedLoginsKept(t *testing.T) {
	tok := func(v string) *api.RefreshedLogin {
		return &api.RefreshedLogin{Login: "codex", Tokens: map[string]string{api.RoleAccess: v}}
	}
	sec := &api.SessionSecrets{Bindings: []api.SecretBinding{{Name: "a", Login: "codex", Role: api.RoleAccess}, {Name: "b", Login: "claude", Role: api.RoleAccess}, {Name: "$K"}}}
	var off refreshedLogins
	off.allow(&api.SessionSecrets{Bindings: sec.Bindings})
	if why := off.put(tok("new-access-000000000000000")); why == "" || len(off.take()) != 0 {
		t.Errorf("kept without write-back (%q)", why)
	}
	var r refreshedLogins
	sec.WriteBack = true
	r.allow(sec)
	for _, bad := range []*api.RefreshedLogin{nil, {Login: "gemini", Tokens: map[string]string{api.RoleAccess: "x"}}, tok("has space"),
		{Login: "codex", Tokens: map[string]string{"key": "value"}}, {Login: "codex"}} {
		if why := r.put(bad); why == "" {
			t.Errorf("kept %+v", bad)
		}
	}
	if why := r.put(tok("first-000000000000000")); why != "" {
		t.Fatal(why)
	}
	if why := r.put(tok("second-00000000000000")); why != "" {
		t.Fatal(why)
	}
	big := &api.RefreshedLogin{Login: "claude", Tokens: map[string]string{}}
	for _, role := range []string{api.RoleAccess, api.RoleRefresh, api.RoleID} {
		big.Tokens[role] = strings.Repeat("b", api.MaxSecretValue)
	}
	if why := r.put(big); why != "" { // 24 KiB: fits
		t.Fatal(why)
	}
	big2 := *big
	big2.Tokens = map[string]string{api.RoleAccess: strings.Repeat("c", api.MaxSecretValue)}
	big2.Login = "codex"
	if why := r.put(&big2); why != "" {
		t.Fatal(why)
	}
	got := r.take()
	if len(got) != 2 || got[0].Login != "claude" || got[1].Login != "codex" {
		t.Fatalf("take = %d logins", len(got))
	}
	if len(r.take()) != 0 {
		t.Error("take did not forget")
	}
	// Past the byte cap the report is refused and the logins kept stay.
	var c refreshedLogins
	c.allow(sec)
	if why := c.put(big); why != "" {
		t.Fatal(why)
	}
	huge := *big
	huge.Login = "codex" // 2 × 24 KiB plus names: over MaxSecretsBytes
	if why := c.put(&huge); !strings.Contains(why, "over") {
		t.Errorf("over the cap: %q", why)
	}
	if got := c.take(); len(got) != 1 || got[0].Login != "claude" {
		t.Errorf("over the cap: kept %d logins", len(got))
	}
}

// TestLoginSecretsNeedTheLogin: a signed-in codex's bindings (access token to the
// ChatGPT backend, refresh token to its token endpoint, as frontend/secrets binds them)
// keep every host in a session that names the login (ResolvePolicyArgs.Logins), whose
// policy allows the login's hosts as the agent's; without the login the access token
// keeps none, and the start is refused naming it. A login of another agent is a policy
// error.
func TestLoginSecretsNeedTheLogin(t *testing.T) {
	c := DefaultConfig()
	c.PolicyPath = filepath.Join(t.TempDir(), "absent.toml")
	l, err := netpolicy.BuiltinLogin("codex", "codex")
	if err != nil {
		t.Fatal(err)
	}
	sec := api.SessionSecrets{Bindings: []api.SecretBinding{
		{Name: "~/.codex/auth.json tokens.access_token", Placeholder: phAPI, Value: canaryAPI, Hosts: l.Access, Login: "codex", Role: api.RoleAccess},
		{Name: "~/.codex/auth.json tokens.refresh_token", Placeholder: phOther, Value: canaryOther, Hosts: []string{"auth.openai.com"},
			Login: "codex", Role: api.RoleRefresh, TokenURLs: l.TokenURLs},
	}}
	eff, _, err := resolvePolicy(&c, api.ResolvePolicyArgs{Egress: "locked", Agent: "codex", Logins: []string{"codex"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, bound, err := narrowSecrets(eff, sec)
	if err != nil || !bound {
		t.Fatalf("with the login: %v, bound %v", err, bound)
	}
	for i, b := range out.Bindings {
		if !slices.Equal(b.Hosts, sec.Bindings[i].Hosts) || !slices.Equal(b.TokenURLs, sec.Bindings[i].TokenURLs) {
			t.Errorf("binding %s narrowed to %v %v", b.Name, b.Hosts, b.TokenURLs)
		}
	}
	if got := agentHostList(eff); !slices.Contains(got, "chatgpt.com (443/tcp)") || !slices.Contains(got, "auth.openai.com (443/tcp)") {
		t.Errorf("agent hosts %v lack the login's", got)
	}
	eff, _, err = resolvePolicy(&c, api.ResolvePolicyArgs{Egress: "locked", Agent: "codex"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := narrowSecrets(eff, sec); !errors.Is(err, api.ErrPolicy) || !strings.Contains(err.Error(), "tokens.access_token may go only to chatgpt.com") {
		t.Errorf("without the login: %v, want a policy error naming the access token and chatgpt.com", err)
	}
	if _, _, err := resolvePolicy(&c, api.ResolvePolicyArgs{Egress: "locked", Agent: "codex", Logins: []string{"claude"}}, nil); !errors.Is(err, api.ErrPolicy) || !errors.Is(err, netpolicy.ErrUnknownLogin) {
		t.Errorf("another agent's login: %v", err)
	}
}
