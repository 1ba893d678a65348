package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/hostilews"
)

// TestWorkspaceConfigSymlinkRefused: a .brood.toml that is a link (to a file outside the
// workspace, or through a linked directory inside it), a FIFO or an oversized file is
// refused by policy show and run, before any session, naming the path; no line of the
// link's target is printed.
func TestWorkspaceConfigSymlinkRefused(t *testing.T) {
	noHelper(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	secret := filepath.Join(t.TempDir(), "fake_secret")
	if err := os.WriteFile(secret, []byte("bogus=1\nanother-secret-line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	link := filepath.Join(ws, ".brood.toml")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	out, code := policyShow(t, "--workspace", ws)
	if code != ExitUsage || !strings.Contains(out, link) || !strings.Contains(out, "is a symlink") || strings.Contains(out, "bogus") {
		t.Errorf("policy show with a linked .brood.toml: exit %d\n%s", code, out)
	}
	f := newFakeHelper(t)
	rc, _, runErr := broodCode(t, "run", "--workspace", ws, "--egress", "locked", "shell", "--", "true")
	if rc != ExitUsage || !strings.Contains(runErr, "is a symlink") || strings.Contains(runErr, "bogus") || strings.Contains(f.Calls(), string(api.CallCreateSession)) {
		t.Errorf("run with a linked .brood.toml: exit %d, calls %q\n%s", rc, f.Calls(), runErr)
	}

	// A FIFO would block the read; a huge file is not a config.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(link, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := policyShow(t, "--workspace", ws); code != ExitUsage || !strings.Contains(out, "not a regular file") {
		t.Errorf("policy show with a FIFO .brood.toml: exit %d\n%s", code, out)
	}
	os.Remove(link)
	if err := os.WriteFile(link, []byte("# "+strings.Repeat("x", 2<<20)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := policyShow(t, "--workspace", ws); code != ExitUsage || !strings.Contains(out, "longer than") {
		t.Errorf("policy show with a 2 MiB .brood.toml: exit %d\n%.300s", code, out)
	}
}

// TestPolicyShowWorkspaceChecks: policy show refuses a missing workspace (or a file) as
// session new does, and a malformed .brood.toml exits ExitUsage from policy show as from
// run.
func TestPolicyShowWorkspaceChecks(t *testing.T) {
	noHelper(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	missing := filepath.Join(t.TempDir(), "nonexistent")
	if out, code := policyShow(t, "--workspace", missing); code != ExitUsage || !strings.Contains(out, missing) {
		t.Errorf("policy show --workspace %s: exit %d\n%s", missing, code, out)
	}
	ws := t.TempDir()
	file := writeFile(t, ws, "plain", "x")
	if out, code := policyShow(t, "--workspace", file); code != ExitUsage || !strings.Contains(out, "not a directory") {
		t.Errorf("policy show --workspace FILE: exit %d\n%s", code, out)
	}
	writeFile(t, ws, ".brood.toml", "bogus = \n")
	out, code := policyShow(t, "--workspace", ws)
	newFakeHelper(t)
	rc, _, runErr := broodCode(t, "run", "--workspace", ws, "--egress", "locked", "shell", "--", "true")
	if code != ExitUsage || rc != ExitUsage {
		t.Errorf("bad .brood.toml: policy show exit %d, run exit %d\n%s\n%s", code, rc, out, runErr)
	}
}

// TestForbiddenTableNamed: a table .brood.toml may not hold ([agents.*] belongs to the
// user config, [run] exists nowhere) is reported as unknown or not allowed, never as
// "missing".
func TestForbiddenTableNamed(t *testing.T) {
	noHelper(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	ws := t.TempDir()
	for _, body := range []string{"[agents.shell]\nimage = \"x\"\n", "[run]\nx = 1\n"} {
		writeFile(t, ws, ".brood.toml", body)
		out, code := policyShow(t, "--workspace", ws)
		if code != ExitUsage || !strings.Contains(out, "unknown or not allowed here") || strings.Contains(out, "missing") {
			t.Errorf(".brood.toml %q: exit %d\n%s", body, code, out)
		}
	}
}

// TestHostileWorkspaceLinks: in a workspace holding every hostilews member with each
// hostilews.Links file replaced by a link to a developer's file, policy show refuses
// each link by name and prints no line of its target.
func TestHostileWorkspaceLinks(t *testing.T) {
	noHelper(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	ws, marks := t.TempDir(), t.TempDir()
	hostilews.Plant(t, ws, marks)
	hostilews.PlantLinks(t, ws, t.TempDir())
	out, code := policyShow(t, "--workspace", ws)
	if code != ExitUsage || strings.Contains(out, "HOSTILE-LINK-SECRET") {
		t.Errorf("policy show in a workspace with linked config files: exit %d\n%s", code, out)
	}
	for _, l := range hostilews.Links {
		if !strings.Contains(out, filepath.Join(ws, l)+": is a symlink") {
			t.Errorf("%s not refused as a link:\n%s", l, out)
		}
	}
	if m := hostilews.Markers(t, marks); len(m) != 0 {
		t.Errorf("hostile workspace code ran: %v", m)
	}
}
