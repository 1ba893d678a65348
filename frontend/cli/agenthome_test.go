package cli

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"brood.dev/brood/frontend/agentcfg"
)

// TestRunWritesAgentHome: `brood run codex` with OPENAI_API_KEY and host settings sends
// the generated login and the copied settings to the guest before the agent starts and
// prints the notes; --no-settings sends only the login; shell gets nothing.
func TestRunWritesAgentHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	if err := os.MkdirAll(filepath.Join(home, ".codex"), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := "model = \"gpt-5-codex\"\nnotify = [\"/usr/bin/notify-send\"]\n[mcp_servers.docs]\ncommand = \"/opt/docs-mcp\"\n"
	if err := os.WriteFile(filepath.Join(home, ".codex", "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPENAI_API_KEY", "sk-proj-run-test")
	f := newFakeHelper(t)
	code, _, stderr, _ := fakeRun(t, "run", "codex")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	files := f.HomeFiles()
	var names []string
	for _, hf := range files {
		names = append(names, hf.Path)
	}
	if !slices.Equal(names, []string{".codex/auth.json", ".codex/config.toml"}) {
		t.Fatalf("home files %v", names)
	}
	if !strings.Contains(string(files[0].Data), "sk-proj-run-test") || files[0].Mode != 0o600 {
		t.Errorf("auth.json %#o %s", files[0].Mode, files[0].Data)
	}
	if c := string(files[1].Data); !strings.Contains(c, "gpt-5-codex") || strings.Contains(c, "notify") || strings.Contains(c, "docs-mcp") {
		t.Errorf("config.toml:\n%s", c)
	}
	for _, want := range []string{"dropped notify from ~/.codex/config.toml", "dropped mcp_servers.docs", "agent home: 2 file(s) written"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("run output lacks %q:\n%s", want, stderr)
		}
	}

	f = newFakeHelper(t)
	if code, _, stderr, _ = fakeRun(t, "run", "--no-settings", "codex"); code != 0 {
		t.Fatalf("--no-settings: exit %d\n%s", code, stderr)
	}
	if files = f.HomeFiles(); len(files) != 2 || strings.Contains(string(files[1].Data), "gpt-5-codex") {
		t.Errorf("--no-settings sent %d files; config %s", len(files), files[1].Data)
	}

	f = newFakeHelper(t)
	if code, _, stderr, _ = fakeRun(t, "run", "shell", "--", "true"); code != 0 || len(f.HomeFiles()) != 0 {
		t.Errorf("shell: exit %d, %d home files\n%s", code, len(f.HomeFiles()), stderr)
	}
}

// TestRunMalformedSettings: a host settings file that does not parse stops the run
// before anything is snapshotted, naming the file and --no-settings.
func TestRunMalformedSettings(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	if err := os.MkdirAll(filepath.Join(home, ".claude"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".claude", "settings.json"), []byte(`{"model": `), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runRequest{agent: Agent{Name: "claude-code", Command: []string{"claude"}, Source: "built-in"}}
	_, err := r.agentHome(nil)
	if !errors.Is(err, agentcfg.ErrMalformed) || !strings.Contains(err.Error(), "~/.claude/settings.json") || !strings.Contains(err.Error(), "--no-settings") {
		t.Fatalf("agentHome = %v", err)
	}
	r.flags.noSettings = true
	if h, err := r.agentHome(nil); err != nil || len(h.files) != 1 {
		t.Errorf("--no-settings: %v, %d files (want only ~/.claude.json)", err, len(h.files))
	}
}

// TestAgentHomeEnv: the plan's variables are set over the forwarded ones.
func TestAgentHomeEnv(t *testing.T) {
	h := agentHome{env: [][2]string{{"GOOGLE_GENAI_USE_VERTEXAI", "true"}, {"GOOGLE_API_KEY", "placeholder"}}}
	got := h.withEnv([][2]string{{"GOOGLE_API_KEY", "real"}, {"GEMINI_MODEL", "m"}})
	want := [][2]string{{"GEMINI_MODEL", "m"}, {"GOOGLE_API_KEY", "placeholder"}, {"GOOGLE_GENAI_USE_VERTEXAI", "true"}}
	if !slices.Equal(got, want) {
		t.Errorf("withEnv = %v, want %v", got, want)
	}
}

// TestAgentHomeHostPaths: a CODEX_HOME in the developer's environment (matched by codex's
// CODEX_* pattern) is not forwarded, and the run output says so; CODEX_API_KEY still is.
func TestAgentHomeHostPaths(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("CODEX_HOME", "/home/dev/.codex-work")
	r := runRequest{agent: builtinAgents["codex"]}
	r.agent.Name, r.agent.Source = "codex", "built-in"
	environ := []string{"CODEX_HOME=/home/dev/.codex-work", "CODEX_API_KEY=k", "OPENAI_BASE_URL=x"}
	h, err := r.agentHome(environ)
	if err != nil {
		t.Fatal(err)
	}
	got := h.withEnv(forwardEnv(r.agent.Env, environ))
	for _, kv := range got {
		if kv[0] == "CODEX_HOME" {
			t.Errorf("CODEX_HOME forwarded: %v", got)
		}
	}
	if !slices.Contains(got, [2]string{"CODEX_API_KEY", "k"}) {
		t.Errorf("CODEX_API_KEY not forwarded: %v", got)
	}
	if !slices.ContainsFunc(h.notes, func(n string) bool { return strings.Contains(n, "$CODEX_HOME not forwarded") }) {
		t.Errorf("no note about CODEX_HOME: %q", h.notes)
	}
}
