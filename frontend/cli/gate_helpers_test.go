package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/frontend/diff/difftest"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/session"
)

// newWorkspace points BROOD_STATE_DIR at a fresh directory for t and returns a new, empty
// workspace directory.
func newWorkspace(t *testing.T) string {
	t.Helper()
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	w := filepath.Join(t.TempDir(), "w")
	if err := os.Mkdir(w, 0o755); err != nil {
		t.Fatal(err)
	}
	return w
}

// snapshotSession creates a session of workspace w whose snapshot and manifest are taken
// from w as it is now (difftest.Snapshot).
func snapshotSession(t *testing.T, w string) *session.Session {
	t.Helper()
	sess, err := session.Create(w)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(sess.SnapshotDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := difftest.Snapshot(w, sess.SnapshotDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := manifest.Write(sess.ManifestPath(), m); err != nil {
		t.Fatal(err)
	}
	return sess
}

// newStoppedSession makes a session (state stopped, under a fresh BROOD_STATE_DIR) whose
// snapshot and manifest were taken from a new workspace holding files (path -> content);
// withBase also writes the files into the session's base/ for three-way merges.
func newStoppedSession(t *testing.T, files map[string]string, withBase bool) *session.Session {
	t.Helper()
	w := newWorkspace(t)
	if err := difftest.WriteFiles(w, files); err != nil {
		t.Fatal(err)
	}
	sess := snapshotSession(t, w)
	if withBase {
		if err := difftest.WriteFiles(sess.BaseDir(), files); err != nil {
			t.Fatal(err)
		}
	}
	if err := sess.SetState(session.StateStopped); err != nil {
		t.Fatal(err)
	}
	return sess
}

// wantAll fails t (not fatally) for each of wants that out (what names it) does not hold.
func wantAll(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, out)
		}
	}
}
