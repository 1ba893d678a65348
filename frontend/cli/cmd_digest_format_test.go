package cli

import (
	"bytes"
	"encoding/gob"
	"os"
	"strings"
	"testing"

	"brood.dev/brood/frontend/diff/difftest"
	"brood.dev/brood/frontend/manifest"
)

// TestSessionOfOldManifestFormatRefused: a session whose manifest is format 1 (plain
// SHA-256 content hashes) is refused by diff and apply with an error naming the session
// and the reason, and apply writes nothing; it is never compared as if the hashes were
// content digests.
func TestSessionOfOldManifestFormatRefused(t *testing.T) {
	sess := newStoppedSession(t, map[string]string{"a.txt": "a\n"}, false)
	if err := difftest.WriteFiles(sess.SnapshotDir(), map[string]string{"a.txt": "agent\n"}); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Read(sess.ManifestPath())
	if err != nil {
		t.Fatal(err)
	}
	m.Version = 1 // manifest.Write would stamp the current version
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sess.ManifestPath(), b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"diff", sess.ID}, {"diff", "--json", sess.ID}, {"apply", sess.ID, "--all", "--yes"}} {
		out, code := applyCLI(t, nil, args...)
		t.Logf("%v: exit %d: %s", args, code, out)
		if code == ExitOK {
			t.Errorf("%v succeeded on a format-1 session:\n%s", args, out)
		}
		for _, want := range []string{"session " + sess.ID, "format version 1", "older brood", "plain SHA-256"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: output does not say %q:\n%s", args, want, out)
			}
		}
	}
	if got := wFile(t, sess, "a.txt"); got != "a\n" {
		t.Errorf("W a.txt = %q after a refused apply, want it untouched", got)
	}
}
