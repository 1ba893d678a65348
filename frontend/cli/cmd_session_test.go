package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/helper/api"
)

const sessCanary = "CANARY-5e1d-session-secret"

// runSessionCmd runs the brood command line with args and returns stdout, stderr and the
// error RunE returned.
func runSessionCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := NewRootCommand()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errb.String(), err
}

func sessWriteFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// sessCanaryWorkspace makes a workspace with the canary in every kind of secret and in
// .git/config credential positions.
func sessCanaryWorkspace(t *testing.T) string {
	w := filepath.Join(t.TempDir(), "w")
	sessWriteFile(t, filepath.Join(w, "main.go"), "package main\n")
	sessWriteFile(t, filepath.Join(w, "internal/secrets/rotate.go"), "package secrets\n")
	for _, p := range []string{".env", "cfg/.env.production", "certs/tls.pem", "tls.key", ".ssh/id_ed25519", "id_rsa", ".aws/credentials", ".netrc", ".gnupg/secring"} {
		sessWriteFile(t, filepath.Join(w, p), sessCanary+"\n")
	}
	sessWriteFile(t, filepath.Join(w, ".git/config"), "[core]\n\tbare = false\n"+
		"[remote \"origin\"]\n\turl = https://dev:"+sessCanary+"@github.com/o/r.git\n"+
		"[remote \"gl\"]\n\turl = https://gitlab.example.test/r.git?private_token="+sessCanary+"\n"+
		"[remote \"nl\"]\n\turl = https://gitlab.example.test/r.git%0a"+sessCanary+"\n"+
		"[http \"https://github.com/\"]\n\textraheader = AUTHORIZATION: basic "+sessCanary+"\n"+
		"[url \"https://x:"+sessCanary+"@github.com/\"]\n\tinsteadOf = https://github.com/\n"+
		"[credential]\n\thelper = store\n[include]\n\tpath = /home/"+sessCanary+"\n")
	sessWriteFile(t, filepath.Join(w, ".git/HEAD"), "ref: refs/heads/main\n")
	// Legacy remotes git still fetches from (gitrepository-layout(5)).
	sessWriteFile(t, filepath.Join(w, ".git/remotes/old"), "URL: https://u:"+sessCanary+"@gitlab.example.test/r.git\n")
	sessWriteFile(t, filepath.Join(w, ".git/branches/old"), "https://u:"+sessCanary+"@gitlab.example.test/r.git\n")
	if err := unix.Mkfifo(filepath.Join(w, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	return w
}

func sessGrepDir(t *testing.T, root, needle string) {
	t.Helper()
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(needle)) {
				t.Errorf("%s contains the canary", p)
			}
		}
		if d.Type()&fs.ModeSymlink != 0 {
			if l, _ := os.Readlink(p); strings.Contains(l, needle) {
				t.Errorf("symlink %s contains the canary", p)
			}
		}
		return nil
	})
}

func TestSessionNewCanary(t *testing.T) {
	state := t.TempDir()
	t.Setenv("BROOD_STATE_DIR", state)
	w := sessCanaryWorkspace(t)
	for _, asJSON := range []bool{true, false} {
		args := []string{"session", "new", "--workspace", w}
		if asJSON {
			args = append(args, "--json")
		}
		out, errOut, err := runSessionCmd(t, args...)
		if err != nil {
			t.Fatalf("session new: %v\n%s", err, errOut)
		}
		if strings.Contains(out+errOut, sessCanary) {
			t.Fatalf("canary in output:\n%s\n%s", out, errOut)
		}
		var id, snap string
		if asJSON {
			var j sessionNewJSON
			if err := json.Unmarshal([]byte(out), &j); err != nil {
				t.Fatalf("JSON output: %v\n%s", err, out)
			}
			id, snap = j.ID, j.Snapshot
			if len(j.Excluded) != 9 || len(j.Skipped) != 1 || len(j.Sanitized) != 3 || j.Stats.Files != 6 {
				t.Errorf("report: %+v", j)
			}
		} else {
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				k, v, _ := strings.Cut(line, " ")
				switch k {
				case "id":
					id = v
				case "snapshot":
					snap = v
				}
			}
			for _, want := range []string{"excluded .env (secret rule .env)", "excluded .ssh (secret rule .ssh/)", "skipped pipe (fifo:", "sanitized .git/config: remote.origin.url: credentials removed (the URL is kept)", "removed include (",
				"sanitized .git/config: remote.gl.url: credentials removed (the URL is kept): credential query parameter in URL",
				"sanitized .git/config: removed remote.nl.url (URL with a control character)",
				"sanitized .git/remotes/old: line 1: credentials removed (the URL is kept): credentials in URL",
				"sanitized .git/branches/old: line 1: credentials removed (the URL is kept): credentials in URL"} {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut)
				}
			}
		}
		sess, err := session.Open(id)
		if err != nil {
			t.Fatalf("open session %q: %v", id, err)
		}
		if sess.State != session.StateReady || snap != sess.SnapshotDir() {
			t.Errorf("session %+v, snapshot %q", sess.Meta, snap)
		}
		if b, _ := os.ReadFile(filepath.Join(snap, "main.go")); string(b) != "package main\n" {
			t.Errorf("main.go not snapshotted")
		}
		m, err := manifest.Read(sess.ManifestPath())
		if err != nil {
			t.Fatal(err)
		}
		if e := m.Lookup(".git/config"); e == nil || !e.Sanitized {
			t.Errorf(".git/config entry %+v", e)
		}
		// A no-op session diffs empty.
		changes, err := diff.Compute(context.Background(), w, snap, m, diff.Options{})
		if err != nil || len(changes) != 0 {
			t.Errorf("no-op session diff: %v %+v", err, changes)
		}
	}
	sessGrepDir(t, state, sessCanary) // S, manifests, session.json
}

func TestSessionNewDryRun(t *testing.T) {
	state := t.TempDir()
	t.Setenv("BROOD_STATE_DIR", state)
	w := sessCanaryWorkspace(t)
	out, errOut, err := runSessionCmd(t, "session", "new", "--workspace", w, "--dry-run")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"would exclude .env (secret rule .env)", "would exclude .aws (secret rule .aws/)",
		"would skip pipe (fifo: special file, never opened)", "would sanitize .git/config: removed credential (credential section)", "dry run: nothing created"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out+errOut, sessCanary) {
		t.Errorf("canary in output")
	}
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Errorf("dry run created %v", ents)
	}
}

func TestSessionNewFailureLeavesNothing(t *testing.T) {
	state := t.TempDir()
	t.Setenv("BROOD_STATE_DIR", state)
	w := filepath.Join(t.TempDir(), "w")
	sessWriteFile(t, filepath.Join(w, "a"), "a")
	// A directory of W that cannot be copied: a name S's filesystem refuses is hard to
	// make, so use an unreadable directory as a non-root user, or a cancelled context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := runSessionNew(ctx, &bytes.Buffer{}, &bytes.Buffer{}, sessionNewOpts{workspace: w})
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("runSessionNew with cancelled context: %v", err)
	}
	if ss, _ := session.List(); len(ss) != 0 {
		t.Fatalf("failed snapshot left sessions %+v", ss)
	}
	if _, _, err := runSessionCmd(t, "session", "new", "--workspace", filepath.Join(w, "a")); err == nil {
		t.Fatal("session new on a file succeeded")
	}
	if ss, _ := session.List(); len(ss) != 0 {
		t.Fatalf("failed snapshot left sessions %+v", ss)
	}
}

func TestSessionListRm(t *testing.T) {
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	w := filepath.Join(t.TempDir(), "w")
	sessWriteFile(t, filepath.Join(w, "a"), "a")
	var ids []string
	for i := 0; i < 2; i++ {
		out, _, err := runSessionCmd(t, "session", "new", "--workspace", w, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var j sessionNewJSON
		json.Unmarshal([]byte(out), &j)
		ids = append(ids, j.ID)
	}
	out, _, err := runSessionCmd(t, "session", "list")
	if err != nil || !strings.Contains(out, ids[0]) || !strings.Contains(out, ids[1]) || !strings.Contains(out, "ready") || !strings.Contains(out, w) {
		t.Fatalf("list: %v\n%s", err, out)
	}
	out, _, err = runSessionCmd(t, "session", "list", "--json")
	var metas []session.Meta
	if err != nil || json.Unmarshal([]byte(out), &metas) != nil || len(metas) != 2 || metas[0].Workspace != w {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	// A session whose VM the helper reports alive is refused without --force.
	f := newFakeHelper(t)
	f.Sessions = []api.Session{{ID: "0000abcd", State: api.SessionRunning}}
	s, _ := session.Open(ids[1])
	s.HelperSession = "0000abcd"
	s.SetState(session.StateRunning)
	if _, _, err := runSessionCmd(t, "session", "rm", ids[1]); sessExitCode(err) != ExitRefused {
		t.Fatalf("rm of a running session: %v", err)
	}
	if _, _, err := runSessionCmd(t, "session", "rm", "../etc"); sessExitCode(err) != ExitUsage {
		t.Fatalf("rm of a bad id: %v", err)
	}
	if out, _, err := runSessionCmd(t, "session", "rm", ids[0]); err != nil || out != "removed "+ids[0]+"\n" {
		t.Fatalf("rm: %v %q", err, out)
	}
	if _, _, err := runSessionCmd(t, "session", "rm", "--force", ids[1]); err != nil {
		t.Fatalf("rm --force: %v", err)
	}
	if ss, _ := session.List(); len(ss) != 0 {
		t.Fatalf("sessions left: %+v", ss)
	}
	if _, _, err := runSessionCmd(t, "session", "rm", ids[0]); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("rm of a removed session: %v", err)
	}
}

func sessExitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if err != nil {
		return ExitError
	}
	return ExitOK
}
