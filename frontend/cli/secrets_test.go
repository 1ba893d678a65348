package cli

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"brood.dev/brood/internal/testenv"

	"brood.dev/brood/frontend/fakehelper"
	"brood.dev/brood/helper/api"
)

// sessionCA returns a fresh test CA's certificate, PEM (testenv.CAPEM), as the helper's
// session CA.
func sessionCA(t *testing.T) string {
	t.Helper()
	return testenv.CAPEM(t)
}

// TestRunPlaceholders: `brood run claude-code` against a helper that swaps placeholders:
// the key variable, the generated ~/.claude.json and the host's OAuth login file reach
// the guest as placeholders only; StartVM carries the real values; the run output says
// where each may go.
func TestRunPlaceholders(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	key := "sk-ant-api03-CANARYKEY" + strings.Repeat("k", 80)
	t.Setenv("ANTHROPIC_API_KEY", key)
	// A login file as well: the key takes precedence, so the file is neither read nor sent.
	os.MkdirAll(filepath.Join(home, ".claude"), 0o700)
	os.WriteFile(filepath.Join(home, ".claude", ".credentials.json"), []byte(`{"claudeAiOauth":{"accessToken":"sk-ant-oat01-OAUTHCANARY`+strings.Repeat("o", 60)+`"}}`), 0o600)
	f := newFakeHelper(t)
	f.Caps.Secrets = true
	f.SecretsCA = sessionCA(t)
	code, _, stderr, _ := fakeRun(t, "run", "claude-code")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	sec := f.StartArgs().Secrets
	if sec == nil || len(sec.Bindings) != 1 || sec.Bindings[0].Value != key || sec.Bindings[0].Hosts[0] != "api.anthropic.com" {
		t.Fatalf("StartVM secrets %+v", sec)
	}
	ph := sec.Bindings[0].Placeholder
	if !strings.Contains(strings.Join(f.Env(), "\n"), "ANTHROPIC_API_KEY="+ph) || strings.Contains(strings.Join(f.Env(), "\n"), key) {
		t.Fatalf("guest env %v", f.Env())
	}
	for _, hf := range f.HomeFiles() {
		if bytes.Contains(hf.Data, []byte(key)) || bytes.Contains(hf.Data, []byte(key[len(key)-20:])) {
			t.Fatalf("%s holds the real key", hf.Path)
		}
		if hf.Path == ".claude/.credentials.json" || bytes.Contains(hf.Data, []byte("OAUTHCANARY")) {
			t.Fatalf("the login file was sent although a key takes precedence: %s", hf.Path)
		}
	}
	if !strings.Contains(stderr, "secrets: $ANTHROPIC_API_KEY is a placeholder; the real value goes only to api.anthropic.com") ||
		strings.Contains(stderr, key) {
		t.Fatalf("run output:\n%s", stderr)
	}
	if len(f.TrustedCAs()) != 1 {
		t.Fatal("the guest was not asked to trust the session CA")
	}
}

// TestRunLoginFilePlaceholders: without an API key, the host's ~/.claude/.credentials.json
// is sent with placeholders and the run output says Claude Code uses it (not that it
// will ask to sign in); without a swapping helper, or with --no-settings, it is not sent
// at all and the output says Claude Code will ask to sign in.
func TestRunLoginFilePlaceholders(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("ANTHROPIC_API_KEY", "")
	access := "sk-ant-oat01-CANARY" + strings.Repeat("a", 80)
	os.MkdirAll(filepath.Join(home, ".claude"), 0o700)
	os.WriteFile(filepath.Join(home, ".claude", ".credentials.json"), []byte(`{"claudeAiOauth":{"accessToken":"`+access+`","refreshToken":"sk-ant-ort01-CANARY`+strings.Repeat("r", 80)+`"}}`), 0o600)
	for _, swaps := range []bool{false, true} {
		f := newFakeHelper(t)
		f.Caps.Secrets = swaps
		f.SecretsCA = sessionCA(t)
		code, _, stderr, _ := fakeRun(t, "run", "claude-code")
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		uses := strings.Contains(stderr, "Claude Code uses your sign-in from ~/.claude/.credentials.json, with placeholders")
		asks := strings.Contains(stderr, "Claude Code will ask to sign in")
		if uses != swaps || asks == swaps {
			t.Errorf("swaps=%v: login notes (uses %v, asks %v):\n%s", swaps, uses, asks, stderr)
		}
		var sent bool
		for _, hf := range f.HomeFiles() {
			if bytes.Contains(hf.Data, []byte("CANARY")) {
				t.Fatalf("swaps=%v: %s holds a real token", swaps, hf.Path)
			}
			sent = sent || hf.Path == ".claude/.credentials.json"
		}
		if sent != swaps {
			t.Fatalf("swaps=%v: login file sent = %v", swaps, sent)
		}
		// The login's hosts are asked for only with its tokens (StartVMArgs.Logins).
		if got := f.StartArgs().Logins; swaps != slices.Equal(got, []string{"claude"}) || !swaps && len(got) != 0 {
			t.Fatalf("swaps=%v: start_vm logins %v", swaps, got)
		}
	}
	f := newFakeHelper(t)
	f.Caps.Secrets = true
	f.SecretsCA = sessionCA(t)
	code, _, stderr, _ := fakeRun(t, "run", "--no-settings", "claude-code")
	if code != 0 {
		t.Fatalf("--no-settings: exit %d\n%s", code, stderr)
	}
	for _, hf := range f.HomeFiles() {
		if hf.Path == ".claude/.credentials.json" || bytes.Contains(hf.Data, []byte("CANARY")) {
			t.Fatalf("--no-settings sent the login file (%s)", hf.Path)
		}
	}
	if !strings.Contains(stderr, "Claude Code will ask to sign in (--no-settings: no host file of the agent is read, its login file neither)") {
		t.Errorf("--no-settings: no note about the login file:\n%s", stderr)
	}
}

// TestPolicyShowLogins: with a login file on the host and no API key, policy show asks
// the helper for the logins brood run forwards (the same policy inputs as the run), and
// computed locally lists the login's hosts with the login as their source; with the
// agent's API key in the environment it forwards none.
func TestPolicyShowLogins(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("CODEX_API_KEY", "")
	os.MkdirAll(filepath.Join(home, ".codex"), 0o700)
	os.WriteFile(filepath.Join(home, ".codex", "auth.json"), []byte(`{"tokens":{"access_token":"at-CANARY`+strings.Repeat("a", 40)+`","refresh_token":"rt-CANARY`+strings.Repeat("r", 40)+`"}}`), 0o600)
	ws := t.TempDir()
	f := newFakeHelper(t)
	f.Caps.Secrets = true
	f.SecretsCA = sessionCA(t)
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	if code, _, stderr, _ := fakeRun(t, "run", "--workspace", ws, "codex"); code != 0 {
		t.Fatalf("run codex: exit %d\n%s", code, stderr)
	}
	if _, code := policyShow(t, "--workspace", ws, "--agent", "codex"); code != 0 {
		t.Fatalf("policy show: exit %d", code)
	}
	started, _ := json.Marshal(f.StartArgs().PolicyArgs())
	shown, _ := json.Marshal(f.PolicyArgs())
	if string(shown) != string(started) || !slices.Equal(f.PolicyArgs().Logins, []string{"codex"}) {
		t.Fatalf("policy show asked for\n%s\nbrood run codex started\n%s", shown, started)
	}
	noHelper(t)
	out, code := policyShow(t, "--workspace", ws, "--agent", "codex")
	for _, h := range []string{"chatgpt.com", "auth.openai.com"} {
		if code != 0 || !strings.Contains(out, "allow\t"+h+" (443/tcp)\t(agent (codex login codex))\n") {
			t.Errorf("policy show lacks the login host %s:\n%s", h, out)
		}
	}
	t.Setenv("OPENAI_API_KEY", "sk-proj-"+strings.Repeat("k", 40))
	if out, _ := policyShow(t, "--workspace", ws, "--agent", "codex"); strings.Contains(out, "chatgpt.com") {
		t.Errorf("with an API key (which codex then uses) the login's hosts are shown:\n%s", out)
	}
}

// TestRunLoginFileSkipped: a login file brood refuses to read (a symlink out of its
// directory, a directory, a FIFO, over the size cap) is not sent, and the run output
// names it and the reason, then says the agent will ask to sign in.
func TestRunLoginFileSkipped(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("CODEX_API_KEY", "")
	outside := filepath.Join(t.TempDir(), "auth.json")
	os.WriteFile(outside, []byte(`{"tokens":{"access_token":"CANARY`+strings.Repeat("a", 40)+`"}}`), 0o600)
	for _, tt := range []struct {
		name, why string
		make      func(p string) error
	}{
		{"symlink", "a symlink that leads out of ~/.codex", func(p string) error { return os.Symlink(outside, p) }},
		{"directory", "a directory", func(p string) error { return os.Mkdir(p, 0o700) }},
		{"fifo", "a FIFO", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{"large", "larger than 65536 bytes", func(p string) error { return os.WriteFile(p, bytes.Repeat([]byte(" "), 70000), 0o600) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			home := t.TempDir()
			t.Setenv("HOME", home)
			os.MkdirAll(filepath.Join(home, ".codex"), 0o700)
			if err := tt.make(filepath.Join(home, ".codex", "auth.json")); err != nil {
				t.Fatal(err)
			}
			f := newFakeHelper(t)
			f.Caps.Secrets = true
			f.SecretsCA = sessionCA(t)
			code, _, stderr, _ := fakeRun(t, "run", "codex")
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			want := "login: ~/.codex/auth.json skipped: " + tt.why
			if !strings.Contains(stderr, want) || !strings.Contains(stderr, "so the host sign-in is not used") || !strings.Contains(stderr, "codex will ask to sign in") {
				t.Errorf("run output lacks %q:\n%s", want, stderr)
			}
			for _, hf := range f.HomeFiles() {
				if hf.Path == ".codex/auth.json" {
					t.Errorf("the refused login file was sent")
				}
			}
		})
	}
}

// TestGitTokenNeedsSwappingHelper: --git-token against a helper that does not swap
// placeholders fails before anything runs.
func TestGitTokenNeedsSwappingHelper(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("GH_TOKEN", "ghp_CANARY"+strings.Repeat("g", 30))
	f := newFakeHelper(t)
	code, _, stderr, _ := fakeRun(t, "run", "--git-token", "codex")
	if code == 0 || !strings.Contains(stderr, "--git-token") || strings.Contains(f.Calls(), "start_vm") {
		t.Fatalf("exit %d, calls %s\n%s", code, f.Calls(), stderr)
	}
	f.Caps.Secrets = true
	f.SecretsCA = sessionCA(t)
	if code, _, stderr, _ := fakeRun(t, "run", "--git-token", "codex"); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	env := strings.Join(f.Env(), "\n")
	if !strings.Contains(env, "GIT_CONFIG_KEY_1=credential.https://github.com.helper") || strings.Contains(env, "ghp_CANARY") {
		t.Fatalf("guest env:\n%s", env)
	}
}

// TestSecretsSystemPolicy: with a helper that swaps placeholders, a system policy that
// forbids raw_env refuses a custom agent that keeps a credential raw, and one that
// forbids --git-token refuses it, before any session exists.
func TestSecretsSystemPolicy(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	os.MkdirAll(filepath.Join(home, ".config", "brood"), 0o700)
	os.WriteFile(filepath.Join(home, ".config", "brood", "config.toml"), []byte(
		"[agents.tool]\nimage = \"test\"\ncommand = [\"tool\"]\nenv = [\"TOOL_*\"]\nraw_env = [\"TOOL_TOKEN\"]\n"), 0o600)
	t.Setenv("TOOL_TOKEN", "raw-CANARY-"+strings.Repeat("t", 30))
	t.Setenv("GH_TOKEN", "ghp_CANARY"+strings.Repeat("g", 30))
	f := newFakeHelper(t)
	f.Caps.Secrets = true
	f.SecretsCA = sessionCA(t)
	f.Policy = &api.Policy{Profile: "standard", RawEnvForbidden: true, GitTokenForbidden: true}
	run := func(args ...string) (int, string) {
		t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
		t.Setenv("BROOD_STATE_DIR", t.TempDir())
		code, _, errs := broodCode(t, append([]string{args[0], "--workspace", t.TempDir()}, args[1:]...)...)
		return code, errs
	}
	code, stderr := run("run", "tool")
	if code != 3 || !strings.Contains(stderr, "forbid_raw_env") || strings.Contains(f.Calls(), "create_session") {
		t.Fatalf("raw_env: exit %d, calls %s\n%s", code, f.Calls(), stderr)
	}
	code, stderr = run("run", "--git-token", "codex")
	if code != 3 || !strings.Contains(stderr, "forbid_git_token") || strings.Contains(f.Calls(), "create_session") {
		t.Fatalf("--git-token: exit %d, calls %s\n%s", code, f.Calls(), stderr)
	}
	f.Policy = &api.Policy{Profile: "standard"}
	if code, stderr = run("run", "tool"); code != 0 || !slices.Contains(f.Env(), "TOOL_TOKEN=raw-CANARY-"+strings.Repeat("t", 30)) {
		t.Fatalf("allowed raw_env: exit %d\n%s\nenv %v", code, stderr, f.Env())
	}
}

// TestRunWriteBackLogins: the host login file after a session whose egress process saw
// its login refreshed. Without --write-back-logins the helper is not asked to keep the
// values (SessionSecrets.WriteBack off), refreshed_logins is not called, the file is
// unchanged and the run says it was not written back. With it, the file is rewritten
// with the new tokens and expiry, its other members and its mode kept, and the run names
// the fields (the new values are in no file of the state directory and not in the
// output); a file the host changed during the session is kept, with a warning naming
// it. A helper without Capabilities.LoginWriteBack is not sent WriteBack and the run
// warns. The user config's [secrets] write_back_logins = true does what the flag does. A
// system policy with forbid_login_write_back refuses the flag before any session.
func TestRunWriteBackLogins(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("ANTHROPIC_API_KEY", "")
	p := filepath.Join(home, ".claude", ".credentials.json")
	os.MkdirAll(filepath.Dir(p), 0o700)
	orig := `{"claudeAiOauth":{"accessToken":"sk-ant-oat01-CANARY` + strings.Repeat("a", 80) + `","refreshToken":"sk-ant-ort01-CANARY` + strings.Repeat("r", 80) + `","expiresAt":1,"scopes":["user:inference"]}}`
	newA, newR := "sk-ant-oat01-NEW"+strings.Repeat("a", 80), "sk-ant-ort01-NEW"+strings.Repeat("r", 80)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	setup := func() *fakehelper.Helper {
		os.WriteFile(p, []byte(orig), 0o600)
		f := newFakeHelper(t)
		f.Caps.Secrets, f.Caps.LoginWriteBack = true, true
		f.SecretsCA = sessionCA(t)
		f.Egress = &api.EgressSummary{Secrets: map[string]api.SecretCounts{"platform.claude.com": {Swaps: 1, Refreshes: 1}}}
		f.Refreshed = &api.RefreshedLogins{Logins: []api.RefreshedLogin{{Login: "claude",
			Tokens: map[string]string{api.RoleAccess: newA, api.RoleRefresh: newR}, ExpiresIn: 3600, At: at}}}
		return f
	}

	f := setup()
	code, stdout, stderr, _ := fakeRun(t, "run", "claude-code")
	out := stdout + stderr
	if code != 0 || f.StartArgs().Secrets == nil || f.StartArgs().Secrets.WriteBack || strings.Contains(f.Calls(), "refreshed_logins") {
		t.Fatalf("no opt-in: exit %d, calls %s\n%s", code, f.Calls(), out)
	}
	if b, _ := os.ReadFile(p); string(b) != orig {
		t.Fatalf("no opt-in: the file was rewritten:\n%s", b)
	}
	if !strings.Contains(out, "refreshed in the session (1 token refresh(es)) and not written back to ~/.claude/.credentials.json (brood run --write-back-logins does that)") {
		t.Errorf("no opt-in: the run does not say the login was not written back:\n%s", out)
	}

	f = setup()
	code, stdout, stderr, _ = fakeRun(t, "run", "--write-back-logins", "claude-code")
	out = stdout + stderr
	if code != 0 || !f.StartArgs().Secrets.WriteBack || !strings.Contains(f.Calls(), "refreshed_logins") {
		t.Fatalf("opt-in: exit %d, calls %s\n%s", code, f.Calls(), out)
	}
	var m struct {
		O map[string]any `json:"claudeAiOauth"`
	}
	b, _ := os.ReadFile(p)
	if err := json.Unmarshal(b, &m); err != nil || m.O["accessToken"] != newA || m.O["refreshToken"] != newR ||
		m.O["expiresAt"] != float64(at.Add(time.Hour).UnixMilli()) || len(m.O["scopes"].([]any)) != 1 {
		t.Fatalf("opt-in: file %s (%v)", b, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("opt-in: mode %v", fi.Mode().Perm())
	}
	if !strings.Contains(out, "secrets: ~/.claude/.credentials.json: the tokens refreshed in the session were written back (claudeAiOauth.accessToken, claudeAiOauth.refreshToken, claudeAiOauth.expiresAt)") ||
		strings.Contains(out, "not written back") || strings.Contains(out, "NEW") {
		t.Errorf("opt-in: output\n%s", out)
	}
	// The new values are in the login file only: not in the state directory (sessions,
	// vm.json) nor in the output.
	filepath.WalkDir(os.Getenv("BROOD_STATE_DIR"), func(q string, d fs.DirEntry, err error) error {
		if b, rerr := os.ReadFile(q); err == nil && rerr == nil && !d.IsDir() && (bytes.Contains(b, []byte(newA)) || bytes.Contains(b, []byte(newR))) {
			t.Errorf("opt-in: %s holds a refreshed token", q)
		}
		return nil
	})

	// A helper that swaps but does not keep refreshed logins is not sent WriteBack
	// (it would refuse the field); the run warns and writes nothing.
	f = setup()
	f.Caps.LoginWriteBack = false
	code, stdout, stderr, _ = fakeRun(t, "run", "--write-back-logins", "claude-code")
	out = stdout + stderr
	if b, _ := os.ReadFile(p); code != 0 || f.StartArgs().Secrets.WriteBack || string(b) != orig || !strings.Contains(out, "this helper does not keep refreshed logins") {
		t.Fatalf("older helper: exit %d, write-back %v, file %s\n%s", code, f.StartArgs().Secrets.WriteBack, b, out)
	}

	f = setup()
	hostRefresh := `{"claudeAiOauth":{"accessToken":"host","refreshToken":"host","expiresAt":2}}`
	f.Agent = func(string, string) { os.WriteFile(p, []byte(hostRefresh), 0o600) } // the host CLI refreshes meanwhile
	code, stdout, stderr, _ = fakeRun(t, "run", "--write-back-logins", "claude-code")
	out = stdout + stderr
	if b, _ := os.ReadFile(p); code != 0 || string(b) != hostRefresh {
		t.Fatalf("changed file: exit %d, file %s\n%s", code, b, out)
	}
	if !strings.Contains(out, "~/.claude/.credentials.json changed on the host since the session started: the tokens refreshed in the session were not written back, the file is kept as it is") {
		t.Errorf("changed file: no warning naming it:\n%s", out)
	}

	// The user config's [secrets] write_back_logins = true is the flag for every run.
	f = setup()
	cfg := t.TempDir()
	os.MkdirAll(filepath.Join(cfg, "brood"), 0o700)
	os.WriteFile(filepath.Join(cfg, "brood", "config.toml"), []byte("[secrets]\nwrite_back_logins = true\n"), 0o600)
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	if code, out, errs := broodCode(t, "run", "--workspace", t.TempDir(), "claude-code"); code != 0 || !f.StartArgs().Secrets.WriteBack {
		t.Fatalf("config key: exit %d, write-back %v\n%s%s", code, f.StartArgs().Secrets.WriteBack, out, errs)
	}
	if b, _ := os.ReadFile(p); !strings.Contains(string(b), newA) {
		t.Fatalf("config key: file not written back:\n%s", b)
	}

	f = setup()
	f.Policy = &api.Policy{Profile: "standard", LoginWriteBackForbidden: true, Hosts: []api.PolicyHost{{Name: "api.anthropic.com"}, {Name: "platform.claude.com"}}}
	code, _, stderr, _ = fakeRun(t, "run", "--write-back-logins", "claude-code")
	if code != 3 || !strings.Contains(stderr, "forbid_login_write_back") || strings.Contains(f.Calls(), "create_session") {
		t.Fatalf("forbidden: exit %d, calls %s\n%s", code, f.Calls(), stderr)
	}
	if code, _, stderr, _ = fakeRun(t, "run", "claude-code"); code != 0 {
		t.Fatalf("forbidden, no flag: exit %d\n%s", code, stderr)
	}
}
