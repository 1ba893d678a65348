package cli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestResolveBuiltinAgents(t *testing.T) {
	for _, tc := range []struct {
		name, image string
		cmd         []string
		fwd, nofwd  string
	}{
		{"claude-code", "claude-code", []string{"claude"}, "CLAUDE_CODE_X", "OPENAI_API_KEY"},
		{"codex", "codex", []string{"codex"}, "OPENAI_API_KEY", "ANTHROPIC_API_KEY"},
		{"gemini", "gemini", []string{"gemini"}, "GOOGLE_CLOUD_PROJECT", "OPENAI_API_KEY"},
		{"opencode", "opencode", []string{"opencode"}, "OPENCODE_CONFIG", "HOME"},
		{"hermes", "hermes", []string{"hermes"}, "HERMES_HOME", "AWS_SECRET_ACCESS_KEY"},
		{"shell", "test", nil, "", "PATH"},
	} {
		a, err := resolveAgent(tc.name, &userConfig{}, "")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if a.Image != tc.image || !reflect.DeepEqual(a.Command, tc.cmd) || a.Source != "built-in" {
			t.Errorf("%s = %+v", tc.name, a)
		}
		if tc.fwd != "" && !envMatch(a.Env, tc.fwd) {
			t.Errorf("%s does not forward %s", tc.name, tc.fwd)
		}
		if envMatch(a.Env, tc.nofwd) {
			t.Errorf("%s forwards %s", tc.name, tc.nofwd)
		}
	}
}

func TestUnknownAgentIsUsageErrorListingKnown(t *testing.T) {
	_, err := resolveAgent("nope", &userConfig{Agents: map[string]configAgent{"aider": {}}}, "")
	if !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("err = %v", err)
	}
	for _, n := range []string{"aider", "claude-code", "codex", "gemini", "hermes", "opencode", "shell"} {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error %q does not list %s", err, n)
		}
	}
	// Through the command line: exit 2, the list on stderr.
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	code, _, stderr := broodCode(t, "run", "nope")
	if code != ExitUsage || !strings.Contains(stderr, "known: claude-code, codex, gemini, hermes, opencode, shell") {
		t.Errorf("brood run nope: exit %d stderr %q", code, stderr)
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "brood", "config.toml")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CONFIG_HOME", dir)
	return p
}

func TestCustomAgentFromConfig(t *testing.T) {
	p := writeConfig(t, `
[agents.aider]
image = "codex"
command = ["aider", "--yes"]
env = ["OPENAI_API_KEY", "AIDER_*"]

[agents.codex]
image = "mycodex"
command = ["codex", "--full-auto"]
`)
	got, err := userConfigPath()
	if err != nil || got != p {
		t.Fatalf("userConfigPath = %q, %v; want %q", got, err, p)
	}
	cfg, err := loadUserConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	a, err := resolveAgent("aider", cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	want := Agent{Name: "aider", Image: "codex", Command: []string{"aider", "--yes"}, Env: []string{"OPENAI_API_KEY", "AIDER_*"}, Source: p}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("aider = %+v, want %+v", a, want)
	}
	// A custom agent replaces the built-in of the same name.
	if a, _ := resolveAgent("codex", cfg, p); a.Image != "mycodex" || a.Source != p {
		t.Errorf("codex override = %+v", a)
	}
	// A missing file is an empty config.
	if cfg, err := loadUserConfig(filepath.Join(t.TempDir(), "none.toml")); err != nil || len(cfg.Agents) != 0 {
		t.Errorf("missing config: %+v, %v", cfg, err)
	}
}

func TestConfigStrict(t *testing.T) {
	for name, body := range map[string]string{
		"unknown top key":    "colour = true\n",
		"unknown agent key":  "[agents.a]\nimage = \"test\"\ncommand = [\"x\"]\nenvs = [\"A\"]\n",
		"no command":         "[agents.a]\nimage = \"test\"\n",
		"bad image":          "[agents.a]\nimage = \"../etc\"\ncommand = [\"x\"]\n",
		"forward everything": "[agents.a]\nimage = \"test\"\ncommand = [\"x\"]\nenv = [\"*\"]\n",
		"bad pattern":        "[agents.a]\nimage = \"test\"\ncommand = [\"x\"]\nenv = [\"A*B\"]\n",
		"bad name":           "[agents.\"A/B\"]\nimage = \"test\"\ncommand = [\"x\"]\n",
		"not toml":           "[agents\n",
	} {
		p := writeConfig(t, body)
		if _, err := loadUserConfig(p); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
	// The command line turns a bad config into a usage error.
	writeConfig(t, "colour = true\n")
	if code, _, stderr := broodCode(t, "run", "shell"); code != ExitUsage || !strings.Contains(stderr, "colour") {
		t.Errorf("bad config: exit %d stderr %q", code, stderr)
	}
}

func TestForwardEnvOnlyMatchingNames(t *testing.T) {
	environ := []string{"OPENAI_API_KEY=sk-1", "CODEX_HOME=/x", "CODEX=no-underscore", "HOME=/root",
		"AWS_SECRET_ACCESS_KEY=s", "OPENAI_API_KEY_2=k", "=weird", "NOEQUALS", "CODEX_EMPTY="}
	got := forwardEnv([]string{"OPENAI_API_KEY", "CODEX_*"}, environ)
	want := [][2]string{{"CODEX_EMPTY", ""}, {"CODEX_HOME", "/x"}, {"OPENAI_API_KEY", "sk-1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("forwardEnv = %q, want %q", got, want)
	}
	if got := forwardEnv(nil, environ); len(got) != 0 {
		t.Errorf("no patterns forwards %q", got)
	}
}

// TestShellQuoteRoundTrip runs the quoted words through a real /bin/sh -c, as the
// guest does, and checks every word arrives byte for byte.
func TestShellQuoteRoundTrip(t *testing.T) {
	words := []string{"plain", "", "two words", "it's", `"dq"`, "$HOME", "`id`", "a\nb", "*", "-n", "back\\slash", "é", "x=y", "; rm -rf /"}
	cmdline := guestCommand(append([]string{"printf", "<%s>\\n"}, words...))
	if !strings.HasPrefix(cmdline, "exec printf ") {
		t.Errorf("guestCommand = %q", cmdline)
	}
	out, err := exec.Command("/bin/sh", "-c", cmdline).Output()
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, w := range words {
		want.WriteString("<" + w + ">\n")
	}
	if string(out) != want.String() {
		t.Errorf("sh -c %q printed %q, want %q", cmdline, out, want.String())
	}
	if guestCommand(nil) != "" {
		t.Error("empty argv must mean a login shell")
	}
}

func TestProgressPlainLines(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, false)
	p.Start("snapshot")
	p.Done("3 files")
	p.Start("boot")
	p.Warn("TCG: slow")
	p.Start("stop")
	p.Fail("")
	got := b.String()
	for _, want := range []string{"brood: snapshot ...\n", "brood: snapshot done (3 files) in ", "brood: boot done in",
		"brood: WARNING: TCG: slow\n", "brood: stop failed in "} {
		if !strings.Contains(got, want) {
			t.Errorf("progress output %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "\r") || strings.Contains(got, "\x1b") {
		t.Errorf("plain progress has terminal controls: %q", got)
	}
}

func TestRunUsageErrors(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	for _, args := range [][]string{
		{"run"},
		{"run", "shell", "extra"},     // arguments without --
		{"run-image", "test"},         // no command
		{"run-image", "test", "echo"}, // no --
		{"run-image", "../x", "--", "true"},
		{"run", "--cpus", "-1", "shell"},
		{"run", "--image", "A/B", "shell"},
	} {
		if code, _, stderr := broodCode(t, args...); code != ExitUsage {
			t.Errorf("brood %q: exit %d, want %d (stderr %q)", args, code, ExitUsage, stderr)
		}
	}
}

// broodCode runs the root command like Main and returns the exit code, stdout and the
// error text.
func broodCode(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	out, msg, code := brood(t, nil, args...) // cmd_apply_test.go
	return code, out, msg
}

// TestRunWithoutHelperCreatesNothing: brood run checks the helper before it snapshots,
// so a missing helper leaves no session behind and says how to start it.
func TestRunWithoutHelperCreatesNothing(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	state := t.TempDir()
	t.Setenv("BROOD_STATE_DIR", state)
	t.Setenv("BROOD_HELPER_SOCKET", filepath.Join(t.TempDir(), "missing.sock"))
	w := t.TempDir()
	code, _, stderr := broodCode(t, "run", "--workspace", w, "shell")
	if code != ExitError || !strings.Contains(stderr, "hint: the helper is not listening") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	if ents, _ := os.ReadDir(filepath.Join(state, "sessions")); len(ents) != 0 {
		t.Errorf("a session was created without a helper: %v", ents)
	}
}

// TestAllowHostInvalidIsUsage: every --allow-host value that is not a host the flags layer
// may allow exits with ExitUsage in each command that takes the flag, before anything
// else happens: a wildcard over an ICANN public suffix, over a private-section one (only
// the system policy may allow those), a bare TLD, and IP literals in their spellings.
func TestAllowHostInvalidIsUsage(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	ws := t.TempDir()
	hosts := []string{
		"*.github.io",             // private section
		"*.s3.amazonaws.com",      // private section
		"*.githubusercontent.com", // private section
		"*.co.uk",                 // ICANN section
		"*.com",                   // top-level domain
		"169.254.169.254",         // IPv4 literal
		"0xa9.254.169.254",        // IPv4 in hex
		"2852039166",              // IPv4 as one decimal number
		"[::1]",                   // bracketed IPv6
	}
	for _, h := range hosts {
		for _, args := range [][]string{
			{"policy", "show", "--workspace", ws, "--egress", "locked", "--allow-host", h},
			{"run", "--workspace", ws, "--egress", "locked", "--allow-host", h, "shell"},
			{"run-image", "--workspace", ws, "--egress", "locked", "--allow-host", h, "test", "--", "true"},
		} {
			code, _, stderr := broodCode(t, args...)
			if code != ExitUsage || !strings.Contains(stderr, "--allow-host") {
				t.Errorf("brood %q: exit %d (%q), want %d naming --allow-host", args, code, stderr, ExitUsage)
			}
		}
	}
}
