package cli

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/diff/difftest"
	"brood.dev/brood/frontend/digest"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/helper/api"
)

// diffSession makes a session whose snapshot was taken from a workspace holding files,
// then applies agent to S, and returns the session id and S's path.
func diffSession(t *testing.T, files map[string]string, agent func(s string)) (string, string) {
	t.Helper()
	sess := newStoppedSession(t, files, false)
	agent(sess.SnapshotDir())
	return sess.ID, sess.SnapshotDir()
}

// runBrood runs the root command with args and returns stdout, the error text and the
// exit code Main would return.
func runBrood(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return brood(t, nil, args...) // cmd_apply_test.go
}

func TestDiffCommandText(t *testing.T) {
	id, _ := diffSession(t, map[string]string{"a.txt": "a\n", "keep.txt": "k\n"}, func(s string) {
		difftest.WriteFiles(s, map[string]string{
			"a.txt":               "a\nb\n",
			"evil\n\x1b[31mfake":  "x",
			"tab\there":           "x",
			"ok.txt":              "ok\n",
			".git/hooks/pre-push": "#!/bin/sh\n",
		})
	})
	out, msg, code := runBrood(t, "diff", id)
	if code != ExitRefused || !strings.Contains(msg, "5 change(s) refused") {
		t.Errorf("exit %d (%s), want %d (refused changes)\n%s", code, msg, ExitRefused, out)
	}
	if strings.ContainsAny(out, "\x1b\r\t") {
		t.Errorf("output carries raw control bytes: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	want := []string{
		"refused   .git: protected path (.git) [risk: git metadata]",
		"refused   .git/hooks: protected path (.git/hooks/) [risk: git metadata]",
		"refused   .git/hooks/pre-push: protected path (.git/hooks/) [risk: git metadata]",
		"modified  a.txt",
		`refused   evil\n\x1b[31mfake: control or formatting character in name`,
		"added     ok.txt",
		`refused   tab\there: control or formatting character in name`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("output:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
}

func TestDiffCommandCleanExitsZero(t *testing.T) {
	id, _ := diffSession(t, map[string]string{"a.txt": "a\n", "m.sh": "#!/bin/sh\n"}, func(s string) {
		os.Chmod(filepath.Join(s, "m.sh"), 0o700)
		difftest.WriteFiles(s, map[string]string{"a.txt": "a\nb\nc\n", "new.go": "package x\n", "bin": "\x00\x01"})
	})
	out, _, code := runBrood(t, "diff", "--stat", id)
	if code != ExitOK {
		t.Fatalf("exit %d, want 0\n%s", code, out)
	}
	want := " a.txt | +2 -0\n bin | Bin 0 -> 2 bytes\n m.sh | mode 0644 -> 0700\n new.go | +1 -0\n 4 file(s) changed, 3 insertion(s)(+), 0 deletion(s)(-)\n"
	if out != want {
		t.Errorf("--stat output:\n%q\nwant\n%q", out, want)
	}
}

func TestDiffCommandJSONRawBytes(t *testing.T) {
	names := []string{"bad\xff\xfename", "new\nline", "plain.txt"}
	id, _ := diffSession(t, map[string]string{"x": "x"}, func(s string) {
		for _, n := range names {
			os.WriteFile(filepath.Join(s, n), []byte("content"), 0o644)
		}
	})
	out, _, code := runBrood(t, "diff", "--json", id)
	if code != ExitRefused {
		t.Errorf("exit %d, want %d (the newline name is refused)", code, ExitRefused)
	}
	var doc struct {
		Changes []diff.Change `json:"changes"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("decode --json output: %v\n%s", err, out)
	}
	var raw struct {
		Changes []map[string]any `json:"changes"`
	}
	json.Unmarshal([]byte(out), &raw)
	got := map[string]diff.Change{}
	for _, c := range doc.Changes {
		got[c.Path] = c
	}
	for _, n := range names {
		if _, ok := got[n]; !ok {
			t.Errorf("name %q not carried faithfully; changes %+v", n, doc.Changes)
		}
	}
	if got["new\nline"].Kind != diff.KindRefused || got["plain.txt"].Kind != diff.KindAdded || got["bad\xff\xfename"].Kind != diff.KindAdded {
		t.Errorf("kinds: %+v", doc.Changes)
	}
	for _, c := range raw.Changes {
		_, hasB64 := c["path_b64"]
		if p := c["path"].(string); (p == "new\nline" || p == "plain.txt") == hasB64 {
			t.Errorf("path %q: path_b64 present=%v, want it only for invalid UTF-8", p, hasB64)
		}
		for _, k := range []string{"path", "kind", "old_mode", "new_mode"} {
			if _, ok := c[k]; !ok {
				t.Errorf("change lacks %q: %v", k, c)
			}
		}
		// The content identifier is the block digest, named for what it is.
		if c["path"] == "plain.txt" {
			want := hex.EncodeToString(digest.Bytes([]byte("content")))
			if c["new_digest"] != want || c["new_hash"] != nil || c["old_hash"] != nil {
				t.Errorf("plain.txt: new_digest %v, want %s (and no *_hash field): %v", c["new_digest"], want, c)
			}
		}
	}
}

func TestDiffCommandRefusesRunningSession(t *testing.T) {
	id, _ := diffSession(t, map[string]string{"x": "x"}, func(string) {})
	sess, err := session.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	// Refused while the helper reports its VM alive (run_lifecycle_test.go has the rest).
	f := newFakeHelper(t)
	f.Sessions = []api.Session{{ID: "0000abcd", State: api.SessionRunning}}
	sess.HelperSession = "0000abcd"
	sess.SetState(session.StateRunning)
	if _, msg, code := runBrood(t, "diff", id); code != ExitRefused || !strings.Contains(msg, "its VM is running") {
		t.Errorf("running session: exit %d, error %q", code, msg)
	}
	if _, _, code := runBrood(t, "diff", "--json", "--stat", id); code != ExitUsage {
		t.Errorf("--json --stat: exit %d, want %d", code, ExitUsage)
	}
}
