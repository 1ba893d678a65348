package helper

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
)

// TestCheckDirect: a direct-mode StartVM is refused under forbid_direct = true (and when
// the policy cannot be read), allowed without it; other StartVMs never read the policy.
func TestCheckDirect(t *testing.T) {
	testenv.RequireRoot(t)                         // the system policy must be root-owned
	p := filepath.Join(t.TempDir(), "policy.toml") // none yet
	cfg := DefaultConfig()
	cfg.Egress.PolicyPath = p
	srv := NewServer(&cfg, discardLog(), api.Capabilities{}, nil)
	direct := api.StartVMArgs{ID: "0000abcd", Direct: true}
	if err := srv.checkDirect(0, direct); err != nil {
		t.Fatalf("no policy file: %v", err)
	}
	os.WriteFile(p, []byte("forbid_direct = true\n"), 0o644)
	err := srv.checkDirect(0, direct)
	if !errors.Is(err, api.ErrPolicy) || !strings.Contains(err.Error(), "forbid_direct") {
		t.Fatalf("forbid_direct: %v", err)
	}
	if err := srv.checkDirect(0, api.StartVMArgs{ID: "0000abcd"}); err != nil {
		t.Fatalf("snapshot session: %v", err)
	}
	os.WriteFile(p, []byte("forbid_direct = false\n"), 0o644)
	if err := srv.checkDirect(0, direct); err != nil {
		t.Fatalf("forbid_direct = false: %v", err)
	}
	os.WriteFile(p, []byte("forbid_direct = 1\n"), 0o644)
	if err := srv.checkDirect(0, direct); !errors.Is(err, api.ErrPolicy) {
		t.Fatalf("malformed policy: %v", err)
	}
}

// TestDirectRefusedDestroysSession: a direct-mode StartVM refused under forbid_direct
// destroys the session it named (its share is the workspace itself); a snapshot
// session's StartVM is not refused for it, and another user's session is never
// destroyed by the refusal.
func TestDirectRefusedDestroysSession(t *testing.T) {
	testenv.RequireRoot(t) // the system policy must be root-owned
	p := writeRootPolicy(t, "forbid_direct = true\n")
	ts := startServer(t, func(c *Config) { c.Egress.PolicyPath = p })
	c := ts.dial(t)
	ctx := t.Context()
	s := createSession(t, c)
	_, err := c.StartVM(ctx, api.StartVMArgs{ID: s.ID, Image: "test", Direct: true})
	if callCode(err) != string(api.CodePolicy) || !strings.Contains(err.Error(), "forbid_direct") {
		t.Fatalf("direct StartVM: %v", err)
	}
	if l, err := c.ListSessions(ctx); err != nil || len(l) != 0 {
		t.Fatalf("sessions after the refusal: %v, %v", l, err)
	}
	// Another user's session survives a refusal that names it.
	other, err := ts.srv.sessions.Create(12345, 12345, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts.srv.dropRefused(uint32(os.Getuid())+1, other.ID)
	if _, err := ts.srv.sessions.Get(other.ID, 12345); err != nil {
		t.Fatalf("another user's session: %v", err)
	}
}

// TestCheckSSHAgent: a StartVM that forwards the SSH agent is refused under
// allow_ssh_agent = false (and when the policy cannot be read), allowed without the key
// or with allow_ssh_agent = true; other StartVMs are never refused for it.
func TestCheckSSHAgent(t *testing.T) {
	testenv.RequireRoot(t)                         // the system policy must be root-owned
	p := filepath.Join(t.TempDir(), "policy.toml") // written by each case
	cfg := DefaultConfig()
	cfg.Egress.PolicyPath = p
	srv := NewServer(&cfg, discardLog(), api.Capabilities{}, nil)
	fwd := api.StartVMArgs{ID: "0000abcd", SSHAgent: true}
	for _, c := range []struct {
		policy string
		args   api.StartVMArgs
		refuse bool
	}{
		{"", fwd, false},
		{"allow_ssh_agent = true\n", fwd, false},
		{"allow_ssh_agent = false\n", fwd, true},
		{"allow_ssh_agent = false\n", api.StartVMArgs{ID: "0000abcd"}, false},
		{"allow_ssh_agent = 0\n", fwd, true},
	} {
		os.WriteFile(p, []byte(c.policy), 0o644)
		err := srv.checkSSHAgent(0, c.args)
		if got := errors.Is(err, api.ErrPolicy); got != c.refuse {
			t.Errorf("policy %q, ssh agent %v: %v; want refused %v", c.policy, c.args.SSHAgent, err, c.refuse)
		}
	}
}
