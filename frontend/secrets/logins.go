package secrets

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/agentcfg"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/placeholder"
	"brood.dev/brood/netpolicy"
)

// maxLoginFile is the largest login file read, in bytes (the CLIs write well under 16 KiB;
// the guest's home-file transport takes at most 128 KiB).
const maxLoginFile = 64 << 10

// login returns the built-in agent's login named name from netpolicy's table, the one
// the helper allows the hosts of (a name missing there is a programming error).
func login(agent, name string) netpolicy.Login {
	l, err := netpolicy.BuiltinLogin(agent, name)
	if err != nil {
		panic(err)
	}
	return l
}

// tokenField is one token of a login file: its JSON path and role.
type tokenField struct {
	keys []string
	role string
}

// loginFile is one agent's login file and its tokens: rewrite puts placeholders in,
// update (writeback.go) puts a refreshed login's new real values back.
type loginFile struct {
	dir, name string
	rewrite   func(d *discovery, show string, m map[string]any) error
	update    func(m map[string]any, r api.RefreshedLogin) []string
}

// loginFiles are the built-in agents' login files (relative to the home).
var loginFiles = map[string]loginFile{
	"codex":       {dir: ".codex", name: "auth.json", rewrite: rewriteCodex, update: updateCodex},
	"claude-code": {dir: ".claude", name: ".credentials.json", rewrite: rewriteClaude, update: updateClaude},
	"gemini":      {dir: ".gemini", name: "oauth_creds.json", rewrite: rewriteGemini, update: updateGemini},
	"opencode":    {dir: ".local/share/opencode", name: "auth.json", rewrite: rewriteOpencode, update: updateOpencode},
}

// The token fields of each login file, by role.
var (
	codexFields = []tokenField{
		{[]string{"tokens", "access_token"}, api.RoleAccess},
		{[]string{"tokens", "refresh_token"}, api.RoleRefresh},
		{[]string{"tokens", "id_token"}, api.RoleID},
	}
	claudeFields = []tokenField{
		{[]string{"claudeAiOauth", "accessToken"}, api.RoleAccess},
		{[]string{"claudeAiOauth", "refreshToken"}, api.RoleRefresh},
	}
	geminiFields = []tokenField{
		{[]string{"access_token"}, api.RoleAccess},
		{[]string{"refresh_token"}, api.RoleRefresh},
		{[]string{"id_token"}, api.RoleID},
	}
	opencodeFields = []tokenField{
		{[]string{"access"}, api.RoleAccess},
		{[]string{"refresh"}, api.RoleRefresh},
	}
)

// rewriteCodex: {"OPENAI_API_KEY": KEY|null, "tokens": {"id_token", "access_token",
// "refresh_token", "account_id"}, "last_refresh"} (the file `codex login` writes).
func rewriteCodex(d *discovery, show string, m map[string]any) error {
	if k, ok := m["OPENAI_API_KEY"].(string); ok && k != "" {
		m["OPENAI_API_KEY"] = d.bind(api.SecretBinding{Name: show + " OPENAI_API_KEY", Value: k, Hosts: []string{"api.openai.com"}}, placeholder.New(k))
	}
	d.oauthTokens(show, login("codex", "codex"), m, codexFields)
	return nil
}

// rewriteClaude: {"claudeAiOauth": {"accessToken", "refreshToken", "expiresAt", "scopes",
// "subscriptionType"}} (Claude Code's credentials file on Linux).
func rewriteClaude(d *discovery, show string, m map[string]any) error {
	d.oauthTokens(show, login("claude-code", "claude"), m, claudeFields)
	return nil
}

// rewriteGemini: {"access_token", "refresh_token", "id_token", "expiry_date", "scope",
// "token_type"} (google-auth-library's credentials, as gemini-cli stores them).
func rewriteGemini(d *discovery, show string, m map[string]any) error {
	d.oauthTokens(show, login("gemini", "gemini"), m, geminiFields)
	return nil
}

// opencodeAPIHosts are the API hosts of opencode's provider IDs (its models.dev table)
// whose "api" entries (a key) are bound; opencodeLogins name the netpolicy login of the
// IDs whose "oauth" entries are.
var (
	opencodeAPIHosts = map[string][]string{
		"anthropic":  {"api.anthropic.com"},
		"openai":     {"api.openai.com"},
		"openrouter": {"openrouter.ai"},
		"google":     {"generativelanguage.googleapis.com"},
	}
	opencodeLogins = map[string]string{"anthropic": "opencode-anthropic", "openai": "opencode-openai"}
)

// rewriteOpencode: {PROVIDER: {"type": "api", "key"} | {"type": "oauth", "access",
// "refresh", "expires"}} (opencode's auth.json, one entry per provider).
func rewriteOpencode(d *discovery, show string, m map[string]any) error {
	for _, id := range sortedKeys(m) {
		e, ok := m[id].(map[string]any)
		if !ok {
			continue
		}
		where := fmt.Sprintf("%s %s", show, id)
		switch e["type"] {
		case "api":
			if k, ok := e["key"].(string); ok && k != "" {
				e["key"] = d.bind(api.SecretBinding{Name: where + " key", Value: k, Hosts: opencodeAPIHosts[id]}, placeholder.New(k))
			}
		case "oauth", "wellknown":
			name, ok := opencodeLogins[id]
			if !ok {
				d.note("secrets: %s: no known token endpoint; the login is left out", where)
				delete(m, id)
				continue
			}
			d.oauthTokens(where, login("opencode", name), e, opencodeFields)
		default:
			d.note("secrets: %s: unknown login type; the login is left out", where)
			delete(m, id)
		}
	}
	return nil
}

// oauthTokens replaces the string at each field of m by its placeholder and binds it to
// login l (netpolicy's table): access tokens to l.Access, ID tokens to l.Access and the
// token hosts, refresh tokens to l.TokenURLs. A login with any token bound is added to
// Result.LoginNames.
func (d *discovery) oauthTokens(show string, l netpolicy.Login, m map[string]any, fields []tokenField) {
	tokenHosts := hostsOf(l.TokenURLs)
	for _, f := range fields {
		parent, last := walk(m, f.keys)
		v, ok := parent[last].(string)
		if !ok || v == "" {
			continue
		}
		b := api.SecretBinding{Name: show + " " + strings.Join(f.keys, "."), Value: v, Login: l.Name, Role: f.role}
		switch f.role {
		case api.RoleAccess:
			b.Hosts = l.Access
		case api.RoleID:
			b.Hosts = append(slices.Clone(l.Access), tokenHosts...)
		case api.RoleRefresh:
			b.Hosts, b.TokenURLs = tokenHosts, l.TokenURLs
		}
		parent[last] = d.bindOAuth(b)
		if !slices.Contains(d.logins, l.Name) {
			d.logins = append(d.logins, l.Name)
			d.res.LoginNames = append(d.res.LoginNames, l.Name)
		}
	}
}

// bindOAuth binds b after dropping the token endpoints the policy took the host of; a
// refresh token left with none becomes a binding to no host.
func (d *discovery) bindOAuth(b api.SecretBinding) string {
	if b.Role == api.RoleRefresh {
		left := d.narrow(b.Hosts)
		var urls []string
		for _, u := range b.TokenURLs {
			if h := hostsOf([]string{u}); len(h) == 1 && contains(left, h[0]) {
				urls = append(urls, u)
			}
		}
		if b.TokenURLs = urls; len(urls) == 0 {
			b = api.SecretBinding{Name: b.Name, Value: b.Value}
		}
	}
	return d.bind(b, placeholder.New(b.Value))
}

// walk returns the table holding the last of keys (made on the way when missing) and that
// key.
func walk(m map[string]any, keys []string) (map[string]any, string) {
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
		}
		m = next
	}
	return m, keys[len(keys)-1]
}

// hostsOf returns the host of each https URL.
func hostsOf(urls []string) []string {
	var out []string
	for _, u := range urls {
		rest, _ := strings.CutPrefix(u, "https://")
		h, _, _ := strings.Cut(rest, "/")
		out = append(out, h)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// login reads the agent's login file, if it has one and it exists, and adds it to the
// result with every token replaced by its placeholder.
func (d *discovery) login() error {
	lf, ok := loginFiles[d.in.Agent]
	if !ok {
		return nil
	}
	show := "~/" + path.Join(lf.dir, lf.name)
	data, _, err := readHomeFile(d.in.Home, lf.dir, lf.name)
	if err != nil || data == nil {
		return nil // LoginSkipped says why a file that exists is not read
	}
	m, err := agentcfg.DecodeObject(data)
	if err != nil {
		return fmt.Errorf("login file %s: %w: %w", show, ErrMalformedLogin, err)
	}
	if err := lf.rewrite(d, show, m); err != nil {
		return err
	}
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", show, err)
	}
	d.res.Files = append(d.res.Files, File{Path: path.Join(lf.dir, lf.name), Mode: 0o600, Data: append(out, '\n')})
	d.note("secrets: %s copied with placeholders for its tokens", show)
	if len(d.logins) > 0 {
		d.res.Logins = append(d.res.Logins, Login{Show: show, home: d.in.Home, agent: d.in.Agent, logins: d.logins, hash: sha256.Sum256(data)})
	}
	return nil
}

// LoginSkipped returns a note for the run output when agent's login file exists in home
// but is not read, naming the file and why (a symlink, not a regular file, over
// maxLoginFile bytes, unreadable), as the settings files are skipped with a note
// (frontend/agentcfg); "" when agent has no login file, it does not exist or it is read.
// Discover skips such a file without a note: the caller, which knows whether the login
// file was wanted (no API key takes precedence), prints this one.
func LoginSkipped(home, agent string) string {
	lf, ok := loginFiles[agent]
	if !ok || home == "" {
		return ""
	}
	show := "~/" + path.Join(lf.dir, lf.name)
	if _, _, err := readHomeFile(home, lf.dir, lf.name); err != nil {
		return fmt.Sprintf("login: %s skipped: %s (brood reads only a regular file of at most %d bytes inside ~/%s), so the host sign-in is not used", show, skipReason(home, lf, err), maxLoginFile, lf.dir)
	}
	return ""
}

// skipReason says in words why readHomeFile refused the login file lf: a symlink (os.Root
// refuses one that leads out of its directory), a directory, a FIFO, a file over the
// size cap, or the error itself (e.g. permission denied).
func skipReason(home string, lf loginFile, err error) string {
	fi, lerr := os.Lstat(filepath.Join(home, lf.dir, lf.name))
	switch {
	case lerr != nil:
		return err.Error()
	case fi.Mode()&fs.ModeSymlink != 0:
		return "a symlink that leads out of ~/" + lf.dir + " or not to a regular file"
	case fi.IsDir():
		return "a directory"
	case fi.Mode()&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case !fi.Mode().IsRegular():
		return "not a regular file"
	}
	return err.Error()
}

// readHomeFile returns home/dir/name and its permission bits, or nil when it does not
// exist (openHomeDir, readRootFile).
func readHomeFile(home, dir, name string) ([]byte, fs.FileMode, error) {
	r, err := openHomeDir(home, dir)
	if r == nil {
		return nil, 0, err
	}
	defer r.Close()
	return readRootFile(r, name)
}

// openHomeDir opens home/dir as an os.Root: home is opened as one, and dir inside it, so
// no symlink leads out of either. It returns nil and no error when either does not exist.
func openHomeDir(home, dir string) (*os.Root, error) {
	hr, err := os.OpenRoot(home)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer hr.Close()
	r, err := hr.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return r, err
}

// readRootFile returns name in r and its permission bits, or nil when it does not exist:
// only a regular file of at most maxLoginFile bytes is read.
func readRootFile(r *os.Root, name string) ([]byte, fs.FileMode, error) {
	f, err := r.OpenFile(name, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	} else if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	} else if !fi.Mode().IsRegular() {
		return nil, 0, errors.New("not a regular file")
	}
	data, err := io.ReadAll(io.LimitReader(f, maxLoginFile+1))
	if err != nil {
		return nil, 0, err
	}
	if len(data) > maxLoginFile {
		return nil, 0, fmt.Errorf("larger than %d bytes", maxLoginFile)
	}
	return data, fi.Mode().Perm(), nil
}
