package secrets

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"brood.dev/brood/frontend/agentcfg"
	"brood.dev/brood/helper/api"
)

// ErrLoginChanged reports a host login file that is not as brood read it at the start of
// the session (its CLI on the host refreshed it meanwhile, say): it is not written back.
var ErrLoginChanged = errors.New("changed on the host since the session started")

// Login is a host login file whose OAuth tokens the guest got as placeholders: where it
// is, which logins (api.SecretBinding.Login) its tokens belong to, and the SHA-256 of its
// bytes as read at the start of the session.
type Login struct {
	// Show is the file as the run output names it ("~/.codex/auth.json").
	Show   string
	home   string
	agent  string // its loginFiles key
	logins []string
	hash   [sha256.Size]byte
}

// Logins returns the OAuth logins of l's tokens.
func (l Login) Logins() []string { return slices.Clone(l.logins) }

// WriteBack rewrites l's file with the new real values of refreshed that belong to its
// logins (the others are ignored), when the file is still the one brood read: its
// SHA-256 must be unchanged (else an error wrapping ErrLoginChanged, and the file is kept
// as it is) and it must be a regular file, not a symlink. Only the refreshed tokens and
// the file's expiry field change (updateCodex, updateClaude, updateGemini,
// updateOpencode); every other member is kept (the JSON is re-encoded: members sorted,
// two-space indent). The write is atomic: a new file in the same directory with the
// old file's permission bits, fsync, rename over the old one, fsync of the directory.
// It returns the fields it updated ("tokens.access_token", ...), none when refreshed
// holds none of l's logins.
func (l Login) WriteBack(refreshed []api.RefreshedLogin) ([]string, error) {
	var mine []api.RefreshedLogin
	for _, r := range refreshed {
		if slices.Contains(l.logins, r.Login) && r.Validate() == nil {
			mine = append(mine, r)
		}
	}
	lf, ok := loginFiles[l.agent]
	if len(mine) == 0 || !ok {
		return nil, nil
	}
	r, err := openHomeDir(l.home, lf.dir)
	if r == nil {
		if err == nil {
			err = fs.ErrNotExist
		}
		return nil, fmt.Errorf("write back %s: %w", l.Show, err)
	}
	defer r.Close()
	data, mode, err := l.readUnchanged(r, lf.name)
	if err != nil {
		return nil, err
	}
	m, err := agentcfg.DecodeObject(data)
	if err != nil {
		return nil, fmt.Errorf("write back %s: %w: %w", l.Show, ErrMalformedLogin, err)
	}
	var fields []string
	for _, x := range mine {
		fields = append(fields, lf.update(m, x)...)
	}
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("write back %s: encode: %w", l.Show, err)
	}
	if err := l.replace(r, lf.name, append(out, '\n'), mode); err != nil {
		return nil, err
	}
	return fields, nil
}

// readUnchanged reads name in r and checks that it is the file brood read: a regular file
// (not a symlink) whose SHA-256 is l.hash.
func (l Login) readUnchanged(r *os.Root, name string) ([]byte, fs.FileMode, error) {
	if fi, err := r.Lstat(name); err != nil {
		return nil, 0, fmt.Errorf("write back %s: %w", l.Show, err)
	} else if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("write back %s: not a regular file (a symlink?): not written back", l.Show)
	}
	data, mode, err := readRootFile(r, name)
	if err == nil && data == nil {
		err = fs.ErrNotExist
	}
	if err != nil {
		return nil, 0, fmt.Errorf("write back %s: %w", l.Show, err)
	}
	if sha256.Sum256(data) != l.hash {
		return nil, 0, fmt.Errorf("%s %w: the tokens refreshed in the session were not written back, the file is kept as it is", l.Show, ErrLoginChanged)
	}
	return data, mode, nil
}

// replace writes data to a new file in r with mode, syncs it, checks once more that name
// is unchanged, renames the new file over name and syncs the directory. The new file is
// removed on any error.
func (l Login) replace(r *os.Root, name string, data []byte, mode fs.FileMode) (err error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := "." + name + ".brood-" + hex.EncodeToString(rnd[:])
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write back %s: %w", l.Show, err)
	}
	defer func() {
		if err != nil {
			r.Remove(tmp)
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode) // exactly the old bits, whatever the umask
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write back %s: %w", l.Show, err)
	}
	if _, _, err := l.readUnchanged(r, name); err != nil {
		return err
	}
	if err := r.Rename(tmp, name); err != nil {
		return fmt.Errorf("write back %s: %w", l.Show, err)
	}
	if d, err := r.Open("."); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// setTokens sets each field of fields (under m) whose role r refreshed to its new value
// and returns the fields' dotted names.
func setTokens(m map[string]any, fields []tokenField, r api.RefreshedLogin, prefix string) []string {
	var set []string
	for _, f := range fields {
		v, ok := r.Tokens[f.role]
		if !ok {
			continue
		}
		parent, last := walk(m, f.keys)
		if _, had := parent[last]; !had {
			continue // the file has no such token (so no binding was refreshed for it)
		}
		parent[last] = v
		set = append(set, prefix+strings.Join(f.keys, "."))
	}
	return set
}

// expiryMillis is the refresh's expiry as milliseconds since the Unix epoch (the unit of
// claude's expiresAt, gemini's expiry_date and opencode's expires), and whether the
// response gave expires_in.
func expiryMillis(r api.RefreshedLogin) (int64, bool) {
	if r.ExpiresIn <= 0 {
		return 0, false
	}
	return r.At.Add(time.Duration(r.ExpiresIn) * time.Second).UnixMilli(), true
}

// updateCodex: tokens.access_token, .refresh_token, .id_token as refreshed, and
// last_refresh (RFC 3339, as codex writes it) set to the time of the refresh, which is
// what codex records when it refreshes.
func updateCodex(m map[string]any, r api.RefreshedLogin) []string {
	if r.Login != "codex" {
		return nil
	}
	set := setTokens(m, codexFields, r, "")
	if len(set) > 0 {
		m["last_refresh"] = r.At.UTC().Format(time.RFC3339Nano)
		set = append(set, "last_refresh")
	}
	return set
}

// updateClaude: claudeAiOauth.accessToken, .refreshToken as refreshed, and expiresAt
// (milliseconds) when the response gave expires_in.
func updateClaude(m map[string]any, r api.RefreshedLogin) []string {
	if r.Login != "claude" {
		return nil
	}
	set := setTokens(m, claudeFields, r, "")
	if o, ok := m["claudeAiOauth"].(map[string]any); ok && len(set) > 0 {
		if ms, ok := expiryMillis(r); ok {
			o["expiresAt"] = ms
			set = append(set, "claudeAiOauth.expiresAt")
		}
	}
	return set
}

// updateGemini: access_token, refresh_token, id_token as refreshed, and expiry_date
// (milliseconds) when the response gave expires_in.
func updateGemini(m map[string]any, r api.RefreshedLogin) []string {
	if r.Login != "gemini" {
		return nil
	}
	set := setTokens(m, geminiFields, r, "")
	if ms, ok := expiryMillis(r); ok && len(set) > 0 {
		m["expiry_date"] = ms
		set = append(set, "expiry_date")
	}
	return set
}

// updateOpencode: the provider's entry (login "opencode-PROVIDER") gets access, refresh
// as refreshed, and expires (milliseconds) when the response gave expires_in.
func updateOpencode(m map[string]any, r api.RefreshedLogin) []string {
	id, ok := strings.CutPrefix(r.Login, "opencode-")
	e, isMap := m[id].(map[string]any)
	if !ok || !isMap {
		return nil
	}
	set := setTokens(e, opencodeFields, r, id+".")
	if ms, ok := expiryMillis(r); ok && len(set) > 0 {
		e["expires"] = ms
		set = append(set, id+".expires")
	}
	return set
}
