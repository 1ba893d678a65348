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
