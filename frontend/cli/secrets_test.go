package cli

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/helper/api"
)

func sessionCA(t *testing.T) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, NotBefore: time.Now(),
		NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true, IsCA: true}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
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
// is sent with placeholders; without a swapping helper it is not sent at all (as before).
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
		if code, _, stderr, _ := fakeRun(t, "run", "claude-code"); code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
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
