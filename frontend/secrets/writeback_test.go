package secrets

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/helper/api"
)

// refreshAt is the time of the test refreshes.
var refreshAt = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// discoverLogin runs Discover for agent on home and returns its one Login.
func discoverLogin(t *testing.T, agent, home string) Login {
	t.Helper()
	r, err := Discover(Input{Agent: agent, Builtin: true, Home: home})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Logins) != 1 {
		t.Fatalf("%d logins, want 1", len(r.Logins))
	}
	return r.Logins[0]
}

// readJSON decodes the file at p.
func readJSON(t *testing.T, p string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v\n%s", p, err, b)
	}
	return m
}

// dirNames lists dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestWriteBackClaude: an unchanged file gets the refreshed tokens and the new expiresAt
// (the refresh's time plus expires_in, in milliseconds); every other member stays; the
// permission bits stay (0600, and 0640 when the file had them); no temporary file is
// left; a refresh of another login writes nothing.
func TestWriteBackClaude(t *testing.T) {
	for _, mode := range []os.FileMode{0o600, 0o640} {
		home := writeHome(t, ".claude/.credentials.json", `{"claudeAiOauth":{"accessToken":"`+canaryAccess+`","refreshToken":"`+canaryRefresh+`","expiresAt":1900000000000,"scopes":["user:inference"],"subscriptionType":"max"},"other":{"n":12345678901234567890}}`)
		p := filepath.Join(home, ".claude/.credentials.json")
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		l := discoverLogin(t, "claude-code", home)
		if l.Show != "~/.claude/.credentials.json" || !slices.Equal(l.Logins(), []string{"claude"}) {
			t.Fatalf("login %q %v", l.Show, l.Logins())
		}
		before, _ := os.ReadFile(p)
		if f, err := l.WriteBack([]api.RefreshedLogin{{Login: "codex", Tokens: map[string]string{api.RoleAccess: "other-login-000000000000"}, At: refreshAt}}); err != nil || f != nil {
			t.Fatalf("another login's refresh: %v, %v", f, err)
		}
		if after, _ := os.ReadFile(p); string(after) != string(before) {
			t.Fatal("another login's refresh rewrote the file")
		}
		newA, newR := "sk-ant-oat01-NEW"+strings.Repeat("a", 60), "sk-ant-ort01-NEW"+strings.Repeat("r", 60)
		fields, err := l.WriteBack([]api.RefreshedLogin{{Login: "claude", Tokens: map[string]string{api.RoleAccess: newA, api.RoleRefresh: newR}, ExpiresIn: 3600, At: refreshAt}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(fields, []string{"claudeAiOauth.accessToken", "claudeAiOauth.refreshToken", "claudeAiOauth.expiresAt"}) {
			t.Errorf("fields %v", fields)
		}
		m := readJSON(t, p)
		o := m["claudeAiOauth"].(map[string]any)
		if o["accessToken"] != newA || o["refreshToken"] != newR || o["expiresAt"] != float64(refreshAt.Add(time.Hour).UnixMilli()) {
			t.Errorf("rewritten %v", o)
		}
		if o["subscriptionType"] != "max" || len(o["scopes"].([]any)) != 1 || len(m) != 2 {
			t.Errorf("other members lost: %v", m)
		}
		if raw, _ := os.ReadFile(p); !strings.Contains(string(raw), "12345678901234567890") {
			t.Errorf("a large number was not kept exactly:\n%s", raw)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("mode %v (%v), want %v", fi.Mode().Perm(), err, mode)
		}
		if names := dirNames(t, filepath.Dir(p)); !slices.Equal(names, []string{".credentials.json"}) {
			t.Errorf("directory holds %v", names)
		}
	}
}

// TestWriteBackChanged: a file that changed after brood read it (its CLI refreshed it on
// the host) is kept as it is, with ErrLoginChanged naming it; so is a file replaced by a
// symlink, and a file that is gone is an error.
func TestWriteBackChanged(t *testing.T) {
	home := writeHome(t, ".gemini/oauth_creds.json", `{"access_token":"`+canaryGoogle+`","refresh_token":"`+canaryGRT+`","expiry_date":1900000000000,"token_type":"Bearer"}`)
	p := filepath.Join(home, ".gemini/oauth_creds.json")
	l := discoverLogin(t, "gemini", home)
	hostRefresh := `{"access_token":"ya29.HOST","refresh_token":"1//0HOST","expiry_date":1900000000001}`
	os.WriteFile(p, []byte(hostRefresh), 0o600)
	ref := []api.RefreshedLogin{{Login: "gemini", Tokens: map[string]string{api.RoleAccess: "ya29.NEW" + strings.Repeat("n", 40)}, At: refreshAt}}
	_, err := l.WriteBack(ref)
	if !errors.Is(err, ErrLoginChanged) || !strings.Contains(err.Error(), "~/.gemini/oauth_creds.json") || strings.Contains(err.Error(), "ya29") {
		t.Fatalf("changed file: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != hostRefresh {
		t.Fatalf("the changed file was rewritten:\n%s", b)
	}
	if names := dirNames(t, filepath.Dir(p)); len(names) != 1 {
		t.Errorf("directory holds %v", names)
	}
	// A symlink to a file with the original bytes is not followed or replaced.
	orig := filepath.Join(home, ".gemini/real.json")
	os.WriteFile(orig, []byte(`{"access_token":"`+canaryGoogle+`","refresh_token":"`+canaryGRT+`","expiry_date":1900000000000,"token_type":"Bearer"}`), 0o600)
	os.Remove(p)
	os.Symlink("real.json", p)
	if _, err := l.WriteBack(ref); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("symlink: %v", err)
	}
	if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced (%v)", err)
	}
	os.Remove(p)
	if _, err := l.WriteBack(ref); err == nil {
		t.Error("a missing file: no error")
	}
}

// TestWriteBackFormats: codex gets its tokens and last_refresh (the refresh's time,
// RFC 3339), account_id and a null OPENAI_API_KEY kept; gemini without expires_in keeps
// its expiry_date; opencode's provider entry gets access, refresh, expires, and its other
// providers stay.
func TestWriteBackFormats(t *testing.T) {
	home := writeHome(t, ".codex/auth.json", `{"OPENAI_API_KEY":null,"tokens":{"id_token":"`+canaryJWT+`","access_token":"`+canaryJWT+`x","refresh_token":"rt_CANARY`+strings.Repeat("x", 40)+`","account_id":"acc-1"},"last_refresh":"2026-11-30T00:00:00Z"}`)
	l := discoverLogin(t, "codex", home)
	newAcc, newRT := "eyJNEW."+strings.Repeat("a", 40)+".sig", "rt_NEW"+strings.Repeat("y", 40)
	fields, err := l.WriteBack([]api.RefreshedLogin{{Login: "codex", Tokens: map[string]string{api.RoleAccess: newAcc, api.RoleRefresh: newRT}, ExpiresIn: 864000, At: refreshAt}})
	if err != nil {
		t.Fatal(err)
	}
	m := readJSON(t, filepath.Join(home, ".codex/auth.json"))
	tok := m["tokens"].(map[string]any)
	if tok["access_token"] != newAcc || tok["refresh_token"] != newRT || tok["id_token"] != canaryJWT || tok["account_id"] != "acc-1" ||
		m["last_refresh"] != "2026-12-01T10:00:00Z" || m["OPENAI_API_KEY"] != nil || len(m) != 3 {
		t.Errorf("codex rewritten %v", m)
	}
	if !slices.Equal(fields, []string{"tokens.access_token", "tokens.refresh_token", "last_refresh"}) {
		t.Errorf("codex fields %v", fields)
	}

	home = writeHome(t, ".gemini/oauth_creds.json", `{"access_token":"`+canaryGoogle+`","refresh_token":"`+canaryGRT+`","expiry_date":1900000000000,"scope":"s","token_type":"Bearer"}`)
	l = discoverLogin(t, "gemini", home)
	newG := "ya29.NEW" + strings.Repeat("n", 40)
	if _, err := l.WriteBack([]api.RefreshedLogin{{Login: "gemini", Tokens: map[string]string{api.RoleAccess: newG}, At: refreshAt}}); err != nil {
		t.Fatal(err)
	}
	m = readJSON(t, filepath.Join(home, ".gemini/oauth_creds.json"))
	if m["access_token"] != newG || m["refresh_token"] != canaryGRT || m["expiry_date"] != float64(1900000000000) || m["scope"] != "s" {
		t.Errorf("gemini rewritten %v", m)
	}

	home = writeHome(t, ".local/share/opencode/auth.json", `{"anthropic":{"type":"oauth","access":"`+canaryAccess+`","refresh":"`+canaryRefresh+`","expires":1},"openrouter":{"type":"api","key":"sk-or-CANARY`+strings.Repeat("o", 40)+`"}}`)
	l = discoverLogin(t, "opencode", home)
	newA := "sk-ant-oat01-NEW" + strings.Repeat("a", 60)
	fields, err = l.WriteBack([]api.RefreshedLogin{{Login: "opencode-anthropic", Tokens: map[string]string{api.RoleAccess: newA}, ExpiresIn: 60, At: refreshAt}})
	if err != nil {
		t.Fatal(err)
	}
	m = readJSON(t, filepath.Join(home, ".local/share/opencode/auth.json"))
	a := m["anthropic"].(map[string]any)
	if a["access"] != newA || a["refresh"] != canaryRefresh || a["expires"] != float64(refreshAt.Add(time.Minute).UnixMilli()) || a["type"] != "oauth" ||
		m["openrouter"].(map[string]any)["key"] != "sk-or-CANARY"+strings.Repeat("o", 40) {
		t.Errorf("opencode rewritten %v", m)
	}
	if !slices.Equal(fields, []string{"anthropic.access", "anthropic.expires"}) {
		t.Errorf("opencode fields %v", fields)
	}
}
