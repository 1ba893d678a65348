package agentcfg

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// Real-looking host settings files, each with the items that must be dropped.
const (
	codexConfig = `model = "gpt-5-codex"
approval_policy = "on-request"
sandbox_mode = "workspace-write"
notify = ["/usr/local/bin/notify-send-codex", "--urgency=low"]
cli_auth_credentials_store = "keyring"
preferred_auth_method = "chatgpt"
model_instructions_file = "/home/dev/prompts/codex.md"

[sandbox_workspace_write]
network_access = true
writable_roots = ["/home/dev/.cache/pip"]

[mcp_servers.github]
command = "/home/dev/bin/github-mcp"
args = ["stdio"]
env = { GITHUB_TOKEN = "ghp_example" }

[projects."/home/dev/src/brood"]
trust_level = "trusted"

[profiles.fast]
model = "gpt-5-mini"
`
	claudeSettings = `{
  "$schema": "https://json.schemastore.org/claude-code-settings.json",
  "model": "claude-sonnet-4-5",
  "apiKeyHelper": "/home/dev/bin/anthropic-key",
  "statusLine": {"type": "command", "command": "~/.claude/statusline.sh"},
  "hooks": {"PostToolUse": [{"matcher": "Edit", "hooks": [{"type": "command", "command": "prettier --write"}]}]},
  "mcpServers": {"fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/dev"]}},
  "permissions": {"allow": ["Bash(npm run test:*)"], "deny": ["Read(./.env)"], "additionalDirectories": ["/home/dev/notes"]},
  "env": {"CLAUDE_CODE_ENABLE_TELEMETRY": "0"},
  "cleanupPeriodDays": 20
}`
	geminiSettings = `{
  "general": {"vimMode": true},
  "ui": {"theme": "GitHub"},
  "security": {"auth": {"selectedType": "oauth-personal"}},
  "mcpServers": {"weather": {"command": "/opt/weather-mcp", "args": ["--stdio"]}},
  "tools": {"discoveryCommand": "/home/dev/bin/tools", "callCommand": "/home/dev/bin/call", "sandbox": false},
  "context": {"fileName": "GEMINI.md", "includeDirectories": ["/home/dev/lib"]}
}`
	geminiV1Settings = `{"theme": "Atom One", "selectedAuthType": "oauth-personal", "toolDiscoveryCommand": "bin/get_tools", "usageStatisticsEnabled": false}`
	opencodeConfig   = `{
  "$schema": "https://opencode.ai/config.json",
  "model": "anthropic/claude-sonnet-4-5",
  "theme": "opencode",
  "mcp": {"jira": {"type": "local", "command": ["bun", "x", "jira-mcp"]}},
  "plugin": ["opencode-helicone-session", "/home/dev/plugins/mine.ts"],
  "lsp": {"go": {"command": ["/home/dev/go/bin/gopls"]}},
  "formatter": {"prettier": {"command": ["npx", "prettier", "--write", "$FILE"]}},
  "provider": {"anthropic": {"options": {"baseURL": "https://api.anthropic.com/v1", "apiKey": "sk-ant-inline"}}}
}`
)

// writeHome makes a developer home with files (path relative to it: content).
func writeHome(t *testing.T, files map[string]string) string {
	t.Helper()
	home := t.TempDir()
	for p, c := range files {
		full := filepath.Join(home, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

// file returns the plan's file at p.
func file(t *testing.T, p Plan, path string) File {
	t.Helper()
	for _, f := range p.Files {
		if f.Path == path {
			return f
		}
	}
	t.Fatalf("plan has no %s (files %v)", path, paths(p))
	return File{}
}

func paths(p Plan) []string {
	var out []string
	for _, f := range p.Files {
		out = append(out, f.Path)
	}
	return out
}

// jsonAt decodes JSON data and returns the value at keys (nil when absent).
func jsonAt(t *testing.T, data []byte, keys ...string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("generated JSON does not parse: %v\n%s", err, data)
	}
	return at(v, keys...)
}

func tomlAt(t *testing.T, data []byte, keys ...string) any {
	t.Helper()
	var v map[string]any
	if err := toml.Unmarshal(data, &v); err != nil {
		t.Fatalf("generated TOML does not parse: %v\n%s", err, data)
	}
	return at(v, keys...)
}

func at(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// hasNote reports whether one of p's notes contains every part.
func hasNote(p Plan, parts ...string) bool {
	return slices.ContainsFunc(p.Notes, func(n string) bool {
		for _, s := range parts {
			if !strings.Contains(n, s) {
				return false
			}
		}
		return true
	})
}

// TestBuild runs each built-in agent on real-looking host settings: the key is made the
// agent's login through its documented setting, the settings are copied, and every item
// naming a host command or path is dropped and listed in the notes.
func TestBuild(t *testing.T) {
	const openai, anthropic, gemini = "sk-proj-TESTKEY0123456789abcdefghijklmnop", "sk-ant-api03-TESTKEY-0123456789abcdefghijkl", "AIzaTESTKEY0123456789"
	tests := []struct {
		name    string
		agent   string
		home    map[string]string
		environ []string
		opts    Options
		check   func(t *testing.T, p Plan)
	}{{
		name: "codex key and settings", agent: "codex",
		home:    map[string]string{".codex/config.toml": codexConfig, ".codex/AGENTS.md": "Always run go vet.\n", ".codex/auth.json": `{"OPENAI_API_KEY":"HOST-LOGIN"}`},
		environ: []string{"OPENAI_API_KEY=" + openai, "PATH=/usr/bin"},
		check: func(t *testing.T, p Plan) {
			auth := file(t, p, ".codex/auth.json")
			if auth.Mode != 0o600 || jsonAt(t, auth.Data, "OPENAI_API_KEY") != openai || jsonAt(t, auth.Data, "auth_mode") != "apikey" {
				t.Errorf("auth.json mode %v: %s", auth.Mode, auth.Data)
			}
			cfg := file(t, p, ".codex/config.toml").Data
			for k, want := range map[string]any{"model": "gpt-5-codex", "approval_policy": "on-request", "forced_login_method": "api"} {
				if got := tomlAt(t, cfg, k); got != want {
					t.Errorf("config.toml %s = %v, want %v", k, got, want)
				}
			}
			if tomlAt(t, cfg, "profiles", "fast", "model") != "gpt-5-mini" || tomlAt(t, cfg, "sandbox_workspace_write", "network_access") != true {
				t.Errorf("kept settings lost:\n%s", cfg)
			}
			// The host's projects (host paths) are gone; the guest's workspace is trusted and
			// the app-server daemon off, whatever the host said.
			if pr, _ := tomlAt(t, cfg, "projects").(map[string]any); len(pr) != 1 || tomlAt(t, cfg, "projects", "/workspace", "trust_level") != "trusted" ||
				tomlAt(t, cfg, "features", "daemon_auto_start") != false {
				t.Errorf("config.toml projects %v, features %v; want /workspace trusted alone, no daemon", tomlAt(t, cfg, "projects"), tomlAt(t, cfg, "features"))
			}
			for _, k := range [][]string{{"mcp_servers"}, {"notify"}, {"sandbox_workspace_write", "writable_roots"},
				{"model_instructions_file"}, {"cli_auth_credentials_store"}, {"preferred_auth_method"}} {
				if tomlAt(t, cfg, k...) != nil {
					t.Errorf("config.toml still has %v", k)
				}
				if !hasNote(p, "dropped "+strings.Join(k, "."), "~/.codex/config.toml") {
					t.Errorf("no note for dropped %v: %q", k, p.Notes)
				}
			}
			if !hasNote(p, "dropped projects", "~/.codex/config.toml") {
				t.Errorf("no note for dropped projects: %q", p.Notes)
			}
			if string(file(t, p, ".codex/AGENTS.md").Data) != "Always run go vet.\n" {
				t.Error("AGENTS.md not copied as it is")
			}
			if !slices.Contains(p.Env, [2]string{"OPENAI_API_KEY", openai}) {
				t.Errorf("env %v lacks OPENAI_API_KEY", p.Env)
			}
		},
	}, {
		name: "codex no key no settings", agent: "codex", environ: []string{"HOME=/x"},
		check: func(t *testing.T, p Plan) {
			// Only the guest's own settings: no daemon, the workspace trusted.
			if got := paths(p); !slices.Equal(got, []string{".codex/config.toml"}) || len(p.Env) != 0 || !hasNote(p, "codex will ask to sign in") {
				t.Errorf("plan %v, notes %q", got, p.Notes)
			}
			if cfg := file(t, p, ".codex/config.toml").Data; tomlAt(t, cfg, "features", "daemon_auto_start") != false ||
				tomlAt(t, cfg, "projects", "/workspace", "trust_level") != "trusted" || tomlAt(t, cfg, "forced_login_method") != nil {
				t.Errorf("config.toml without key or settings:\n%s", cfg)
			}
		},
	}, {
		name: "codex --no-settings", agent: "codex", opts: Options{NoSettings: true},
		home:    map[string]string{".codex/config.toml": codexConfig, ".codex/AGENTS.md": "x"},
		environ: []string{"CODEX_API_KEY=" + openai},
		check: func(t *testing.T, p Plan) {
			if got := paths(p); !slices.Equal(got, []string{".codex/auth.json", ".codex/config.toml"}) {
				t.Errorf("files %v", got)
			}
			cfg := file(t, p, ".codex/config.toml").Data
			if tomlAt(t, cfg, "model") != nil || tomlAt(t, cfg, "forced_login_method") != "api" {
				t.Errorf("config.toml without settings:\n%s", cfg)
			}
		},
	}, {
		name: "claude-code key and settings", agent: "claude-code",
		home: map[string]string{".claude/settings.json": claudeSettings, ".claude/CLAUDE.md": "# Me\nPrefer small commits.\n",
			".claude/.credentials.json": `{"claudeAiOauth":{"accessToken":"HOST-LOGIN"}}`, ".claude.json": `{"oauthAccount":"HOST-LOGIN"}`},
		environ: []string{"ANTHROPIC_API_KEY=" + anthropic},
		check: func(t *testing.T, p Plan) {
			st := file(t, p, ".claude.json")
			if st.Mode != 0o600 || jsonAt(t, st.Data, "hasCompletedOnboarding") != true {
				t.Errorf(".claude.json: %s", st.Data)
			}
			approved, _ := jsonAt(t, st.Data, "customApiKeyResponses", "approved").([]any)
			if len(approved) != 1 || approved[0] != anthropic[len(anthropic)-20:] {
				t.Errorf("approved %v, want the key's last 20 characters", approved)
			}
			s := file(t, p, ".claude/settings.json").Data
			if jsonAt(t, s, "model") != "claude-sonnet-4-5" || jsonAt(t, s, "env", "CLAUDE_CODE_ENABLE_TELEMETRY") != "0" ||
				jsonAt(t, s, "permissions", "deny") == nil || jsonAt(t, s, "cleanupPeriodDays") != 20.0 {
				t.Errorf("kept settings lost:\n%s", s)
			}
			for _, k := range [][]string{{"hooks"}, {"statusLine"}, {"apiKeyHelper"}, {"mcpServers"}, {"permissions", "additionalDirectories"}} {
				if jsonAt(t, s, k...) != nil || !hasNote(p, "dropped "+strings.Join(k, "."), "~/.claude/settings.json") {
					t.Errorf("%v not dropped with a note: %q", k, p.Notes)
				}
			}
			if string(file(t, p, ".claude/CLAUDE.md").Data) != "# Me\nPrefer small commits.\n" {
				t.Error("CLAUDE.md not copied")
			}
		},
	}, {
		name: "claude-code short key", agent: "claude-code", environ: []string{"ANTHROPIC_API_KEY=short"},
		check: func(t *testing.T, p Plan) {
			approved, _ := jsonAt(t, file(t, p, ".claude.json").Data, "customApiKeyResponses", "approved").([]any)
			if len(approved) != 1 || approved[0] != "short" {
				t.Errorf("approved %v", approved)
			}
		},
	}, {
		name: "gemini key and settings", agent: "gemini",
		home:    map[string]string{".gemini/settings.json": geminiSettings, ".gemini/GEMINI.md": "Use tabs.\n", ".gemini/oauth_creds.json": `{"access_token":"HOST-LOGIN"}`},
		environ: []string{"GEMINI_API_KEY=" + gemini},
		check: func(t *testing.T, p Plan) {
			if tf := file(t, p, ".gemini/trustedFolders.json"); jsonAt(t, tf.Data, "/workspace") != "TRUST_FOLDER" || tf.Mode != 0o600 {
				t.Errorf("trustedFolders.json = %s (mode %v), want /workspace trusted", tf.Data, tf.Mode)
			}
			s := file(t, p, ".gemini/settings.json").Data
			if jsonAt(t, s, "security", "auth", "selectedType") != "gemini-api-key" || jsonAt(t, s, "ui", "theme") != "GitHub" ||
				jsonAt(t, s, "tools", "sandbox") != false || jsonAt(t, s, "context", "fileName") != "GEMINI.md" {
				t.Errorf("settings:\n%s", s)
			}
			for _, k := range [][]string{{"mcpServers"}, {"tools", "discoveryCommand"}, {"tools", "callCommand"}, {"context", "includeDirectories"}} {
				if jsonAt(t, s, k...) != nil || !hasNote(p, "dropped "+strings.Join(k, "."), "~/.gemini/settings.json") {
					t.Errorf("%v not dropped with a note: %q", k, p.Notes)
				}
			}
			file(t, p, ".gemini/GEMINI.md")
		},
	}, {
		name: "gemini flat settings", agent: "gemini", home: map[string]string{".gemini/settings.json": geminiV1Settings},
		environ: []string{"GEMINI_API_KEY=" + gemini},
		check: func(t *testing.T, p Plan) {
			s := file(t, p, ".gemini/settings.json").Data
			if jsonAt(t, s, "selectedAuthType") != "gemini-api-key" || jsonAt(t, s, "security") != nil || jsonAt(t, s, "toolDiscoveryCommand") != nil {
				t.Errorf("settings:\n%s", s)
			}
		},
	}, {
		name: "gemini google key", agent: "gemini", environ: []string{"GOOGLE_API_KEY=" + gemini},
		check: func(t *testing.T, p Plan) {
			if jsonAt(t, file(t, p, ".gemini/settings.json").Data, "security", "auth", "selectedType") != "vertex-ai" ||
				!slices.Contains(p.Env, [2]string{"GOOGLE_GENAI_USE_VERTEXAI", "true"}) {
				t.Errorf("plan %v env %v", paths(p), p.Env)
			}
		},
	}, {
		name: "opencode", agent: "opencode",
		home:    map[string]string{".config/opencode/opencode.json": opencodeConfig, ".local/share/opencode/auth.json": `{"anthropic":{"key":"HOST-LOGIN"}}`},
		environ: []string{"ANTHROPIC_API_KEY=" + anthropic, "OPENROUTER_API_KEY=sk-or-x"},
		check: func(t *testing.T, p Plan) {
			s := file(t, p, ".config/opencode/opencode.json").Data
			if jsonAt(t, s, "model") != "anthropic/claude-sonnet-4-5" || jsonAt(t, s, "provider", "anthropic", "options", "baseURL") == nil {
				t.Errorf("settings:\n%s", s)
			}
			for _, k := range [][]string{{"mcp"}, {"plugin"}, {"lsp"}, {"formatter"}, {"options", "apiKey"}} {
				full := append([]string{}, k...)
				if k[0] == "options" {
					full = append([]string{"provider", "anthropic"}, k...)
				}
				if jsonAt(t, s, full...) != nil || !hasNote(p, "dropped "+strings.Join(k, "."), "opencode.json") {
					t.Errorf("%v not dropped with a note: %q", full, p.Notes)
				}
			}
			if len(p.Env) != 2 || !hasNote(p, "$OPENROUTER_API_KEY reaches opencode") {
				t.Errorf("env %v notes %q", p.Env, p.Notes)
			}
		},
	}, {
		name: "hermes", agent: "hermes", environ: []string{"NOUS_API_KEY=nous-x"},
		check: func(t *testing.T, p Plan) {
			if len(p.Files) != 0 || !slices.Equal(p.Env, [][2]string{{"NOUS_API_KEY", "nous-x"}}) {
				t.Errorf("files %v env %v", paths(p), p.Env)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home := writeHome(t, tt.home)
			p, err := Build(tt.agent, Secrets(tt.agent, tt.environ), home, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, p)
			// Credential files of the host are never read.
			for _, f := range p.Files {
				if strings.Contains(string(f.Data), "HOST-LOGIN") {
					t.Errorf("%s holds a host login", f.Path)
				}
			}
		})
	}
}

// TestSecretSeam: Build takes every key value from the Secrets it is given, so values
// replaced by placeholders are all that reach the plan.
func TestSecretSeam(t *testing.T) {
	const real = "sk-ant-api03-REALVALUE-abcdefghijklmnopqrstuvwxyz"
	for agent := range agents {
		environ := []string{"OPENAI_API_KEY=" + real, "ANTHROPIC_API_KEY=" + real, "GEMINI_API_KEY=" + real, "NOUS_API_KEY=" + real}
		secrets := Secrets(agent, environ)
		if len(secrets) == 0 {
			t.Fatalf("%s: no secrets from %v", agent, environ)
		}
		for i := range secrets {
			secrets[i].Value = "PLACEHOLDER-" + secrets[i].Name + "-0123456789abcdefghij"
		}
		p, err := Build(agent, secrets, t.TempDir(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		all := ""
		for _, f := range p.Files {
			all += string(f.Data)
		}
		for _, kv := range p.Env {
			all += kv[1]
		}
		if strings.Contains(all, "REALVALUE") || !strings.Contains(all, "PLACEHOLDER-") {
			t.Errorf("%s: plan does not carry only the placeholders: %q", agent, all)
		}
	}
}

// TestUnsafeFiles: a settings file that leads out of the agent's config directory (a
// symlink to elsewhere, or the directory itself a symlink out of the home), a FIFO and a
// file over MaxFileSize are skipped with a note; a symlink inside the directory is read.
func TestUnsafeFiles(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "config.toml"), []byte(`model = "outside"`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(outside, "claude"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "claude", "settings.json"), []byte(`{"model":"outside"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, agent string
		setup       func(t *testing.T, home string)
		skipped     string // the note's file; "" when the file must be read
		path        string
	}{
		{"symlink out of the config dir", "codex", func(t *testing.T, home string) {
			mustMkdir(t, filepath.Join(home, ".codex"))
			mustSymlink(t, filepath.Join(outside, "config.toml"), filepath.Join(home, ".codex", "config.toml"))
		}, "~/.codex/config.toml", ".codex/config.toml"},
		{"relative symlink to the home", "codex", func(t *testing.T, home string) {
			mustMkdir(t, filepath.Join(home, ".codex"))
			if err := os.WriteFile(filepath.Join(home, "dot-codex.toml"), []byte(`model = "home"`), 0o600); err != nil {
				t.Fatal(err)
			}
			mustSymlink(t, "../dot-codex.toml", filepath.Join(home, ".codex", "config.toml"))
		}, "~/.codex/config.toml", ".codex/config.toml"},
		{"config dir a symlink out of the home", "claude-code", func(t *testing.T, home string) {
			mustSymlink(t, filepath.Join(outside, "claude"), filepath.Join(home, ".claude"))
		}, "~/.claude/settings.json", ".claude/settings.json"},
		{"fifo", "gemini", func(t *testing.T, home string) {
			mustMkdir(t, filepath.Join(home, ".gemini"))
			if err := syscall.Mkfifo(filepath.Join(home, ".gemini", "settings.json"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "~/.gemini/settings.json", ".gemini/settings.json"},
		{"too large", "codex", func(t *testing.T, home string) {
			mustMkdir(t, filepath.Join(home, ".codex"))
			if err := os.WriteFile(filepath.Join(home, ".codex", "AGENTS.md"), make([]byte, MaxFileSize+1), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "~/.codex/AGENTS.md", ".codex/AGENTS.md"},
		{"symlink inside the config dir", "codex", func(t *testing.T, home string) {
			mustMkdir(t, filepath.Join(home, ".codex"))
			if err := os.WriteFile(filepath.Join(home, ".codex", "real.toml"), []byte(`model = "inside"`), 0o600); err != nil {
				t.Fatal(err)
			}
			mustSymlink(t, "real.toml", filepath.Join(home, ".codex", "config.toml"))
		}, "", ".codex/config.toml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home := t.TempDir()
			tt.setup(t, home)
			p, err := Build(tt.agent, nil, home, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if tt.skipped == "" {
				if got := tomlAt(t, file(t, p, tt.path).Data, "model"); got != "inside" {
					t.Errorf("model %v, want inside", got)
				}
				return
			}
			// codex's config.toml is always generated (the guest's own settings): the
			// skipped host file's model must not be in it.
			if slices.Contains(paths(p), tt.path) && (tt.path != ".codex/config.toml" || tomlAt(t, file(t, p, tt.path).Data, "model") != nil) {
				t.Errorf("%s copied: %s", tt.path, file(t, p, tt.path).Data)
			}
			if !hasNote(p, "skipped "+tt.skipped) {
				t.Errorf("no skip note for %s: %q", tt.skipped, p.Notes)
			}
		})
	}
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// TestMalformed: a settings file that does not parse is an error naming it (ErrMalformed).
func TestMalformed(t *testing.T) {
	tests := []struct{ agent, path, content string }{
		{"codex", ".codex/config.toml", "model = \"gpt-5\"\n[mcp_servers\n"},
		{"claude-code", ".claude/settings.json", `{"model": "x",}`},
		{"claude-code", ".claude/settings.json", `{"model": "x"} {"more": 1}`},
		{"gemini", ".gemini/settings.json", `["not", "an", "object"]`},
		{"opencode", ".config/opencode/opencode.json", `// jsonc comment
{"model": "x"}`},
	}
	for _, tt := range tests {
		t.Run(tt.agent+" "+tt.content, func(t *testing.T) {
			home := writeHome(t, map[string]string{tt.path: tt.content})
			_, err := Build(tt.agent, nil, home, Options{})
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "~/"+tt.path) {
				t.Fatalf("Build = %v, want ErrMalformed naming ~/%s", err, tt.path)
			}
			// --no-settings does not read it.
			if _, err := Build(tt.agent, nil, home, Options{NoSettings: true}); err != nil {
				t.Errorf("with NoSettings: %v", err)
			}
		})
	}
}

// TestUnknownAgent: shell and custom agents have no plan.
func TestUnknownAgent(t *testing.T) {
	if _, err := Build("shell", nil, t.TempDir(), Options{}); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("Build(shell) = %v", err)
	}
	if Known("shell") || !Known("codex") || Secrets("aider", []string{"OPENAI_API_KEY=x"}) != nil {
		t.Error("Known/Secrets disagree with the table")
	}
}

var _ fs.FileMode = File{}.Mode
