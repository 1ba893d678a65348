package policywire

import (
	"slices"
	"strings"
	"testing"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
)

// TestNarrowSecrets: hosts the effective policy does not allow (a system denial, a
// locked profile) are removed from every binding, a refresh token losing its endpoint
// becomes a binding to no host, and the result still validates.
func TestNarrowSecrets(t *testing.T) {
	locked := netpolicy.Locked
	deny, err := netpolicy.ParsePattern("*.openai.com")
	if err != nil {
		t.Fatal(err)
	}
	eff, err := netpolicy.Resolve(netpolicy.Inputs{
		System:     &netpolicy.SystemPolicy{Deny: []netpolicy.Pattern{deny}},
		Flags:      netpolicy.LayerConfig{Profile: &locked},
		AgentHosts: []netpolicy.Entry{entry(t, "api.anthropic.com"), entry(t, "api.openai.com")},
	})
	if err != nil {
		t.Fatal(err)
	}
	ph := func(c string) string { return strings.Repeat(c, 30) }
	in := api.SessionSecrets{Bindings: []api.SecretBinding{
		{Name: "key", Placeholder: ph("a"), Value: "real-a", Hosts: []string{"api.anthropic.com", "api.openai.com", "pypi.org"}},
		{Name: "refresh", Placeholder: ph("b"), Value: "real-b", Hosts: []string{"auth.openai.com"}, Login: "l", Role: api.RoleRefresh,
			TokenURLs: []string{"https://auth.openai.com/oauth/token"}},
	}}
	out, removed := NarrowSecrets(eff, in)
	if !slices.Equal(out.Bindings[0].Hosts, []string{"api.anthropic.com"}) {
		t.Fatalf("key hosts %v", out.Bindings[0].Hosts)
	}
	if b := out.Bindings[1]; len(b.Hosts) != 0 || b.Role != api.RoleKey || b.Login != "" || len(b.TokenURLs) != 0 {
		t.Fatalf("refresh binding %+v", b)
	}
	if !slices.Equal(removed, []string{"key: api.openai.com", "key: pypi.org", "refresh: auth.openai.com"}) {
		t.Fatalf("removed %v", removed)
	}
	if err := out.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(in.Bindings[0].Hosts) != 3 {
		t.Fatal("the input was changed")
	}
	none, _ := NarrowSecrets(nil, in)
	if len(none.Bindings[0].Hosts) != 0 {
		t.Fatal("a session without network kept hosts")
	}
}

func entry(t *testing.T, name string) netpolicy.Entry {
	t.Helper()
	e, err := netpolicy.ParseEntry(name, "443")
	if err != nil {
		t.Fatal(err)
	}
	return e
}
