package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/frontend/diff/difftest"
	"brood.dev/brood/frontend/session"
)

// modeSession makes a stopped session (with base/ for review) of a workspace holding
// files with modes (path -> mode, set before the snapshot), then lets agent change S.
func modeSession(t *testing.T, files map[string]string, modes map[string]os.FileMode, agent func(s string)) *session.Session {
	t.Helper()
	w := newWorkspace(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(difftest.WriteFiles(w, files))
	for p, m := range modes {
		must(os.Chmod(filepath.Join(w, p), m))
	}
	sess := snapshotSession(t, w)
	must(difftest.WriteFiles(sess.BaseDir(), files))
	must(sess.SetState(session.StateStopped))
	agent(sess.SnapshotDir())
	return sess
}

// recreate does what `rm P; echo C > P` does under umask 022: a new file, mode 0644.
func recreate(t *testing.T, s, p, content string, mode os.FileMode) {
	t.Helper()
	f := filepath.Join(s, p)
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f, mode); err != nil { // whatever the test's umask
		t.Fatal(err)
	}
}

// wMode returns the permission bits (with setuid/setgid/sticky) of W's file p.
func wMode(t *testing.T, sess *session.Session, p string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(sess.Workspace, p))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky)
}

var modeFiles = map[string]string{"x.txt": "v\n", "n.txt": "n\n", "m.txt": "m\n", "suid": "#!/bin/sh\n"}

// modeAgent: x.txt 0640 recreated at 0644 (widened), n.txt rewritten and narrowed to
// 0600, m.txt mode only 0644 -> 0600, suid (04755 in W) rewritten.
func modeAgent(t *testing.T) *session.Session {
	return modeSession(t, modeFiles, map[string]os.FileMode{"x.txt": 0o640, "suid": os.ModeSetuid | 0o755}, func(s string) {
		recreate(t, s, "x.txt", "vm\n", 0o644)
		recreate(t, s, "n.txt", "n2\n", 0o600)
		recreate(t, s, "suid", "#!/bin/sh\necho 2\n", 0o755)
		if err := os.Chmod(filepath.Join(s, "m.txt"), 0o600); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDiffShowsModeWithContent: a permission change rides along with a content change in
// brood diff's line, its --stat and its JSON; widening is high risk and says who gains.
func TestDiffShowsModeWithContent(t *testing.T) {
	sess := modeAgent(t)
	out, msg, code := runBrood(t, "diff", sess.ID)
	if code != ExitOK {
		t.Fatalf("diff: exit %d (%s)\n%s", code, msg, out)
	}
	wantAll(t, "diff", out,
		"modified  x.txt [mode 0640 -> 0644: readable by others] [risk: widens access: readable by others]\n",
		"modified  n.txt [mode 0644 -> 0600]\n",
		"mode      m.txt [mode 0644 -> 0600]\n",
		"modified  suid [mode 4755 -> 0755; setuid dropped]\n",
	)
	out, msg, code = runBrood(t, "diff", "--stat", sess.ID)
	if code != ExitOK {
		t.Fatalf("diff --stat: exit %d (%s)\n%s", code, msg, out)
	}
	wantAll(t, "diff --stat", out,
		" x.txt | +1 -1 [mode 0640 -> 0644: readable by others]\n",
		" n.txt | +1 -1 [mode 0644 -> 0600]\n",
		" m.txt | mode 0644 -> 0600\n",
		" suid | +1 -0 [mode 4755 -> 0755; setuid dropped]\n",
	)
}

// TestApplyModeWidening: --all holds a content change that widens access (W keeps its
// content and mode 0640) and applies the narrowing ones, saying what each does to the
// mode; naming the held path applies it as reviewed.
func TestApplyModeWidening(t *testing.T) {
	sess := modeAgent(t)
	out, code := applyCLI(t, nil, "apply", sess.ID, "--all", "--yes")
	if code != ExitRefused {
		t.Fatalf("--all: exit %d, want 3 (x.txt held)\n%s", code, out)
	}
	wantAll(t, "apply --all", out,
		"skip     modified  x.txt: high risk (widens access: readable by others): name its path to apply it [mode 0640 -> 0644: readable by others]\n",
		"apply    modified  n.txt [mode 0644 -> 0600]\n",
		"apply    mode      m.txt [mode 0644 -> 0600]\n",
		"apply    modified  suid [mode 4755 -> 0755; setuid dropped]\n",
	)
	if wFile(t, sess, "x.txt") != "v\n" || wMode(t, sess, "x.txt") != 0o640 {
		t.Errorf("x.txt after --all: %q %v, want the workspace's own v 0640", wFile(t, sess, "x.txt"), wMode(t, sess, "x.txt"))
	}
	if wMode(t, sess, "n.txt") != 0o600 || wMode(t, sess, "m.txt") != 0o600 || wMode(t, sess, "suid") != 0o755 {
		t.Errorf("modes after --all: n %v m %v suid %v", wMode(t, sess, "n.txt"), wMode(t, sess, "m.txt"), wMode(t, sess, "suid"))
	}
	out, code = applyCLI(t, nil, "apply", sess.ID, "x.txt", "--yes")
	if code != ExitOK || !strings.Contains(out, "apply    modified  x.txt [mode 0640 -> 0644: readable by others] [risk: widens access: readable by others]") {
		t.Fatalf("apply x.txt: exit %d\n%s", code, out)
	}
	if wFile(t, sess, "x.txt") != "vm\n" || wMode(t, sess, "x.txt") != 0o644 {
		t.Errorf("x.txt named: %q %v, want vm 0644", wFile(t, sess, "x.txt"), wMode(t, sess, "x.txt"))
	}
}

// TestReviewModeWidening: brood review --all leaves the widening change out as high risk
// and prints what it does to the mode beside every change.
func TestReviewModeWidening(t *testing.T) {
	sess := modeAgent(t)
	out, msg, code := reviewCmd(t, sess.ID, "--all")
	if code != ExitRefused {
		t.Fatalf("review --all: exit %d (%s)\n%s", code, msg, out)
	}
	for _, want := range []string{"x.txt: ", "[mode 0640 -> 0644: readable by others]", "n.txt [mode 0644 -> 0600]", "suid [mode 4755 -> 0755; setuid dropped]"} {
		if !strings.Contains(out, want) {
			t.Errorf("review --all lacks %q:\n%s", want, out)
		}
	}
	if readW(t, sess, "x.txt") != "v\n" || wMode(t, sess, "x.txt") != 0o640 || readW(t, sess, "n.txt") != "n2\n" {
		t.Errorf("after review --all: x %q %v n %q", readW(t, sess, "x.txt"), wMode(t, sess, "x.txt"), readW(t, sess, "n.txt"))
	}
}

// TestDiffShowsMetadataLoss: brood diff and --stat say, on the change's line, that the
// replaced file's user attribute cannot be kept (S made a.txt a symlink) and what apply
// needs; --json is unchanged.
func TestDiffShowsMetadataLoss(t *testing.T) {
	sess := metadataSession(t)
	want := "metadata: user.xdg.origin.url cannot be kept ("
	for _, args := range [][]string{{"diff", sess.ID}, {"diff", "--stat", sess.ID}} {
		out, msg, code := runBrood(t, args...)
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "a.txt") {
				line = l
			}
		}
		if code != ExitOK || !strings.Contains(line, want) || !strings.Contains(line, "); apply needs --drop-metadata]") {
			t.Errorf("brood %v: exit %d (%s), a.txt line %q\n%s", args, code, msg, line, out)
		}
	}
	if out, _, _ := runBrood(t, "diff", "--json", sess.ID); strings.Contains(out, "metadata") {
		t.Errorf("--json carries the note:\n%s", out)
	}
}

// TestDiffShowsLinkTarget: a retargeted symlink and a file that became a symlink show the
// target the apply writes (escaped) on their brood diff line.
func TestDiffShowsLinkTarget(t *testing.T) {
	sess := modeSession(t, map[string]string{"f.txt": "f\n", "g.txt": "g\n"}, nil, func(s string) {
		if err := os.Symlink("f.txt", filepath.Join(s, "l")); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(s, "g.txt")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("sub/x\x1b[31m", filepath.Join(s, "g.txt")); err != nil {
			t.Fatal(err)
		}
	})
	out, msg, code := runBrood(t, "diff", sess.ID)
	for _, want := range []string{"symlink   l: added [-> f.txt]\n", `type      g.txt: file became symlink [-> sub/x\x1b[31m]`} {
		if !strings.Contains(out, want) {
			t.Errorf("diff (exit %d, %s) lacks %q:\n%s", code, msg, want, out)
		}
	}
	out, code = applyCLI(t, nil, "apply", sess.ID, "--all", "--yes")
	if !strings.Contains(out, "apply    symlink   l [-> f.txt]\n") {
		t.Errorf("apply (exit %d) does not show the target:\n%s", code, out)
	}
}
