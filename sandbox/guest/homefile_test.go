package guest

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox/guestcfg"
)

// TestWriteHomeFile writes home files as root for an agent uid that is not root's: new
// nested files with their parents, replacement of a file, of a symlink and of a hard link
// to a file outside the home (each outside file unchanged), and the refusals: a parent
// that is a symlink out of the home, paths that are not clean and relative, a setuid
// mode, data over MaxHomeFile.
func TestWriteHomeFile(t *testing.T) {
	testenv.RequireRoot(t) // chown to another uid
	const uid, gid = 123456, 123457
	home, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	put := func(p string, mode uint32, data string) error {
		return writeHomeFile(home, uid, gid, guestcfg.HomeFile{Path: p, Mode: mode, Data: []byte(data)})
	}
	check := func(p string, mode os.FileMode, data string) {
		t.Helper()
		full := filepath.Join(home, p)
		fi, err := os.Lstat(full)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		got, _ := os.ReadFile(full)
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != mode || st.Uid != uid || st.Gid != gid || string(got) != data || st.Nlink != 1 {
			t.Errorf("%s: mode %v uid %d gid %d nlink %d data %q; want regular %v %d:%d %q", p, fi.Mode(), st.Uid, st.Gid, st.Nlink, got, mode, uid, gid, data)
		}
	}
	if err := put(".codex/auth.json", 0o600, `{"k":1}`); err != nil {
		t.Fatal(err)
	}
	check(".codex/auth.json", 0o600, `{"k":1}`)
	fi, err := os.Stat(filepath.Join(home, ".codex"))
	if err != nil || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != uid {
		t.Errorf(".codex: %v %v", fi, err)
	}
	if err := put(".config/opencode/opencode.json", 0o644, "{}"); err != nil {
		t.Fatal(err)
	}
	check(".config/opencode/opencode.json", 0o644, "{}")
	if err := put(".codex/auth.json", 0o600, "second"); err != nil {
		t.Fatal(err)
	}
	check(".codex/auth.json", 0o600, "second")

	// A symlink and a hard link at the target are replaced, not written through.
	if err := os.Symlink(victim, filepath.Join(home, ".claude.json")); err != nil {
		t.Fatal(err)
	}
	if err := put(".claude.json", 0o600, "mine"); err != nil {
		t.Fatal(err)
	}
	check(".claude.json", 0o600, "mine")
	if err := os.Link(victim, filepath.Join(home, ".gemini-link")); err != nil {
		t.Fatal(err)
	}
	if err := put(".gemini-link", 0o600, "mine"); err != nil {
		t.Fatal(err)
	}
	check(".gemini-link", 0o600, "mine")

	// A parent that is a symlink out of the home is refused.
	if err := os.Symlink(outside, filepath.Join(home, ".gemini")); err != nil {
		t.Fatal(err)
	}
	if err := put(".gemini/victim", 0o600, "through"); err == nil {
		t.Error("write through a symlinked parent succeeded")
	}
	for _, p := range []string{"../victim", "/etc/passwd", "a/../b", "./a", "", "a//b", "a/"} {
		if err := put(p, 0o600, "x"); !errors.Is(err, guestcfg.ErrHomeFile) {
			t.Errorf("path %q: %v, want ErrHomeFile", p, err)
		}
	}
	if err := put("suid", 0o4755, "x"); !errors.Is(err, guestcfg.ErrHomeFile) {
		t.Errorf("setuid mode: %v", err)
	}
	if err := put("big", 0o600, string(make([]byte, guestcfg.MaxHomeFile+1))); !errors.Is(err, guestcfg.ErrHomeFile) {
		t.Errorf("too large: %v", err)
	}
	if got, _ := os.ReadFile(victim); string(got) != "outside" {
		t.Errorf("outside file changed: %q", got)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("outside dir has %d entries, want 1", len(ents))
	}
}

// TestHomeFileRequest sends home-file requests over an in-memory SSH connection to the
// guest's session handler: a valid one writes the file and is answered true, an invalid
// path and an undecodable payload are answered false.
func TestHomeFileRequest(t *testing.T) {
	home := t.TempDir()
	g := &guest{cfg: guestcfg.Config{User: "agent", UID: os.Getuid(), GID: os.Getgid()}, ready: make(chan struct{}), home: home}
	close(g.ready)
	client, err := sessionClientFor(g)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	send := func(payload []byte) bool {
		t.Helper()
		s, err := client.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ok, err := s.SendRequest(guestcfg.HomeFileRequest, true, payload)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !send(ssh.Marshal(guestcfg.HomeFile{Path: ".codex/config.toml", Mode: 0o600, Data: []byte("model = 'x'\n")})) {
		t.Fatal("valid home file refused")
	}
	if got, err := os.ReadFile(filepath.Join(home, ".codex/config.toml")); err != nil || string(got) != "model = 'x'\n" {
		t.Errorf("file: %q, %v", got, err)
	}
	if send(ssh.Marshal(guestcfg.HomeFile{Path: "../escape", Mode: 0o600})) {
		t.Error("path ../escape accepted")
	}
	if send([]byte{0, 0, 0, 9, 'x'}) {
		t.Error("undecodable payload accepted")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(home), "escape")); err == nil {
		t.Error("file written outside the home")
	}
}
