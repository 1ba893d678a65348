package helper

import (
	"strings"
	"testing"

	"brood.dev/brood/helper/api"
)

// TestStartVMSecrets: the helper says it takes secret bindings (a session with a network
// hands them to its egress process, egress TestSecretsNetns; one without drops them);
// invalid bindings are refused as a bad request naming the binding, never its value;
// valid ones pass on to the VM start (which fails here: no VM backend).
func TestStartVMSecrets(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.dial(t)
	ctx := t.Context()
	if !c.Caps.Secrets {
		t.Fatal("the helper does not say it takes secret bindings")
	}
	share, err := api.OpenShare(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer share.Close()
	s, err := c.CreateSession(ctx, share)
	if err != nil {
		t.Fatal(err)
	}
	real := "sk-proj-REAL" + strings.Repeat("r", 40)
	bad := &api.SessionSecrets{Bindings: []api.SecretBinding{{Name: "$OPENAI_API_KEY",
		Placeholder: "short", Value: real, Hosts: []string{"api.openai.com"}}}}
	_, err = c.StartVM(ctx, api.StartVMArgs{ID: s.ID, Image: "test", Secrets: bad})
	if callCode(err) != string(api.CodeBadRequest) || !strings.Contains(err.Error(), "$OPENAI_API_KEY") || strings.Contains(err.Error(), real) {
		t.Fatalf("StartVM with invalid secrets: %v", err)
	}
	good := &api.SessionSecrets{Bindings: []api.SecretBinding{{Name: "$OPENAI_API_KEY",
		Placeholder: "sk-proj-" + strings.Repeat("p", 40), Value: real, Hosts: []string{"api.openai.com"}}}}
	_, err = c.StartVM(ctx, api.StartVMArgs{ID: s.ID, Image: "test", Secrets: good})
	if err == nil || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), real) {
		t.Fatalf("StartVM with secrets and no network: %v", err)
	}
}

// TestStartVMLogins: a start naming a login (StartVMArgs.Logins, whose hosts the policy
// then allows) is refused as a bad request unless an OAuth binding of its secrets
// belongs to that login; with one it passes on to the VM start (which fails here: no
// VM backend).
func TestStartVMLogins(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.dial(t)
	ctx := t.Context()
	share, err := api.OpenShare(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer share.Close()
	s, err := c.CreateSession(ctx, share)
	if err != nil {
		t.Fatal(err)
	}
	key := &api.SessionSecrets{Bindings: []api.SecretBinding{{Name: "$OPENAI_API_KEY",
		Placeholder: "sk-proj-" + strings.Repeat("p", 40), Value: "sk-proj-REAL" + strings.Repeat("r", 40), Hosts: []string{"api.openai.com"}}}}
	access := api.SecretBinding{Name: "~/.codex/auth.json tokens.access_token", Placeholder: "at-" + strings.Repeat("p", 40),
		Value: "at-REAL" + strings.Repeat("r", 40), Hosts: []string{"chatgpt.com"}, Login: "codex", Role: api.RoleAccess}
	for _, a := range []api.StartVMArgs{
		{ID: s.ID, Image: "test", Agent: "codex", Logins: []string{"codex"}},
		{ID: s.ID, Image: "test", Agent: "codex", Logins: []string{"codex"}, Secrets: key},
		{ID: s.ID, Image: "test", Agent: "codex", Logins: []string{"codex", "claude"}, Secrets: &api.SessionSecrets{Bindings: []api.SecretBinding{access}}},
	} {
		_, err = c.StartVM(ctx, a)
		if callCode(err) != string(api.CodeBadRequest) || !strings.Contains(err.Error(), "login") {
			t.Errorf("StartVM with logins %v and %d bindings: %v, want a bad request", a.Logins, bindingCount(a.Secrets), err)
		}
	}
	_, err = c.StartVM(ctx, api.StartVMArgs{ID: s.ID, Image: "test", Agent: "codex", Logins: []string{"codex"},
		Secrets: &api.SessionSecrets{Bindings: []api.SecretBinding{access}}})
	if err == nil || callCode(err) == string(api.CodeBadRequest) {
		t.Fatalf("StartVM with the login's binding: %v", err)
	}
}

func bindingCount(s *api.SessionSecrets) int {
	if s == nil {
		return 0
	}
	return len(s.Bindings)
}
