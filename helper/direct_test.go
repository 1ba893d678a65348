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
	testenv.RequireRoot(t) // the system policy must be root-owned
	dir := filepath.Join(t.TempDir(), "brood")
	os.Mkdir(dir, 0o755)
	p := filepath.Join(dir, "policy.toml")
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
