package secrets

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
)

// Canaries: real values that must never appear on the guest side.
var (
	canaryKey     = "sk-proj-CANARY" + strings.Repeat("k", 40)
	canaryCustom  = "CANARYCUSTOM" + strings.Repeat("c", 30)
	canaryAccess  = "sk-ant-oat01-CANARY" + strings.Repeat("a", 60)
	canaryRefresh = "sk-ant-ort01-CANARY" + strings.Repeat("r", 60)
	canaryJWTSig  = base64.RawURLEncoding.EncodeToString([]byte("CANARY-SIGNATURE-" + strings.Repeat("s", 200)))
	canaryJWT     = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(`{"exp":1900000000}`)) + "." + canaryJWTSig
	canaryGoogle = "ya29.CANARY" + strings.Repeat("g", 100)
	canaryGRT    = "1//0CANARY" + strings.Repeat("t", 60)
)

// guestSide returns everything of r the guest receives, as one string.
func guestSide(r Result) string {
	var b strings.Builder
	for _, kv := range r.Env {
		b.WriteString(kv[0] + "=" + kv[1] + "\n")
	}
	for _, f := range r.Files {
		b.WriteString(f.Path + "\n")
		b.Write(f.Data)
	}
	for _, n := range r.Notes {
		b.WriteString(n + "\n")
	}
	return b.String()
}

func noCanary(t *testing.T, guest string, canaries ...string) {
	t.Helper()
	for _, c := range canaries {
		if strings.Contains(guest, c) {
			t.Fatalf("a real value reaches the guest side: %.24s…", c)
		}
	}
}

func binding(t *testing.T, r Result, value string) api.SecretBinding {
	t.Helper()
	for _, b := range r.Secrets.Bindings {
		if b.Value == value {
			return b
		}
	}
	t.Fatalf("no binding for %.24s…", value)
	return api.SecretBinding{}
}

func TestEnvironment(t *testing.T) {
	r, err := Discover(Input{Agent: "aider", Forwarded: [][2]string{
		{"OPENAI_API_KEY", canaryKey},
		{"AIDER_SERVICE_TOKEN", canaryCustom},
		{"AIDER_MODEL", "gpt-5"},
		{"AIDER_STRAY", "ghp_" + strings.Repeat("Z", 36)},
	}, Hosts: map[string][]string{"AIDER_SERVICE_TOKEN": {"svc.example.com"}}})
	if err != nil {
		t.Fatal(err)
	}
	noCanary(t, guestSide(r), canaryKey, canaryCustom, "ghp_"+strings.Repeat("Z", 36))
	if r.Env[2] != [2]string{"AIDER_MODEL", "gpt-5"} {
		t.Fatalf("an ordinary variable changed: %v", r.Env[2])
	}
	if b := binding(t, r, canaryKey); !slices.Equal(b.Hosts, []string{"api.openai.com"}) || r.Env[0][1] != b.Placeholder ||
		!strings.HasPrefix(b.Placeholder, "sk-proj-") || len(b.Placeholder) != len(canaryKey) {
		t.Fatalf("OPENAI_API_KEY binding %+v, guest %q", b.Hosts, r.Env[0][1])
	}
	if b := binding(t, r, canaryCustom); !slices.Equal(b.Hosts, []string{"svc.example.com"}) {
		t.Fatalf("configured hosts not used: %v", b.Hosts)
	}
	if b := binding(t, r, "ghp_"+strings.Repeat("Z", 36)); len(b.Hosts) != 0 {
		t.Fatalf("a token under an unknown name is bound to %v", b.Hosts)
	}
}

func TestRawEnvAndPolicy(t *testing.T) {
	in := Input{Agent: "x", Forwarded: [][2]string{{"OPENAI_API_KEY", canaryKey}}, RawEnv: []string{"OPENAI_API_KEY"}}
	r, err := Discover(in)
	if err != nil || r.Env[0][1] != canaryKey || len(r.Secrets.Bindings) != 0 {
		t.Fatalf("raw_env: %v %v", r.Env, err)
	}
	in.Policy.ForbidRawEnv = true
	r, err = Discover(in)
	if err != nil {
		t.Fatal(err)
	}
	noCanary(t, guestSide(r), canaryKey)
	in.Policy = Policy{DenyHosts: []string{"*.openai.com"}}
	in.RawEnv = nil
	r, err = Discover(in)
	if err != nil {
		t.Fatal(err)
	}
	if b := binding(t, r, canaryKey); len(b.Hosts) != 0 {
		t.Fatalf("a denied host stayed: %v", b.Hosts)
	}
}

func writeHome(t *testing.T, rel, data string) string {
	t.Helper()
	home := t.TempDir()
	p := filepath.Join(home, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return home
}

func TestClaudeLogin(t *testing.T) {
	home := writeHome(t, ".claude/.credentials.json", `{"claudeAiOauth":{"accessToken":"`+canaryAccess+`","refreshToken":"`+canaryRefresh+`","expiresAt":1900000000000,"scopes":["user:inference"]}}`)
	r, err := Discover(Input{Agent: "claude-code", Builtin: true, Home: home})
	if err != nil {
		t.Fatal(err)
	}
	noCanary(t, guestSide(r), canaryAccess, canaryRefresh)
	if len(r.Files) != 1 || r.Files[0].Path != ".claude/.credentials.json" || r.Files[0].Mode != 0o600 {
		t.Fatalf("files %+v", r.Files)
	}
	var m struct {
		O struct {
			Access, Refresh string `json:"-"`
			AccessToken     string `json:"accessToken"`
			RefreshToken    string `json:"refreshToken"`
			ExpiresAt       int64  `json:"expiresAt"`
		} `json:"claudeAiOauth"`
	}
	if err := json.Unmarshal(r.Files[0].Data, &m); err != nil {
		t.Fatal(err)
	}
	a, rf := binding(t, r, canaryAccess), binding(t, r, canaryRefresh)
	if m.O.AccessToken != a.Placeholder || m.O.RefreshToken != rf.Placeholder || m.O.ExpiresAt != 1900000000000 {
		t.Fatalf("rewritten file %+v", m.O)
	}
	if !strings.HasPrefix(a.Placeholder, "sk-ant-oat01-") || a.Role != api.RoleAccess || !slices.Equal(a.Hosts, []string{"api.anthropic.com"}) {
		t.Fatalf("access binding %+v", a.Hosts)
	}
	if rf.Role != api.RoleRefresh || rf.Login != a.Login || !slices.Equal(rf.TokenURLs, []string{"https://platform.claude.com/v1/oauth/token"}) ||
		!slices.Equal(rf.Hosts, []string{"platform.claude.com"}) {
		t.Fatalf("refresh binding %v %v", rf.Hosts, rf.TokenURLs)
	}
	if !slices.Equal(r.LoginNames, []string{"claude"}) || a.Login != "claude" {
		t.Fatalf("logins %v, access login %q; want [claude]", r.LoginNames, a.Login)
	}
}

func TestCodexLogin(t *testing.T) {
	home := writeHome(t, ".codex/auth.json", `{"OPENAI_API_KEY":null,"tokens":{"id_token":"`+canaryJWT+`","access_token":"`+canaryJWT+`x","refresh_token":"rt_CANARY`+strings.Repeat("x", 40)+`","account_id":"acc-1"},"last_refresh":"2026-11-30T00:00:00Z"}`)
	// The access token is a second JWT: the same header and claims, another signature.
	r, err := Discover(Input{Agent: "codex", Builtin: true, Home: home})
	if err != nil {
		t.Fatal(err)
	}
	noCanary(t, guestSide(r), canaryJWTSig, "rt_CANARY")
	var m map[string]any
	json.Unmarshal(r.Files[0].Data, &m)
	toks := m["tokens"].(map[string]any)
	if toks["account_id"] != "acc-1" || m["OPENAI_API_KEY"] != nil {
		t.Fatalf("other members changed: %v", m)
	}
	id := toks["id_token"].(string)
	if parts := strings.Split(id, "."); len(parts) != 3 || parts[1] != strings.Split(canaryJWT, ".")[1] {
		t.Fatalf("the id token placeholder lost its claims: %q", id)
	}
	if b := binding(t, r, "rt_CANARY"+strings.Repeat("x", 40)); !slices.Equal(b.TokenURLs, []string{"https://auth.openai.com/oauth/token"}) {
		t.Fatalf("refresh binding %v", b.TokenURLs)
	}
	// The access token goes to the ChatGPT backend only (codex's ChatGPT mode), the ID
	// token there and to the token endpoint's host.
	if b := binding(t, r, canaryJWT+"x"); !slices.Equal(b.Hosts, []string{"chatgpt.com"}) || b.Role != api.RoleAccess {
		t.Fatalf("access binding %v %q", b.Hosts, b.Role)
	}
	if b := binding(t, r, canaryJWT); !slices.Equal(b.Hosts, []string{"auth.openai.com", "chatgpt.com"}) || b.Role != api.RoleID {
		t.Fatalf("id binding %v %q", b.Hosts, b.Role)
	}
	if !slices.Equal(r.LoginNames, []string{"codex"}) {
		t.Fatalf("logins %v, want [codex]", r.LoginNames)
	}
}

// TestLoginHostsAreNetpolicys: every login binding's hosts are hosts of the agent's login
// in netpolicy's table (the hosts the helper allows for it), so none is narrowed away.
func TestLoginHostsAreNetpolicys(t *testing.T) {
	files := map[string][2]string{
		"codex":       {".codex/auth.json", `{"tokens":{"id_token":"` + canaryJWT + `","access_token":"` + canaryJWT + `x","refresh_token":"rt_CANARY` + strings.Repeat("x", 40) + `"}}`},
		"claude-code": {".claude/.credentials.json", `{"claudeAiOauth":{"accessToken":"` + canaryAccess + `","refreshToken":"` + canaryRefresh + `"}}`},
		"gemini":      {".gemini/oauth_creds.json", `{"access_token":"` + canaryGoogle + `","refresh_token":"` + canaryGRT + `","id_token":"` + canaryJWT + `"}`},
		"opencode": {".local/share/opencode/auth.json", `{"openai":{"type":"oauth","access":"` + canaryJWT + `","refresh":"` + canaryGRT + `"},` +
			`"anthropic":{"type":"oauth","access":"` + canaryAccess + `","refresh":"` + canaryRefresh + `"}}`},
	}
	for agent, f := range files {
		r, err := Discover(Input{Agent: agent, Builtin: true, Home: writeHome(t, f[0], f[1])})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.LoginNames) == 0 {
			t.Errorf("%s: no login in %v", agent, r.Secrets.Bindings)
		}
		for _, b := range r.Secrets.Bindings {
			l, err := netpolicy.BuiltinLogin(agent, b.Login)
			if err != nil || !slices.Contains(r.LoginNames, b.Login) {
				t.Errorf("%s: binding %s: login %q: %v (logins %v)", agent, b.Name, b.Login, err, r.LoginNames)
				continue
			}
			for _, h := range b.Hosts {
				if !slices.Contains(l.Hosts(), h) {
					t.Errorf("%s: binding %s: host %s is not one of login %s's %v", agent, b.Name, h, l.Name, l.Hosts())
				}
			}
		}
	}
}

func TestGeminiAndOpencodeLogins(t *testing.T) {
	home := writeHome(t, ".gemini/oauth_creds.json", `{"access_token":"`+canaryGoogle+`","refresh_token":"`+canaryGRT+`","expiry_date":1900000000000,"token_type":"Bearer"}`)
	r, err := Discover(Input{Agent: "gemini", Builtin: true, Home: home})
	if err != nil {
		t.Fatal(err)
	}
	noCanary(t, guestSide(r), canaryGoogle, canaryGRT)
	// gemini-cli checks the access token at oauth2.googleapis.com/tokeninfo at start.
	if b := binding(t, r, canaryGoogle); !strings.HasPrefix(b.Placeholder, "ya29.") || !slices.Equal(b.Hosts, []string{"cloudcode-pa.googleapis.com", "oauth2.googleapis.com"}) {
		t.Fatalf("gemini access binding %v", b.Hosts)
	}
	home = writeHome(t, ".local/share/opencode/auth.json", `{"anthropic":{"type":"oauth","access":"`+canaryAccess+`","refresh":"`+canaryRefresh+`","expires":1},"openrouter":{"type":"api","key":"`+canaryCustom+`"},"weird":{"type":"magic","x":"`+canaryKey+`"}}`)
	r, err = Discover(Input{Agent: "opencode", Builtin: true, Home: home})
	if err != nil {
		t.Fatal(err)
	}
	noCanary(t, guestSide(r), canaryAccess, canaryRefresh, canaryCustom, canaryKey)
	if b := binding(t, r, canaryCustom); !slices.Equal(b.Hosts, []string{"openrouter.ai"}) {
		t.Fatalf("opencode key binding %v", b.Hosts)
	}
}

func TestLoginFileRefusals(t *testing.T) {
	home := writeHome(t, ".claude/.credentials.json", `{"claudeAiOauth":`)
	if _, err := Discover(Input{Agent: "claude-code", Builtin: true, Home: home}); !errors.Is(err, ErrMalformedLogin) {
		t.Fatalf("malformed: %v", err)
	}
	outside := writeHome(t, "creds.json", `{"claudeAiOauth":{"accessToken":"`+canaryAccess+`"}}`)
	home = t.TempDir()
	os.MkdirAll(filepath.Join(home, ".claude"), 0o700)
	os.Symlink(filepath.Join(outside, "creds.json"), filepath.Join(home, ".claude", ".credentials.json"))
	r, err := Discover(Input{Agent: "claude-code", Builtin: true, Home: home})
	if err != nil || len(r.Files) != 0 || len(r.Secrets.Bindings) != 0 {
		t.Fatalf("a symlink out of ~/.claude was read: %v %d", err, len(r.Files))
	}
	if n := LoginSkipped(home, "claude-code"); !strings.HasPrefix(n, "login: ~/.claude/.credentials.json skipped: a symlink that leads out of ~/.claude") {
		t.Errorf("LoginSkipped(symlink) = %q", n)
	}
	r, err = Discover(Input{Agent: "claude-code", Builtin: true, Home: t.TempDir()})
	if err != nil || len(r.Files) != 0 {
		t.Fatalf("no login file: %v %d", err, len(r.Files))
	}
}

// TestLoginSkipped: the note for each login file Discover does not read says why; a
// missing or readable file (or an agent without one) has none.
func TestLoginSkipped(t *testing.T) {
	mk := func(t *testing.T, make func(p string) error) string {
		home := t.TempDir()
		os.MkdirAll(filepath.Join(home, ".codex"), 0o700)
		if err := make(filepath.Join(home, ".codex", "auth.json")); err != nil {
			t.Fatal(err)
		}
		return home
	}
	for _, tt := range []struct {
		name, want string
		make       func(p string) error
	}{
		{"directory", "a directory", func(p string) error { return os.Mkdir(p, 0o700) }},
		{"fifo", "a FIFO", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{"large", "larger than 65536 bytes", func(p string) error { return os.WriteFile(p, make([]byte, maxLoginFile+1), 0o600) }},
	} {
		home := mk(t, tt.make)
		if n := LoginSkipped(home, "codex"); !strings.Contains(n, "~/.codex/auth.json skipped: "+tt.want+" (") {
			t.Errorf("%s: %q", tt.name, n)
		}
		if r, err := Discover(Input{Agent: "codex", Builtin: true, Home: home}); err != nil || len(r.Files) != 0 {
			t.Errorf("%s: Discover %v, %d files", tt.name, err, len(r.Files))
		}
	}
	ok := mk(t, func(p string) error { return os.WriteFile(p, []byte(`{}`), 0o600) })
	if n := LoginSkipped(ok, "codex") + LoginSkipped(t.TempDir(), "codex") + LoginSkipped(ok, "shell"); n != "" {
		t.Errorf("notes for a readable, a missing file or no login file: %q", n)
	}
}

func TestGitToken(t *testing.T) {
	token := "ghp_CANARY" + strings.Repeat("G", 30)
	got, from, err := GitTokenSource(t.Context(), []string{"GITHUB_TOKEN=" + token}, nil)
	if err != nil || got != token || from != "$GITHUB_TOKEN" {
		t.Fatalf("source %q %q %v", got, from, err)
	}
	g, err := NewGitToken(token, from, []string{"github.com", "GitLab.com"}, Policy{DenyHosts: []string{"gitlab.com"}})
	if err != nil {
		t.Fatal(err)
	}
	var env strings.Builder
	for _, kv := range g.Env {
		env.WriteString(kv[0] + "=" + kv[1] + "\n")
	}
	noCanary(t, env.String()+strings.Join(g.Notes, "\n"), token)
	want := "GIT_CONFIG_COUNT=2\nGIT_CONFIG_KEY_0=credential.https://github.com.helper\nGIT_CONFIG_VALUE_0=\nGIT_CONFIG_KEY_1=credential.https://github.com.helper\n"
	if !strings.HasPrefix(env.String(), strings.TrimPrefix(want, "GIT_CONFIG_COUNT=2\n")) || !strings.Contains(env.String(), "GIT_CONFIG_COUNT=2\n") {
		t.Fatalf("env:\n%s", env.String())
	}
	if !strings.Contains(env.String(), g.Binding.Placeholder) || !slices.Equal(g.Binding.Hosts, []string{"github.com"}) {
		t.Fatalf("binding %v", g.Binding.Hosts)
	}
	if err := (api.SessionSecrets{Bindings: []api.SecretBinding{g.Binding}}).Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewGitToken(token, from, []string{"github.com"}, Policy{ForbidGitToken: true}); !errors.Is(err, ErrForbidden) {
		t.Fatalf("forbidden: %v", err)
	}
}

func writeFile(t *testing.T, p, data string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
