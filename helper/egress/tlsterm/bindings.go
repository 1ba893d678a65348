package tlsterm

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/lockedmem"
	"brood.dev/brood/internal/placeholder"
)

// maxRotated is how many bindings refreshes may add past the session's own.
const maxRotated = 64

// binding is one entry of the table: api.SecretBinding with its hosts normalized. value
// is backed by slot, in the table's locked arena.
type binding struct {
	name, placeholder, value string
	slot                     []byte
	hosts                    []string
	login, role              string
	tokenURLs                []string
	rotated                  bool
}

// boundTo reports whether b's value may go to host.
func (b *binding) boundTo(host string) bool { return slices.Contains(b.hosts, host) }

// swappable reports whether b's placeholder may be replaced in a request to host: b is
// bound to host and, for a refresh token, the place is a token endpoint's body (token).
func (b *binding) swappable(host string, token bool) bool {
	return b.boundTo(host) && (b.role != api.RoleRefresh || token)
}

// Bindings is the session's table of real values, in memory only: the values' bytes are
// in a lockedmem.Arena (locked, excluded from core dumps; Wipe zeroes them). It is safe
// for concurrent use; a refresh adds entries (Rotate) while requests read it.
type Bindings struct {
	mu      sync.RWMutex
	mem     *lockedmem.Arena
	list    []binding
	rotated int
	maxLen  int // the longest placeholder, in bytes
	// onRefresh, when set (OnRefresh), gets each login a token response refreshed.
	onRefresh func(api.RefreshedLogin)
}

// OnRefresh makes t call f, after every token response that refreshed a login, with
// that login's refreshed tokens (refreshed). f holds real values: only the opt-in
// write-back of login files sets it, and it must send them nowhere but to the session's
// owner. Call it before the terminator serves.
func (t *Bindings) OnRefresh(f func(api.RefreshedLogin)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onRefresh = f
}

// refreshed reports login's refreshed tokens to the OnRefresh callback, if any: for each
// role whose latest entry a refresh added, its value; expiresIn (seconds) and at are
// the token response's expires_in and arrival time.
func (t *Bindings) refreshed(login string, expiresIn int64, at time.Time) {
	t.mu.RLock()
	f := t.onRefresh
	r := api.RefreshedLogin{Login: login, Tokens: map[string]string{}, ExpiresIn: max(expiresIn, 0), At: at.UTC()}
	for _, e := range t.list { // later entries replace earlier ones of the same role
		if e.login == login && e.role != api.RoleKey {
			if e.rotated {
				r.Tokens[e.role] = e.value
			} else {
				delete(r.Tokens, e.role)
			}
		}
	}
	t.mu.RUnlock()
	if f != nil && len(r.Tokens) > 0 {
		f(r)
	}
}

// NewBindings builds the table from s, which it validates (api.SessionSecrets.Validate),
// copying each value into the table's arena; s's own strings are not changed. The error
// is the validation's or the arena's (a failed mmap; a failed mlock is LockErr).
func NewBindings(s api.SessionSecrets) (*Bindings, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("load secret bindings: %w", err)
	}
	t := &Bindings{mem: lockedmem.New()}
	for _, b := range s.Bindings {
		v, slot, err := t.mem.String(b.Value)
		if err != nil {
			t.mem.Wipe()
			return nil, fmt.Errorf("load secret bindings: %w", err)
		}
		e := binding{name: b.Name, placeholder: b.Placeholder, value: v, slot: slot, login: b.Login, role: b.Role,
			tokenURLs: slices.Clone(b.TokenURLs)}
		for _, h := range b.Hosts {
			e.hosts = append(e.hosts, normalizeHost(h))
		}
		t.add(e)
	}
	return t, nil
}

func (t *Bindings) add(e binding) {
	t.list = append(t.list, e)
	t.maxLen = max(t.maxLen, len(e.placeholder))
}

// snapshot returns the entries as they are now; the strings are shared, the slice is not.
func (t *Bindings) snapshot() ([]binding, int) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return slices.Clone(t.list), t.maxLen
}

// Len returns the number of entries.
func (t *Bindings) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.list)
}

// Rotate records value as the new real value of login's token of role (the answer of a
// token endpoint) and returns the new placeholder the guest gets for it. The entry is a
// copy of the login's latest entry of that role, so it goes to the same hosts; older
// entries stay (a request in flight may still use them) until maxRotated refreshes were
// added, then the oldest refreshed one is dropped and its value zeroed. The new value is
// copied into the arena. It returns false when the login has no entry of role, when
// value is longer than api.MaxSecretValue (as a session's own values may not be), or
// when the arena cannot map memory.
func (t *Bindings) Rotate(login, role, value string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var last *binding
	for i := range t.list {
		if t.list[i].login == login && t.list[i].role == role {
			last = &t.list[i]
		}
	}
	if last == nil || login == "" {
		return "", false
	}
	if last.value == value {
		return last.placeholder, true
	}
	if len(value) > api.MaxSecretValue {
		return "", false
	}
	v, slot, err := t.mem.String(value)
	if err != nil {
		return "", false
	}
	e := *last
	e.value, e.slot, e.placeholder, e.rotated = v, slot, placeholder.New(value), true
	if t.rotated >= maxRotated {
		for i := range t.list {
			if t.list[i].rotated {
				t.mem.Free(t.list[i].slot)
				t.list = slices.Delete(t.list, i, i+1)
				t.rotated--
				break
			}
		}
	}
	t.add(e)
	t.rotated++
	return e.placeholder, true
}

// Value returns the current real value of login's token of role, for tests and for the
// opt-in write-back of a refreshed login file.
func (t *Bindings) Value(login, role string) (string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for i := len(t.list) - 1; i >= 0; i-- {
		if t.list[i].login == login && t.list[i].role == role {
			return t.list[i].value, true
		}
	}
	return "", false
}

// Wipe zeroes every real value of the table (the arena), at the session's end: the
// entries stay, with values of zero bytes.
func (t *Bindings) Wipe() { t.mem.Wipe() }

// LockErr reports why the table's memory is not locked (lockedmem.Arena.LockErr), or nil.
func (t *Bindings) LockErr() error { return t.mem.LockErr() }

// Mappings returns the table's arena mappings (start address, length in bytes), as
// /proc/PID/smaps lists them.
func (t *Bindings) Mappings() [][2]uintptr { return t.mem.Mappings() }

// Secrets returns t's binding table, which the egress process wipes at the session's end.
func (t *Terminator) Secrets() *Bindings { return t.cfg.Bindings }
