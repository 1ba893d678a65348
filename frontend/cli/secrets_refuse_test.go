package cli

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"brood.dev/brood/frontend/fakehelper"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
	"golang.org/x/crypto/ssh"
)

// refusedEarly fails t unless the run exited 3 before anything existed (no
// create_session call, no session directory) with every one of wants in its stderr.
func refusedEarly(t *testing.T, what string, code int, stderr, calls string, sessions int, wants ...string) {
	t.Helper()
	if code != 3 || strings.Contains(calls, "create_session") || sessions != 0 {
		t.Fatalf("%s: exit %d, %d session(s), calls %s\n%s", what, code, sessions, calls, stderr)
	}
	for _, w := range wants {
		if !strings.Contains(stderr, w) {
			t.Errorf("%s: stderr lacks %q:\n%s", what, w, stderr)
		}
	}
}

// TestRunWriteBackForbiddenWithoutCredential: forbid_login_write_back refuses
// --write-back-logins before the snapshot even for a run with no credential and no
// network; the user config's write_back_logins = true is refused naming the key and its
// file; --write-back-logins=false overrides the key and the run goes on.
func TestRunWriteBackForbiddenWithoutCredential(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	f := newFakeHelper(t)
	f.Caps.Secrets = true
	f.Policy = &api.Policy{Profile: "standard", LoginWriteBackForbidden: true}
	code, _, stderr, ss := fakeRun(t, "run", "--write-back-logins", "shell", "--", "true")
	refusedEarly(t, "flag", code, stderr, f.Calls(), len(ss), "--write-back-logins", "forbid_login_write_back = true")

	cfg := t.TempDir()
	os.MkdirAll(filepath.Join(cfg, "brood"), 0o700)
	os.WriteFile(filepath.Join(cfg, "brood", "config.toml"), []byte("[secrets]\nwrite_back_logins = true\n"), 0o600)
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	code, _, stderr = runCLI(t, "run", "--workspace", t.TempDir(), "shell", "--", "true")
	refusedEarly(t, "config key", code, stderr, f.Calls(), 0, "write_back_logins in "+filepath.Join(cfg, "brood", "config.toml"), "forbid_login_write_back")
	if strings.Contains(stderr, "--write-back-logins:") {
		t.Errorf("config key: the message blames the flag:\n%s", stderr)
	}
	if code, _, stderr = runCLI(t, "run", "--workspace", t.TempDir(), "--write-back-logins=false", "shell", "--", "true"); code != 0 {
		t.Fatalf("--write-back-logins=false over the config key: exit %d\n%s", code, stderr)
	}
}

// TestRunPlaceholderHostRefused: a custom agent forwarding a key whose bound host the
// session's policy does not allow is refused before the snapshot (exit 3), naming the
// variable, the host and the ways out; with the host allowed it runs. --git-token with a
// permissive profile is refused early and does not suggest raw_env.
func TestRunPlaceholderHostRefused(t *testing.T) {
	f := aiderHelper(t, "[agents.aider]\nimage = \"test\"\ncommand = [\"true\"]\nenv = [\"OPENAI_API_KEY\", \"AIDER_*\"]\n")
	code, _, stderr := runCLI(t, "run", "--workspace", t.TempDir(), "--egress", "standard", "aider")
	refusedEarly(t, "aider", code, stderr, f.Calls(), 0, "$OPENAI_API_KEY", "api.openai.com", "--allow-host api.openai.com", `allow_hosts = ["api.openai.com"]`, "raw_env")
	if strings.Contains(stderr, "CANARY") {
		t.Errorf("the refusal shows the value:\n%s", stderr)
	}
	f.Policy.Hosts = append(f.Policy.Hosts, api.PolicyHost{Name: "api.openai.com"})
	if code, _, stderr = runCLI(t, "run", "--workspace", t.TempDir(), "--egress", "standard", "aider"); code != 0 {
		t.Fatalf("host allowed: exit %d\n%s", code, stderr)
	}

	t.Setenv("GH_TOKEN", "ghp_CANARY"+strings.Repeat("g", 30))
	f = newFakeHelper(t)
	f.Caps.Secrets = true
	f.Policy = &api.Policy{Profile: "permissive"}
	code, _, stderr, ss := fakeRun(t, "run", "--egress", "permissive", "--git-token", "shell", "--", "true")
	refusedEarly(t, "permissive --git-token", code, stderr, f.Calls(), len(ss), "--git-token", "--egress standard")
	if strings.Contains(stderr, "raw_env") {
		t.Errorf("permissive --git-token suggests raw_env:\n%s", stderr)
	}
}

// TestRunGitTokenNeedsNetwork: --git-token without a network is a usage error (exit 2),
// as --ssh-agent is, before anything exists.
func TestRunGitTokenNeedsNetwork(t *testing.T) {
	t.Setenv("GH_TOKEN", "ghp_CANARY"+strings.Repeat("g", 30))
	f := newFakeHelper(t)
	f.Caps.Secrets = true
	code, _, stderr, ss := fakeRun(t, "run", "--egress", "none", "--git-token", "shell", "--", "true")
	if code != 2 || len(ss) != 0 || strings.Contains(f.Calls(), "create_session") || !strings.Contains(stderr, "--git-token needs a network") {
		t.Fatalf("exit %d, %d session(s), calls %s\n%s", code, len(ss), f.Calls(), stderr)
	}
}

// TestRunSSHAgentForbidden: allow_ssh_agent = false (SSHAgentForbidden in resolve_policy's
// answer) refuses --ssh-agent before the snapshot with exit 3.
func TestRunSSHAgentForbidden(t *testing.T) {
	f := newFakeHelper(t)
	_, devKey := testenv.SSHSigner(t)
	devAgent(t, map[string]ed25519.PrivateKey{"dev-key": devKey})
	f.Policy = &api.Policy{Profile: "locked", SSHAgentForbidden: true}
	code, _, stderr, ss := fakeRun(t, "run", "--egress", "locked", "--ssh-agent", "dev-key", "shell", "--", "true")
	refusedEarly(t, "ssh agent", code, stderr, f.Calls(), len(ss), "--ssh-agent", "allow_ssh_agent = false")
}

// TestRunSecretsMessages: --write-back-logins in a run with no login file says it does
// nothing; --git-token without a token names GH_TOKEN, GITHUB_TOKEN and gh (exit 2); a
// custom agent's invalid value names the agent; a forwarded agent that made no signature
// reports "0 signatures" with no empty list.
func TestRunSecretsMessages(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	f := newFakeHelper(t)
	f.Caps.Secrets = true
	code, _, stderr, _ := fakeRun(t, "run", "--write-back-logins", "shell", "--", "true")
	if code != 0 || !strings.Contains(stderr, "secrets: --write-back-logins does nothing in this run: no login file is copied with placeholders") {
		t.Errorf("write-back, no login file: exit %d\n%s", code, stderr)
	}

	t.Setenv("GH_TOKEN", "")
	t.Setenv("GITHUB_TOKEN", "")
	code, _, stderr, ss := fakeRun(t, "run", "--egress", "standard", "--git-token", "shell", "--", "true")
	if code != 2 || len(ss) != 0 || !strings.Contains(stderr, "$GH_TOKEN") || !strings.Contains(stderr, "$GITHUB_TOKEN") || !strings.Contains(stderr, "gh auth") {
		t.Errorf("git token missing: exit %d\n%s", code, stderr)
	}

	t.Setenv("MY_PASSWORD", "correct horse battery staple")
	cfg := t.TempDir()
	os.MkdirAll(filepath.Join(cfg, "brood"), 0o700)
	os.WriteFile(filepath.Join(cfg, "brood", "config.toml"), []byte("[agents.probe]\nimage = \"test\"\ncommand = [\"true\"]\nenv = [\"MY_PASSWORD\"]\n"), 0o600)
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	code, _, stderr = runCLI(t, "run", "--workspace", t.TempDir(), "probe")
	if code == 0 || !strings.Contains(stderr, "secrets of agent probe: ") || strings.Contains(stderr, "horse") {
		t.Errorf("custom agent's invalid value: exit %d\n%s", code, stderr)
	}
}

// TestRunSSHAgentNoSignature: the summary of a forwarded agent the command never used.
func TestRunSSHAgentNoSignature(t *testing.T) {
	f := newFakeHelper(t)
	_, k := testenv.SSHSigner(t)
	devAgent(t, map[string]ed25519.PrivateKey{"dev-key": k})
	home := t.TempDir()
	t.Setenv("HOME", home)
	host, _ := testenv.SSHSigner(t)
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "known_hosts"), []byte("github.com "+string(ssh.MarshalAuthorizedKey(host.PublicKey()))), 0o600)
	f.VMEgress = &api.EgressInfo{Profile: "locked", Hosts: []string{"github.com (22/tcp, 443/tcp)"}}
	code, _, stderr, _ := fakeRun(t, "run", "--egress", "locked", "--ssh-agent", "dev-key", "shell", "--", "true")
	if code != 0 || !strings.Contains(stderr, "ssh-agent: 0 signatures, 0 request(s) refused") || strings.Contains(stderr, "()") {
		t.Errorf("exit %d\n%s", code, stderr)
	}
}

// TestREADMEAiderExample: the README's [agents.aider] example, as the user config, runs
// on the default network: its [egress] table sends api.openai.com in the user layer, and
// with the hosts that layer adds the preflight lets $OPENAI_API_KEY's placeholder through.
func TestREADMEAiderExample(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), "```toml\n[agents.aider]")
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("README has no [agents.aider] toml block")
	}
	block = strings.ReplaceAll("[agents.aider]"+block, `image = "codex"`, `image = "test"`) // the fake helper's image
	f := aiderHelper(t, block)
	code, _, stderr := runCLI(t, "run", "--workspace", t.TempDir(), "aider")
	u := f.PolicyArgs().UserEgress
	if code != 3 || u == nil || !slices.Contains(u.AllowHosts, "api.openai.com") {
		t.Fatalf("a policy without the user layer's hosts: exit %d, user layer %+v\n%s", code, u, stderr)
	}
	for _, h := range u.AllowHosts {
		f.Policy.Hosts = append(f.Policy.Hosts, api.PolicyHost{Name: h, Layer: "user"})
	}
	if code, _, stderr = runCLI(t, "run", "--workspace", t.TempDir(), "aider"); code != 0 || f.StartArgs().Secrets == nil {
		t.Fatalf("with the user layer's hosts: exit %d\n%s", code, stderr)
	}
}

// TestRunStartVMPolicyRefusal: a VM the helper refuses by policy at start_vm (its own
// check, behind the frontend's) exits 3 and leaves no session behind.
func TestRunStartVMPolicyRefusal(t *testing.T) {
	f := newFakeHelper(t)
	f.StartErr = &api.Error{Code: api.CodePolicy, Message: "start VM of session 0000abcd with --ssh-agent: egress policy refused: the system policy forbids it"}
	code, _, stderr, ss := fakeRun(t, "run", "shell", "--", "true")
	if code != 3 || len(ss) != 0 || strings.Contains(stderr, "snapshot is kept") || !strings.Contains(stderr, "nothing was kept") {
		t.Fatalf("exit %d, %d session(s)\n%s", code, len(ss), stderr)
	}
}

// TestRunOfflineNotes: with --egress none a placeholder's note does not claim the real
// value goes to its host; with a network it does.
func TestRunOfflineNotes(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("OPENAI_API_KEY", "sk-proj-CANARY"+strings.Repeat("k", 40))
	f := newFakeHelper(t)
	f.Caps.Secrets = true
	f.SecretsCA = sessionCA(t)
	code, stdout, stderr, _ := fakeRun(t, "run", "--egress", "none", "codex")
	out := stdout + stderr
	if code != 0 || strings.Contains(out, "goes only to") || !strings.Contains(out, "$OPENAI_API_KEY is a placeholder; no network in this session (--egress), so the real value is not usable") {
		t.Errorf("offline: exit %d\n%s", code, out)
	}
	code, stdout, stderr, _ = fakeRun(t, "run", "--egress", "standard", "codex")
	if out = stdout + stderr; code != 0 || !strings.Contains(out, "the real value goes only to api.openai.com") {
		t.Errorf("online: exit %d\n%s", code, out)
	}
}

// aiderHelper sets up a run of a custom agent forwarding a canary $OPENAI_API_KEY: a home,
// the user config (config.toml holding config), a state dir and a swapping fake helper
// whose standard policy allows only github.com. It returns the helper.
func aiderHelper(t *testing.T, config string) *fakehelper.Helper {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("OPENAI_API_KEY", "sk-proj-CANARY"+strings.Repeat("k", 40))
	f := newFakeHelper(t)
	f.Caps.Secrets = true
	f.SecretsCA = sessionCA(t)
	f.Policy = &api.Policy{Profile: "standard", Hosts: []api.PolicyHost{{Name: "github.com"}}}
	cfg := t.TempDir()
	os.MkdirAll(filepath.Join(cfg, "brood"), 0o700)
	os.WriteFile(filepath.Join(cfg, "brood", "config.toml"), []byte(config), 0o600)
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	return f
}
