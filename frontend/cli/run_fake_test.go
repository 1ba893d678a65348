package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/fakehelper"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/frontend/sshclient"
	"brood.dev/brood/helper/api"
)

// newFakeHelper starts a fakehelper.Helper on a temporary socket and points
// $BROOD_HELPER_SOCKET at it for the test.
func newFakeHelper(t *testing.T) *fakehelper.Helper {
	t.Helper()
	f, sock := fakehelper.Start(t)
	t.Setenv(api.SocketEnv, sock)
	return f
}

func mustKey(t *testing.T) ssh.Signer {
	s, _, err := sshclient.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fakeRun runs brood run-image against the fake helper in a fresh workspace and state.
func fakeRun(t *testing.T, args ...string) (code int, stdout, stderr string, ss []*session.Session) {
	t.Helper()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	w := t.TempDir()
	os.WriteFile(filepath.Join(w, "README.md"), []byte("hello\n"), 0o644)
	code, stdout, stderr = runCLI(t, append([]string{args[0], "--workspace", w}, args[1:]...)...) // run_lifecycle_test.go
	ss, _ = session.List()
	return code, stdout, stderr, ss
}

func TestRunFakeHelperHappyPath(t *testing.T) {
	f := newFakeHelper(t)
	code, stdout, stderr, ss := fakeRun(t, "run-image", "--cpus", "3", "--memory", "700", "--timeout", "20s", "test", "--", "echo", "it's")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if stdout != "ran: exec echo 'it'\\''s'\n" {
		t.Errorf("stdout %q", stdout)
	}
	a := f.StartArgs()
	if a.ID != "0000abcd" || a.Image != "test" || a.CPUs != 3 || a.MemoryMiB != 700 || a.TimeoutSec != 20 || !strings.HasPrefix(a.ClientKey, "ssh-ed25519 ") || a.Clock == 0 {
		t.Errorf("StartVM args %+v", a)
	}
	if len(ss) != 1 || ss[0].State != session.StateStopped || !strings.Contains(stderr, "brood: session "+ss[0].ID) {
		t.Fatalf("sessions %+v\n%s", ss, stderr)
	}
	if calls := f.Calls(); !strings.Contains(calls, "create_session") || !strings.Contains(calls, "wait_vm") || !strings.HasSuffix(calls, "destroy_session") {
		t.Errorf("calls %s", calls)
	}
	if !strings.Contains(stderr, "no changes in session") {
		t.Errorf("stderr %s", stderr)
	}
}

// TestRunRefusesWrongHostKey: a guest presenting any key but the one StartVM reported is
// refused; brood stops the VM, keeps the session and runs nothing.
func TestRunRefusesWrongHostKey(t *testing.T) {
	f := newFakeHelper(t)
	f.GuestKey = mustKey(t)
	code, stdout, stderr, ss := fakeRun(t, "run-image", "--console", "test", "--", "true")
	if code != ExitError || !strings.Contains(stderr, "host key does not match") {
		t.Errorf("exit %d\n%s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("ran something: %q", stdout)
	}
	if len(ss) != 1 || ss[0].State != session.StateStopped || !strings.Contains(stderr, "the session is kept") {
		t.Errorf("sessions %+v\n%s", ss, stderr)
	}
	if strings.Contains(f.Calls(), "stop_vm") == false && f.Outcome() != api.OutcomePoweroff {
		t.Errorf("the VM was neither stopped nor gone: calls %s", f.Calls())
	}
	t.Logf("stderr:\n%s", stderr)
}

// TestRunStartVMRefused: StartVM's error is reported with a hint and the snapshot kept.
func TestRunStartVMRefused(t *testing.T) {
	f := newFakeHelper(t)
	f.StartErr = &api.Error{Code: api.CodeUnavailable, Message: "image \"test\" is not built"}
	code, _, stderr, ss := fakeRun(t, "run-image", "test", "--", "true")
	if code != ExitError || !strings.Contains(stderr, "start VM: image \"test\" is not built") || !strings.Contains(stderr, "sudo broodd-helper image build test") {
		t.Errorf("exit %d\n%s", code, stderr)
	}
	if len(ss) != 1 || ss[0].State != session.StateReady {
		t.Errorf("sessions %+v", ss)
	}
	// The hint may ask for the recipes (list_images) after the VM was refused.
	if calls := f.Calls(); !strings.Contains(calls, "start_vm destroy_session") {
		t.Errorf("calls %s", calls)
	}
}

// TestRunAgentCommandAndEnv: the agent's command with the arguments after --, and only
// the environment its patterns name, reach the guest.
func TestRunAgentCommandAndEnv(t *testing.T) {
	f := newFakeHelper(t)
	t.Setenv("OPENAI_API_KEY", "sk-1")
	t.Setenv("CODEX_SANDBOX_FLAG", "1")
	t.Setenv("CODEX_HOME", "/h") // a host directory: never forwarded (agenthome.go hostPathVars)
	t.Setenv("ANTHROPIC_API_KEY", "not-for-codex")
	code, stdout, stderr, _ := fakeRun(t, "run", "codex", "--", "--model", "o3 mini")
	if code != 0 || stdout != "ran: exec codex --model 'o3 mini'\n" {
		t.Errorf("exit %d stdout %q\n%s", code, stdout, stderr)
	}
	if got := strings.Join(f.Env(), " "); got != "CODEX_SANDBOX_FLAG=1 OPENAI_API_KEY=sk-1" {
		t.Errorf("env sent: %q", got)
	}
	if f.StartArgs().Image != "codex" {
		t.Errorf("image %q", f.StartArgs().Image)
	}

	f = newFakeHelper(t)
	code, stdout, stderr, _ = fakeRun(t, "run", "--image", "mine", "shell", "--", "ls", "-la")
	if code != 0 || stdout != "ran: exec ls -la\n" || f.StartArgs().Image != "mine" || len(f.Env()) != 0 {
		t.Errorf("shell -- ls: exit %d stdout %q image %q env %q\n%s", code, stdout, f.StartArgs().Image, f.Env(), stderr)
	}
}

func TestImageHint(t *testing.T) {
	agent := func(name, image, flag string) runRequest {
		return runRequest{agent: Agent{Name: name, Image: image}, image: image, flags: runFlags{image: flag}}
	}
	if h := imageHint(agent("run-image", "test", ""), nil, nil); !strings.Contains(h, "sudo broodd-helper image build test") || strings.Contains(h, "--image") {
		t.Errorf("build hint %q", h)
	}
	if h := imageHint(agent("claude-code", "claude-code", ""), []string{"test"}, nil); !strings.Contains(h, "--image") || !strings.Contains(h, "built images: test") {
		t.Errorf("agent image hint %q", h)
	}
	// --image was given: the hint does not tell the developer to pass it.
	if h := imageHint(agent("shell", "nosuch", "nosuch"), []string{}, nil); strings.Contains(h, "--image") || !strings.Contains(h, "no image is built yet") {
		t.Errorf("--image hint %q", h)
	}
	// A name with no recipe gets the recipes, never a build command; a recipe gets one.
	if h := imageHint(agent("run-image", "nosuch", ""), []string{"test"}, []string{"codex", "test"}); strings.Contains(h, "image build") ||
		!strings.Contains(h, `no recipe "nosuch" (recipes: codex, test)`) {
		t.Errorf("no-recipe hint %q", h)
	}
	if h := imageHint(agent("run-image", "codex", ""), []string{"test"}, []string{"codex", "test"}); !strings.Contains(h, "sudo broodd-helper image build codex") {
		t.Errorf("recipe hint %q", h)
	}
}

// TestRunEgressFlags: no network unless --egress; the profile, the extra hosts and the
// built-in agent's name go to the helper, which decides.
func TestRunEgressFlags(t *testing.T) {
	f := newFakeHelper(t)
	code, _, stderr, _ := fakeRun(t, "run", "shell", "--", "true")
	if code != 0 || f.StartArgs().Egress != "" || f.StartArgs().AllowHosts != nil || f.StartArgs().Agent != "" ||
		!strings.Contains(stderr, "network: none") {
		t.Errorf("default: exit %d args %+v\n%s", code, f.StartArgs(), stderr)
	}
	f = newFakeHelper(t)
	code, _, stderr, _ = fakeRun(t, "run", "--egress", "standard", "--allow-host", "example.com", "--allow-host", "pypi.org:443/tcp", "codex")
	a := f.StartArgs()
	if code != 0 || a.Egress != "standard" || strings.Join(a.AllowHosts, ",") != "example.com,pypi.org:443/tcp" || a.Agent != "codex" {
		t.Errorf("egress: exit %d args %+v\n%s", code, a, stderr)
	}
	for _, args := range [][]string{{"run", "--egress", "open", "shell"}, {"run", "--allow-host", "x.org", "shell"}} {
		if code, _, stderr := broodCode(t, args...); code != ExitUsage {
			t.Errorf("%q: exit %d %s", args, code, stderr)
		}
	}
}

// TestRunEgressLayers: the user's config.toml [egress] table (accepted next to [agents])
// and the workspace's .brood.toml reach the helper as their own layers; a malformed
// workspace file stops the run before any session exists.
func TestRunEgressLayers(t *testing.T) {
	f := newFakeHelper(t)
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	os.MkdirAll(filepath.Join(cfg, "brood"), 0o700)
	os.WriteFile(filepath.Join(cfg, "brood", "config.toml"), []byte(
		"[agents.mine]\nimage = \"test\"\ncommand = [\"true\"]\n\n[egress]\nprofile = \"locked\"\ndeny_hosts = [\"*.paste.example\"]\n"), 0o600)
	w := t.TempDir()
	os.WriteFile(filepath.Join(w, ".brood.toml"), []byte("[egress]\ndeny_hosts = [\"tracker.example\"]\n"), 0o644)
	run := func(args ...string) (int, string) {
		code, _, stderr := runCLI(t, append([]string{args[0], "--workspace", w}, args[1:]...)...) // run_lifecycle_test.go
		return code, stderr
	}
	code, stderr := run("run", "--egress", "standard", "mine")
	a := f.StartArgs()
	if code != 0 || a.UserEgress == nil || a.UserEgress.Profile != "locked" ||
		strings.Join(a.UserEgress.DenyHosts, ",") != "*.paste.example" ||
		a.WorkspaceEgress == nil || strings.Join(a.WorkspaceEgress.DenyHosts, ",") != "tracker.example" {
		t.Fatalf("layers: exit %d args %+v user %+v ws %+v\n%s", code, a, a.UserEgress, a.WorkspaceEgress, stderr)
	}
	before, _ := session.List()
	os.WriteFile(filepath.Join(w, ".brood.toml"), []byte("[egress]\nprofile = 7\n"), 0o644)
	if code, stderr := run("run", "--egress", "standard", "mine"); code != ExitUsage || !strings.Contains(stderr, ".brood.toml") {
		t.Errorf("malformed .brood.toml: exit %d\n%s", code, stderr)
	}
	if after, _ := session.List(); len(after) != len(before) {
		t.Errorf("a malformed .brood.toml left a session behind: %d -> %d", len(before), len(after))
	}
}

// TestRunRecordsEgressSummary: the helper's summary of the session's DNS decisions is
// printed after the VM is gone (with the secret swaps and blocks per host) and kept in
// the session directory (vm.json).
func TestRunRecordsEgressSummary(t *testing.T) {
	f := newFakeHelper(t)
	f.Egress = &api.EgressSummary{Allowed: map[string]int{"api.openai.example": 3},
		Refused: map[string]int{"x.attacker.example": 1}, Pinned: []string{"192.0.2.7"}, ConnsRefused: 2,
		Secrets: map[string]api.SecretCounts{"api.openai.example": {Swaps: 4, Blocks: 1}}}
	code, _, stderr, ss := fakeRun(t, "run", "--egress", "locked", "shell", "--", "true")
	if code != 0 || len(ss) != 1 || !strings.Contains(stderr, "1 name(s) allowed, 1 refused, 1 address(es) pinned, 2 connection(s) refused by the name gate") ||
		!strings.Contains(stderr, "secrets: api.openai.example: 4 request(s) with real values swapped in, 1 refused, 0 token refresh(es)") {
		t.Fatalf("exit %d sessions %d\n%s", code, len(ss), stderr)
	}
	b, err := os.ReadFile(filepath.Join(ss[0].Dir, frontend.VMRecordFile))
	if err != nil {
		t.Fatal(err)
	}
	var rec frontend.VMRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Egress == nil || rec.Egress.Refused["x.attacker.example"] != 1 ||
		len(rec.Egress.Pinned) != 1 {
		t.Errorf("vm.json egress = %+v (%v)\n%s", rec.Egress, err, b)
	}
}

// TestRunKeepsEgressLog: a session with more decisions than wait_vm's summary lists
// (api.SummaryNames) ends with every one of them in the session directory
// (frontend.EgressLogFile, fetched with egress_log), and vm.json and the run's output say
// where they are and how many the helper's quota dropped.
func TestRunKeepsEgressLog(t *testing.T) {
	f := newFakeHelper(t)
	const n = 3 * api.SummaryNames
	var log bytes.Buffer
	refused := map[string]int{}
	for i := range n {
		name := fmt.Sprintf("x%03d.attacker.example.", i)
		fmt.Fprintf(&log, `{"name":%q,"type":"A","verdict":"refused"}`+"\n", name)
		if i < api.SummaryNames {
			refused[name] = 1
		}
	}
	f.Egress = &api.EgressSummary{Refused: refused, Queries: n + 5, RefusedNames: n, Truncated: true, LogDropped: 5}
	f.EgressLog = log.Bytes()
	code, _, stderr, ss := fakeRun(t, "run", "--egress", "locked", "shell", "--", "true")
	if code != 0 || len(ss) != 1 {
		t.Fatalf("exit %d sessions %d\n%s", code, len(ss), stderr)
	}
	p := filepath.Join(ss[0].Dir, frontend.EgressLogFile)
	kept, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(kept, log.Bytes()) {
		t.Fatalf("%s: %d bytes (%v), want the helper's %d", p, len(kept), err, log.Len())
	}
	for _, want := range []string{fmt.Sprintf("%d refused", n), fmt.Sprintf("egress decisions: %d kept in %s, 5 dropped", n, p),
		"5 egress decision(s) are missing"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("output lacks %q:\n%s", want, stderr)
		}
	}
	b, err := os.ReadFile(filepath.Join(ss[0].Dir, frontend.VMRecordFile))
	if err != nil {
		t.Fatal(err)
	}
	var rec frontend.VMRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.EgressLog == nil || rec.EgressLog.Path != p ||
		rec.EgressLog.Lines != n || rec.EgressLog.Dropped != 5 || rec.EgressLog.Error != "" {
		t.Errorf("vm.json egress_log = %+v (%v)", rec.EgressLog, err)
	}
}

// TestRunSkipsStateDir: `brood run --workspace ~` must not copy brood's own state (other
// sessions' snapshots and journals) into the new snapshot.
func TestRunSkipsStateDir(t *testing.T) {
	newFakeHelper(t)
	w := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	state := filepath.Join(w, ".local", "state", "brood")
	t.Setenv("BROOD_STATE_DIR", state)
	os.MkdirAll(filepath.Join(state, "sessions", "0123456789ab", "snapshot"), 0o700)
	os.WriteFile(filepath.Join(state, "sessions", "0123456789ab", "snapshot", "other.txt"), []byte("other session\n"), 0o600)
	os.WriteFile(filepath.Join(w, "README.md"), []byte("hello\n"), 0o644)
	code, _, stderr := runCLI(t, "run", "--workspace", w, "shell", "--", "true") // run_lifecycle_test.go
	if code != ExitOK {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	ss, _ := session.List()
	var snap string
	for _, s := range ss {
		if s.ID != "0123456789ab" {
			snap = s.SnapshotDir()
		}
	}
	if snap == "" {
		t.Fatalf("no new session\n%s", stderr)
	}
	if _, err := os.Stat(filepath.Join(snap, "README.md")); err != nil {
		t.Errorf("README.md not snapshotted: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(snap, ".local", "state", "brood")); !os.IsNotExist(err) {
		t.Errorf("brood's state dir was copied into the snapshot (%v)", err)
	}
}
