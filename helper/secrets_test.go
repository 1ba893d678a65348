package helper

import (
	"strings"
	"syscall"
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
	if !c.Caps.Secrets || !c.Caps.LoginWriteBack {
		t.Fatalf("the helper does not say it takes secret bindings and write-back: %+v", c.Caps)
	}
	s := createSession(t, c)
	real := "sk-proj-REAL" + strings.Repeat("r", 40)
	bad := &api.SessionSecrets{Bindings: []api.SecretBinding{{Name: "$OPENAI_API_KEY",
		Placeholder: "short", Value: real, Hosts: []string{"api.openai.com"}}}}
	_, err := c.StartVM(ctx, api.StartVMArgs{ID: s.ID, Image: "test", Secrets: bad})
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

// TestRefreshedLoginsOwnerOnly: refreshed_logins, which answers real values, passes the
// owner check every session call makes: another uid asking for the owner's session is
// refused (permission_denied) before the session's VM is consulted; the owner is
// answered (here state: the session has no VM, so nothing was refreshed). The values
// themselves come from the egress process (egress TestSecretsNetns) through the VM's
// handle (vmhost TestHandleRefreshedLogins).
func TestRefreshedLoginsOwnerOnly(t *testing.T) {
	requireRoot(t)
	ts := startServer(t, func(c *Config) { c.AllowUIDs = []uint32{4242, 4243} })
	work := publicTempDir(t)
	dirA := ownedDir(t, work, "a", 4242, 4242)
	out := runChildClient(t, &syscall.Credential{Uid: 4242, Gid: 4242, Groups: []uint32{}},
		childSpec{Sock: ts.sock, Ops: []childOp{{Op: "hello"}, {Op: "create", Dir: dirA}}})
	if out[1].Code != "" {
		t.Fatalf("owner create = %+v", out[1])
	}
	raw := `{"call":"refreshed_logins","args":{"id":"` + out[1].Session.ID + `"}}`
	other := runChildClient(t, &syscall.Credential{Uid: 4243, Gid: 4243, Groups: []uint32{}},
		childSpec{Sock: ts.sock, Ops: []childOp{{Op: "hello"}, {Op: "raw", Body: raw}}})
	if other[1].Code != string(api.CodePermissionDenied) {
		t.Errorf("another uid's refreshed_logins = %+v, want permission_denied", other[1])
	}
	owner := runChildClient(t, &syscall.Credential{Uid: 4242, Gid: 4242, Groups: []uint32{}},
		childSpec{Sock: ts.sock, Ops: []childOp{{Op: "hello"}, {Op: "raw", Body: raw}}})
	if owner[1].Code != string(api.CodeState) {
		t.Errorf("the owner's refreshed_logins of a session without a VM = %+v, want state", owner[1])
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
