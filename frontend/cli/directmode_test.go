package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"brood.dev/brood/frontend/session"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
)

// directRun runs the brood command line with args in workspace w (made when empty),
// with a fresh config and state directory; config, when set, is the user config.
func directRun(t *testing.T, w, config string, args ...string) (code int, out string, ss []*session.Session) {
	t.Helper()
	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	if config != "" {
		os.MkdirAll(filepath.Join(xdg, "brood"), 0o755)
		os.WriteFile(filepath.Join(xdg, "brood", "config.toml"), []byte(config), 0o644)
	}
	out, msg, code := runBrood(t, append([]string{args[0], "--workspace", w}, args[1:]...)...)
	ss, _ = session.List()
	return code, out + msg, ss
}

// TestDirectModeRefusals: direct mode needs --yes on the command line; neither the
// workspace's .brood.toml nor the user config can turn it on. Nothing is snapshotted and
// the helper is not asked.
func TestDirectModeRefusals(t *testing.T) {
	f := newFakeHelper(t)
	w := t.TempDir()
	code, msg, ss := directRun(t, w, "", "run", "--workspace-mode", "direct", "shell", "--", "true")
	if code != ExitUsage || !strings.Contains(msg, "add --yes") || len(ss) != 0 {
		t.Fatalf("without --yes: exit %d %q sessions %d", code, msg, len(ss))
	}
	code, msg, _ = directRun(t, w, "", "run", "--workspace-mode", "mirror", "--yes", "shell")
	if code != ExitUsage || !strings.Contains(msg, "choose snapshot or direct") {
		t.Fatalf("unknown mode: exit %d %q", code, msg)
	}
	os.WriteFile(filepath.Join(w, ".brood.toml"), []byte("workspace_mode = \"direct\"\n"), 0o644)
	code, msg, ss = directRun(t, w, "", "run", "shell", "--", "true")
	if code != ExitUsage || !strings.Contains(msg, "workspace_mode") || len(ss) != 0 {
		t.Fatalf(".brood.toml: exit %d %q sessions %d", code, msg, len(ss))
	}
	os.Remove(filepath.Join(w, ".brood.toml"))
	code, msg, ss = directRun(t, w, "[run]\nworkspace_mode = \"direct\"\n", "run", "shell", "--", "true")
	if code != ExitUsage || !strings.Contains(msg, "workspace_mode") || len(ss) != 0 {
		t.Fatalf("user config: exit %d %q sessions %d", code, msg, len(ss))
	}
	if calls := f.Calls(); calls != "" {
		t.Fatalf("the helper was called: %s", calls)
	}
}

// TestDirectModeSharesWorkspace: with --yes the helper gets the workspace itself as the
// share and StartVM says Direct; no snapshot is taken and nothing is reviewed.
func TestDirectModeSharesWorkspace(t *testing.T) {
	f := newFakeHelper(t)
	w := t.TempDir()
	os.WriteFile(filepath.Join(w, "a.txt"), []byte("a\n"), 0o644)
	code, msg, ss := directRun(t, w, "", "run", "--workspace-mode", "direct", "--yes", "shell", "--", "true")
	if code != ExitOK {
		t.Fatalf("exit %d %s", code, msg)
	}
	if !strings.Contains(msg, "WARNING: DIRECT MODE: the VM mounts "+w+" itself, read-write.") || !strings.Contains(msg, "nothing to review") {
		t.Fatalf("no warning:\n%s", msg)
	}
	for _, risk := range []string{".git/config", ".env", ".git/hooks", "core.fsmonitor", "on this host at your next git command"} {
		if !strings.Contains(msg, risk) {
			t.Errorf("the direct-mode warning does not name %q:\n%s", risk, msg)
		}
	}
	if !f.StartArgs().Direct || f.Share() != w {
		t.Fatalf("StartVM direct=%v, shared %q, want %q", f.StartArgs().Direct, f.Share(), w)
	}
	if len(ss) != 1 || !ss[0].Direct {
		t.Fatalf("sessions %+v", ss)
	}
	if _, err := os.Stat(ss[0].SnapshotDir()); !os.IsNotExist(err) {
		t.Fatalf("a snapshot was taken: %v", err)
	}
	// Snapshot mode shares the snapshot, never W.
	f = newFakeHelper(t)
	if code, msg, ss = directRun(t, w, "", "run", "shell", "--", "true"); code != ExitOK || f.StartArgs().Direct ||
		f.Share() != ss[0].SnapshotDir() {
		t.Fatalf("snapshot mode: exit %d %s direct=%v shared %q", code, msg, f.StartArgs().Direct, f.Share())
	}
}

// TestPolicyShowDirect: brood policy show says whether the system policy allows direct
// mode.
func TestPolicyShowDirect(t *testing.T) {
	testenv.RequireRoot(t) // the system policy must be root-owned
	noHelper(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := t.TempDir()
	for policy, want := range map[string]string{
		"forbid_direct = true\n":       "workspace-mode direct\tforbidden\t(system)\n",
		"max_profile = \"standard\"\n": "workspace-mode direct\tallowed with --yes\t(system)\n",
	} {
		sys := writeFile(t, t.TempDir(), "policy.toml", policy)
		out, msg, code := runBrood(t, "policy", "show", "--system-policy", sys, "--workspace", dir, "--egress", "locked")
		if code != ExitOK || !strings.Contains(out, want) {
			t.Errorf("%q: exit %d %s\n%s", policy, code, msg, out)
		}
	}
}

// TestDirectSessionRefused: a session that ran in direct mode has no snapshot: diff
// (also --patch), review, apply, undo and ff refuse it with a usage error (exit 2) that
// names the session and direct mode, before any flag is judged; session list shows its
// mode.
func TestDirectSessionRefused(t *testing.T) {
	noHelper(t)
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	w := t.TempDir()
	os.WriteFile(filepath.Join(w, "a.txt"), []byte("a\n"), 0o644)
	sess, err := session.Create(w)
	if err != nil {
		t.Fatal(err)
	}
	sess.Direct = true
	if err := sess.SetState(session.StateStopped); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"diff", sess.ID}, {"diff", sess.ID, "--json"}, {"diff", sess.ID, "-p"},
		{"review", sess.ID}, {"review", sess.ID, "--all"}, {"apply", sess.ID, "--all", "--yes"}, {"apply", sess.ID, "--all"},
		{"undo", sess.ID}, {"ff", sess.ID, "master"},
	} {
		out, msg, code := runBrood(t, args...)
		want := args[0] + " session " + sess.ID + ": it ran in direct mode: the agent wrote the workspace " + w + " itself"
		if code != ExitUsage || !strings.Contains(msg, want) || !strings.Contains(msg, "nothing to review") {
			t.Errorf("%v: exit %d %q\n%s", args, code, msg, out)
		}
	}
	if got, err := os.ReadFile(filepath.Join(w, "a.txt")); err != nil || string(got) != "a\n" {
		t.Errorf("workspace changed: %q %v", got, err)
	}
	for _, cmd := range []string{"list", "ls"} {
		out, msg, code := runBrood(t, "session", cmd)
		if code != ExitOK || !strings.Contains(out, "MODE") || !regexp.MustCompile(sess.ID+`.*stopped\s+direct\s+`).MatchString(out) {
			t.Errorf("session %s: exit %d %s\n%s", cmd, code, msg, out)
		}
	}
}

// TestDirectModeForbidden: when the helper's policy forbids direct mode, brood run
// --workspace-mode direct --yes is refused (exit 3) before a session exists anywhere.
func TestDirectModeForbidden(t *testing.T) {
	f := newFakeHelper(t)
	f.Policy = &api.Policy{Profile: "locked", DirectForbidden: true}
	code, msg, ss := directRun(t, t.TempDir(), "", "run", "--workspace-mode", "direct", "--yes", "shell", "--", "true")
	if code != ExitRefused || !strings.Contains(msg, "forbid_direct") || len(ss) != 0 {
		t.Fatalf("exit %d %q sessions %d", code, msg, len(ss))
	}
	if calls := f.Calls(); strings.Contains(calls, string(api.CallCreateSession)) {
		t.Fatalf("a helper session was created: %s", calls)
	}
}

// TestPolicyShowSecrets: brood policy show says which secrets features the system policy
// forbids (forbid_raw_env, forbid_git_token, forbid_login_write_back, allow_ssh_agent),
// in the text and in --json.
func TestPolicyShowSecrets(t *testing.T) {
	testenv.RequireRoot(t) // the system policy must be root-owned
	noHelper(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := t.TempDir()
	all := []string{"raw_env", "git-token", "write-back-logins", "ssh-agent"}
	for policy, forbidden := range map[string][]string{
		"forbid_raw_env = true\nforbid_git_token = true\nforbid_login_write_back = true\nallow_ssh_agent = false\n": all,
		"forbid_git_token = true\n":  {"git-token"},
		"allow_ssh_agent = true\n":   nil,
		"max_profile = \"locked\"\n": nil,
	} {
		sys := writeFile(t, t.TempDir(), "policy.toml", policy)
		out, msg, code := runBrood(t, "policy", "show", "--system-policy", sys, "--workspace", dir, "--egress", "locked")
		if code != ExitOK {
			t.Fatalf("%q: exit %d %s", policy, code, msg)
		}
		for _, what := range all {
			want := what + "\tallowed\t(system)\n"
			if slices.Contains(forbidden, what) {
				want = what + "\tforbidden\t(system)\n"
			}
			if !strings.Contains(out, want) {
				t.Errorf("%q: no line %q:\n%s", policy, want, out)
			}
		}
		js, msg, code := runBrood(t, "policy", "show", "--json", "--system-policy", sys, "--workspace", dir, "--egress", "locked")
		var got map[string]any
		if err := json.Unmarshal([]byte(js), &got); code != ExitOK || err != nil {
			t.Fatalf("%q --json: exit %d %s %v", policy, code, msg, err)
		}
		if _, ok := got["ssh_agent_forbidden"]; ok != slices.Contains(forbidden, "ssh-agent") {
			t.Errorf("%q --json: ssh_agent_forbidden %v:\n%s", policy, got["ssh_agent_forbidden"], js)
		}
	}
}
