package cli_test

// End-to-end tests of the built-in agents signed in with the developer's own login file
// (no API key): the agent's rig (agent_e2e_test.go) with a home holding only the login
// file, whose tokens are made at run time (canaries). The session forwards the login
// (StartVMArgs.Logins), so the helper allows the login's hosts (netpolicy's login
// table), each answered by a fake server: the ChatGPT backend at chatgpt.com and the
// token endpoints at auth.openai.com and platform.claude.com; Claude Code's sign-in uses
// api.anthropic.com, the fake Anthropic.

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/netpolicy/egresstest/fakeprovider"
)

// canary returns prefix and 24 random hex bytes: a real token made at run time, so that
// no file of the test (the test binary's copies included) holds it.
func canary(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b)
}

// testJWT returns a JWT (RFC 7519) with claims and a random signature (the canary: a
// placeholder keeps the header and claims, never the signature).
func testJWT(t *testing.T, claims map[string]any) (jwt, sig string) {
	t.Helper()
	h, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT"})
	c, _ := json.Marshal(claims)
	raw := make([]byte, 256)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	sig = base64.RawURLEncoding.EncodeToString(raw)
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c) + "." + sig, sig
}

// loginCase is one agent's run signed in with a login file.
type loginCase struct {
	agent string
	args  []string
	// file is the login file (relative to the home) and its content; extra are other
	// files of the home (path: content).
	file, content string
	extra         map[string]string
	// provider is the fake the agent's requests must reach, at host (addr), each with
	// "Authorization: Bearer " + access.
	provider   *fakeprovider.Provider
	host, addr string
	access     string
	// secrets are the real values (or their secret parts) that must reach neither the
	// guest's side of brood (output, session directory) nor any fake but as access.
	secrets []string
	// notes must be in the run output.
	notes []string
}

// loginHome makes a developer home holding only the login file.
func (r *agentRig) loginHome(t *testing.T, c loginCase) string {
	t.Helper()
	home := filepath.Join(r.base, "home-login-"+c.agent)
	files := map[string]string{c.file: c.content}
	for p, body := range c.extra {
		files[p] = body
	}
	for p, body := range files {
		f := filepath.Join(home, p)
		for _, d := range []string{home, filepath.Join(home, ".config"), filepath.Dir(f)} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(d, agentUID, agentGID); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(f, agentUID, agentGID); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

// runLogin runs c and checks: the agent printed the fake's answer; every answered request
// of the fake carried the real access token (the egress process swapped the guest's
// placeholder: the summary counts swaps for the host and no block); the run output says
// the login file was copied with placeholders and lists the login's hosts; no real token
// is in the run output or the session directory.
func runLogin(t *testing.T, r *agentRig, c loginCase) agentRecord {
	home := r.loginHome(t, c)
	w := r.workspace(t, "w-login-"+c.agent)
	before := len(c.provider.Requests())
	cmd := r.commandIn(home, w, nil, append([]string{"run", c.agent, "--"}, c.args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	took := time.Since(t0)
	reqs := c.provider.Requests()[before:]
	defer func() {
		if t.Failed() {
			for _, p := range []*fakeprovider.Provider{r.chatgpt, r.openaiAuth, r.claudeAuth, r.anthropic, r.openai, r.codeAssist, r.googleAuth} {
				for _, q := range p.Requests() {
					t.Logf("%s got %s %s host %q -> %d\n%.1500s", p.Name, q.Method, q.Path, q.Host, q.Status, q.Body)
				}
			}
			t.Logf("upstream DNS asked: %v", r.up.Queries())
		}
	}()
	requireRunOK(t, c.agent, err, stdout.String(), stderr.String())
	if !strings.Contains(stdout.String(), c.provider.Answer) {
		t.Errorf("%s did not print the fake's answer %q\nstdout:\n%s\nstderr:\n%s", c.agent, c.provider.Answer, stdout.String(), stderr.String())
	}
	answered := 0
	for _, q := range reqs {
		if q.Status != 200 {
			continue
		}
		answered++
		if got := q.Header.Get("Authorization"); got != "Bearer "+c.access {
			t.Errorf("request %s %s: Authorization %.40q…, want the real access token", q.Method, q.Path, got)
		}
	}
	if answered == 0 {
		t.Errorf("the fake %s answered no request", c.provider.Name)
	}
	for _, n := range c.notes {
		if !strings.Contains(stderr.String(), n) {
			t.Errorf("the run output lacks %q:\n%s", n, stderr.String())
		}
	}
	id := sessionID(t, stderr.String())
	rec := readAgentRecord(t, r, id)
	if rec.Egress == nil || rec.Egress.Allowed[c.host+"."] == 0 {
		t.Fatalf("egress summary %+v: want %s allowed", rec.Egress, c.host)
	}
	if sc := rec.Egress.Secrets[c.host]; sc.Swaps == 0 {
		t.Errorf("egress summary for %s: %+v, want swaps", c.host, rec.Egress.Secrets)
	}
	// The only requests refused are protocol upgrades (codex tries the Responses API over
	// a WebSocket first, which the terminator cannot inspect, then falls back to HTTPS).
	blocks := blockReasons(t, filepath.Join(r.state, "sessions", id, "egress.jsonl"))
	for _, b := range blocks {
		if !strings.HasSuffix(b, ": "+wsRefused) {
			t.Errorf("a request to a login host was refused: %s", b)
		}
	}
	out := stdout.String() + stderr.String()
	for _, s := range c.secrets {
		if strings.Contains(out, s) {
			t.Errorf("the run output holds a real token (%.12s…)", s)
		}
	}
	sessDir := filepath.Join(r.state, "sessions", id)
	filepath.WalkDir(sessDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, s := range c.secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("session file %s holds a real token (%.12s…)", p, s)
			}
		}
		return nil
	})
	t.Logf("%s signed in: brood run took %v (boot %.1fs, VM %.1fs); egress %+v", c.agent, took.Round(time.Second), rec.BootSeconds, rec.VMSeconds, rec.Egress)
	return rec
}

// wsRefused is the terminator's reason for refusing a WebSocket upgrade
// (helper/egress/tlsterm).
const wsRefused = "protocol upgrade or CONNECT (its bytes could not be inspected)"

// blockReasons returns the reasons of the secret blocks in a session's decision log.
func blockReasons(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range bytes.Split(b, []byte("\n")) {
		var d struct{ Secret, Host, Reason string }
		if json.Unmarshal(line, &d) == nil && d.Secret == "block" {
			out = append(out, d.Host+": "+d.Reason)
		}
	}
	return out
}

// TestAgentCodexLoginEndToEnd: `brood run codex -- exec PROMPT` with ~/.codex/auth.json
// in ChatGPT mode (JWT id and access tokens, a refresh token, no API key): codex loads
// the guest's copy (placeholders; the JWT placeholders keep the claims codex parses,
// which it refuses the file without), answers through the ChatGPT backend, and the fake
// backend receives the real access token.
func TestAgentCodexLoginEndToEnd(t *testing.T) {
	requireAgentImage(t, agentImages["codex"])
	r := getAgentRig(t)
	exp := time.Now().Add(10 * 24 * time.Hour).Unix()
	auth := map[string]any{"chatgpt_account_id": "acc-e2e-1", "chatgpt_plan_type": "plus", "chatgpt_user_id": "user-e2e"}
	id, idSig := testJWT(t, map[string]any{"email": "dev@example.com", "exp": exp, "https://api.openai.com/auth": auth})
	access, accessSig := testJWT(t, map[string]any{"exp": exp, "https://api.openai.com/auth": auth, "scp": []string{"openid"}})
	refresh := canary(t, "rt_e2e_")
	file, _ := json.Marshal(map[string]any{"auth_mode": "chatgpt", "OPENAI_API_KEY": nil,
		"tokens":       map[string]any{"id_token": id, "access_token": access, "refresh_token": refresh, "account_id": "acc-e2e-1"},
		"last_refresh": time.Now().UTC().Format(time.RFC3339)})
	runLogin(t, r, loginCase{agent: "codex", args: []string{"exec", "Reply with the answer."},
		file: ".codex/auth.json", content: string(file),
		provider: r.chatgpt, host: "chatgpt.com", addr: chatgptAddr, access: access,
		secrets: []string{idSig, accessSig, refresh},
		notes: []string{"secrets: ~/.codex/auth.json copied with placeholders for its tokens",
			"chatgpt.com (443/tcp)", "auth.openai.com (443/tcp)"}})
	for _, q := range r.chatgpt.Requests() {
		if q.Status == 200 && q.Header.Get("Chatgpt-Account-Id") != "acc-e2e-1" {
			t.Errorf("request %s %s: chatgpt-account-id %q, want the login's account", q.Method, q.Path, q.Header.Get("Chatgpt-Account-Id"))
		}
	}
}

// TestAgentClaudeLoginEndToEnd: `brood run claude-code -- -p PROMPT` with
// ~/.claude/.credentials.json holding a Claude.ai sign-in (claudeAiOauth, no API key)
// whose access token has expired: Claude Code refreshes at platform.claude.com, whose
// fake receives the real refresh token in the body (swapped for the guest's
// placeholder) and answers new tokens, which reach the guest as placeholders; the fake
// Anthropic then receives the new real access token as its Bearer token.
func TestAgentClaudeLoginEndToEnd(t *testing.T) {
	requireAgentImage(t, agentImages["claude-code"])
	r := getAgentRig(t)
	access, refresh := canary(t, "sk-ant-oat01-e2e"), canary(t, "sk-ant-ort01-e2e")
	newAccess, newRefresh := canary(t, "sk-ant-oat01-new"), canary(t, "sk-ant-ort01-new")
	const scopes = "user:inference user:profile user:sessions:claude_code"
	answer, _ := json.Marshal(map[string]any{"access_token": newAccess, "refresh_token": newRefresh, "expires_in": 28800,
		"token_type": "Bearer", "scope": scopes})
	r.claudeAuth.SetAnswer("/v1/oauth/token", string(answer))
	before := len(r.claudeAuth.Requests())
	file, _ := json.Marshal(map[string]any{"claudeAiOauth": map[string]any{"accessToken": access, "refreshToken": refresh,
		"expiresAt": time.Now().Add(-time.Hour).UnixMilli(), "scopes": strings.Fields(scopes), "subscriptionType": "max"}})
	rec := runLogin(t, r, loginCase{agent: "claude-code", args: []string{"-p", "Reply with the answer."},
		file: ".claude/.credentials.json", content: string(file),
		provider: r.anthropic, host: "api.anthropic.com", addr: anthropicAddr, access: newAccess,
		secrets: []string{access, refresh, newAccess, newRefresh},
		notes: []string{"secrets: ~/.claude/.credentials.json copied with placeholders for its tokens",
			"platform.claude.com (443/tcp)"}})
	refreshed := 0
	for _, q := range r.claudeAuth.Requests()[before:] {
		if q.Path != "/v1/oauth/token" || q.Status != 200 {
			continue
		}
		refreshed++
		var body struct {
			GrantType    string `json:"grant_type"`
			RefreshToken string `json:"refresh_token"`
		}
		if err := json.Unmarshal(q.Body, &body); err != nil || body.GrantType != "refresh_token" || body.RefreshToken != refresh {
			t.Errorf("token request body %.200q: want grant_type refresh_token with the real refresh token (%v)", q.Body, err)
		}
	}
	if refreshed == 0 {
		t.Fatal("Claude Code did not refresh its expired token at platform.claude.com")
	}
	if sc := rec.Egress.Secrets["platform.claude.com"]; sc.Refreshes == 0 || sc.Blocks != 0 {
		t.Errorf("egress summary for platform.claude.com: %+v, want a refresh and no block", rec.Egress.Secrets)
	}
}

// TestAgentGeminiLoginEndToEnd: `brood run gemini -- -p PROMPT` with
// ~/.gemini/oauth_creds.json (a Google sign-in) and the auth type the CLI writes at
// sign-in (security.auth.selectedType = "oauth-personal" in ~/.gemini/settings.json), no
// API key: the Gemini CLI checks the guest's access token (a placeholder) at
// oauth2.googleapis.com/tokeninfo and answers through the Code Assist API; both fakes
// receive the real access token.
func TestAgentGeminiLoginEndToEnd(t *testing.T) {
	requireAgentImage(t, agentImages["gemini"])
	r := getAgentRig(t)
	access, refresh := canary(t, "ya29.e2e"), canary(t, "1//0e2e")
	before := len(r.googleAuth.Requests())
	file, _ := json.Marshal(map[string]any{"access_token": access, "refresh_token": refresh, "token_type": "Bearer",
		"scope":       "https://www.googleapis.com/auth/cloud-platform https://www.googleapis.com/auth/userinfo.email",
		"expiry_date": time.Now().Add(12 * time.Hour).UnixMilli()})
	runLogin(t, r, loginCase{agent: "gemini", args: []string{"-p", "Reply with the answer."},
		file: ".gemini/oauth_creds.json", content: string(file),
		extra:    map[string]string{".gemini/settings.json": `{"security": {"auth": {"selectedType": "oauth-personal"}}}`},
		provider: r.codeAssist, host: "cloudcode-pa.googleapis.com", addr: codeAssistAddr, access: access,
		secrets: []string{access, refresh},
		notes: []string{"secrets: ~/.gemini/oauth_creds.json copied with placeholders for its tokens",
			"cloudcode-pa.googleapis.com (443/tcp)", "oauth2.googleapis.com (443/tcp)"}})
	info := 0
	for _, q := range r.googleAuth.Requests()[before:] {
		if q.Path == "/tokeninfo" && q.Status == 200 {
			info++
			if q.Header.Get("Authorization") != "Bearer "+access {
				t.Errorf("tokeninfo: Authorization %.30q…, want the real access token", q.Header.Get("Authorization"))
			}
		}
	}
	if info == 0 {
		t.Error("the Gemini CLI did not check its token at oauth2.googleapis.com/tokeninfo")
	}
}
