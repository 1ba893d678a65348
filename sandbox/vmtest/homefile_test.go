package vmtest

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/sandbox/guestcfg"
)

// TestVMHomeFiles sends home-file requests to a real guest whose agent runs as uid
// 123456: the file lands in the tmpfs home with its mode, owned by the agent with its new
// parent directory, and a symlink the agent planted at a target (pointing at a root-owned
// file) is replaced, never written through by brood-guest's root.
func TestVMHomeFiles(t *testing.T) {
	a := Get(t)
	const uid = 123456
	r := bootCfg(t, a, "", 3*time.Minute, nil, func(c *guestcfg.Config) { c.UID, c.GID = uid, uid })
	r.dial(t)
	// The agent plants a symlink to a file only root may write.
	if out, errOut, code := r.run(t, `ln -s /etc/passwd "$HOME/.claude.json" && md5sum /etc/passwd`); code != 0 {
		t.Fatalf("plant symlink: status %d %q %q", code, out, errOut)
	}
	put := func(f guestcfg.HomeFile) bool {
		t.Helper()
		s, err := r.client.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ok, err := s.SendRequest(guestcfg.HomeFileRequest, true, ssh.Marshal(f))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	before, _, _ := r.run(t, `md5sum /etc/passwd`)
	t0 := time.Now()
	if !put(guestcfg.HomeFile{Path: ".codex/auth.json", Mode: 0o600, Data: []byte(`{"OPENAI_API_KEY":"sk-vm"}`)}) ||
		!put(guestcfg.HomeFile{Path: ".claude.json", Mode: 0o600, Data: []byte(`{"hasCompletedOnboarding":true}`)}) {
		t.Fatal("home file refused")
	}
	t.Logf("two home files written in %v (TCG or KVM as the host allows)", time.Since(t0).Round(time.Millisecond))
	if put(guestcfg.HomeFile{Path: "../../etc/brood-escape", Mode: 0o600}) {
		t.Error("path ../../etc/brood-escape accepted")
	}
	out, errOut, code := r.run(t, `cd "$HOME" && stat -c '%n %u:%g %a %F' .codex .codex/auth.json .claude.json && cat .codex/auth.json .claude.json && md5sum /etc/passwd && ls /etc/brood-escape 2>&1`)
	want := ".codex 123456:123456 700 directory\n.codex/auth.json 123456:123456 600 regular file\n.claude.json 123456:123456 600 regular file\n" +
		`{"OPENAI_API_KEY":"sk-vm"}{"hasCompletedOnboarding":true}` + before
	if !strings.HasPrefix(out, want) || code == 0 {
		t.Errorf("status %d stdout %q stderr %q; want prefix %q and /etc/brood-escape missing", code, out, errOut, want)
	}
	checkTrustCA(t, r) // trust_test.go, on the same boot
	r.closeAndWait(t)
}
