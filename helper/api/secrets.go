package api

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Secret bindings: the real credential values of one session and the hosts each may be
// sent to. The frontend builds them (frontend/secrets) and sends them to the helper, which
// hands them to the session's egress process; there they live only in memory, in the
// TLS terminator (helper/egress/tlsterm), and are never written to disk or to a log. The
// guest receives only the placeholders. The path, in order:
//
//  1. brood (frontend/secrets.Discover) reads the developer's environment and login
//     files, makes one placeholder per value and sends SessionSecrets with start_vm.
//  2. The helper checks it (SessionSecrets.Validate), narrows every binding's hosts to
//     the session's effective egress policy, and passes it to the egress process on its
//     socketpair; it keeps no copy.
//  3. The egress process makes the session CA (tlsterm.NewCA: the key exists only in
//     that process) and answers the CA certificate, PEM, which start_vm's reply carries
//     back as SecretsCA.
//  4. brood writes the CA certificate and the placeholders into the guest before the
//     agent starts.
//
// The helper daemon (helper/egress) does steps 2 and 3 for sessions with a network; a
// session without one has no route to any bound host, so the helper drops the bindings
// and answers no CA.
//
// Back, only with SessionSecrets.WriteBack (brood run --write-back-logins): the egress
// process reports each refreshed OAuth login (RefreshedLogin) to the daemon on the same
// socketpair; the daemon keeps them in memory until the VM ended and answers them once
// to the session's owner (CallRefreshedLogins), who writes them to the login files they
// came from.

// Limits of SessionSecrets. One start_vm frame carries every binding, so the whole
// encoding must fit well inside MaxFrame.
const (
	// MaxSecretBindings is the largest number of bindings in one session.
	MaxSecretBindings = 32
	// MaxSecretValue is the longest placeholder or real value, in bytes (an OAuth JWT is
	// 1-3 KiB).
	MaxSecretValue = 8 << 10
	// MinPlaceholder is the shortest placeholder, in bytes: long enough that a random one
	// never occurs in traffic by chance.
	MinPlaceholder = 20
	// MaxSecretHosts is the largest number of hosts one value may be sent to.
	MaxSecretHosts = 8
	// MaxSecretsBytes is the largest JSON encoding of a SessionSecrets, in bytes.
	MaxSecretsBytes = 48 << 10
)

// Roles of a binding in an OAuth login (SecretBinding.Role).
const (
	RoleKey     = ""        // an API key or any other static credential
	RoleAccess  = "access"  // an OAuth access token
	RoleRefresh = "refresh" // an OAuth refresh token, sent only to its TokenURL
	RoleID      = "id"      // an OpenID Connect ID token
)

// SecretBinding is one real credential value and where it may go.
type SecretBinding struct {
	// Name says where the value came from, for the run output and the summary
	// ("$OPENAI_API_KEY", "~/.codex/auth.json tokens.access_token"); never the value.
	Name string `json:"name"`
	// Placeholder is what the guest holds instead of Value: at least MinPlaceholder
	// bytes of [A-Za-z0-9._-], unique in the session, never contained in another.
	Placeholder string `json:"placeholder"`
	// Value is the real credential: printable ASCII without spaces, at most
	// MaxSecretValue bytes.
	Value string `json:"value"`
	// Hosts are the names (lower case, no port, no wildcard) whose requests may carry
	// the value: the placeholder is swapped for Value only in a request to one of them.
	Hosts []string `json:"hosts"`
	// Login names the OAuth login the token belongs to (the same for its access,
	// refresh and ID tokens); empty for RoleKey.
	Login string `json:"login,omitempty"`
	// Role is one of RoleKey, RoleAccess, RoleRefresh, RoleID.
	Role string `json:"role,omitempty"`
	// TokenURLs are, for RoleRefresh, the login's token endpoints (https://HOST/PATH,
	// HOST one of Hosts; at most 4): the only requests whose body may carry the value,
	// and whose responses' new tokens replace the login's values.
	TokenURLs []string `json:"token_urls,omitempty"`
}

// SessionSecrets is every binding of one session.
type SessionSecrets struct {
	Bindings []SecretBinding `json:"bindings"`
	// WriteBack asks the egress process to report each refreshed OAuth login (its new
	// real values) to the daemon, which keeps them in memory until the owner fetches
	// them with CallRefreshedLogins after the VM ended (brood run --write-back-logins).
	// The helper clears it when the system policy forbids it (forbid_login_write_back).
	WriteBack bool `json:"write_back,omitempty"`
}

// RefreshedLogin is one OAuth login of a session as its last successful refresh left it:
// the new real values of the tokens that refresh replaced, for the owner to write back to
// the host login file they came from.
type RefreshedLogin struct {
	// Login is SecretBinding.Login of the session's bindings ("codex", "claude", ...).
	Login string `json:"login"`
	// Tokens maps a role (RoleAccess, RoleRefresh, RoleID) to its new real value: only
	// the roles a refresh of the session replaced, each value as Validate requires of
	// SecretBinding.Value.
	Tokens map[string]string `json:"tokens"`
	// ExpiresIn is the last refresh response's expires_in (seconds, RFC 6749 section
	// 5.1); 0 when it gave none.
	ExpiresIn int64 `json:"expires_in,omitempty"`
	// At is when the egress process received that response (UTC).
	At time.Time `json:"at"`
}

// RefreshedLogins answers CallRefreshedLogins: at most MaxSecretBindings logins, the
// encoding at most MaxSecretsBytes (the helper keeps no more).
type RefreshedLogins struct {
	Logins []RefreshedLogin `json:"logins"`
}

// Validate checks r's contracts: a login name, 1 to 3 tokens of known OAuth roles, each
// value as SecretBinding.Value, a non-negative ExpiresIn. The error names the login and
// the role, never a value.
func (r RefreshedLogin) Validate() error {
	if r.Login == "" || len(r.Login) > 256 || !printable(r.Login, false) {
		return fmt.Errorf("%w: refreshed login: name empty, too long or not printable", ErrBadSecrets)
	}
	if len(r.Tokens) == 0 || len(r.Tokens) > 3 || r.ExpiresIn < 0 {
		return fmt.Errorf("%w: refreshed login %q: %d tokens (want 1..3), expires_in %d", ErrBadSecrets, r.Login, len(r.Tokens), r.ExpiresIn)
	}
	for role, v := range r.Tokens {
		if role != RoleAccess && role != RoleRefresh && role != RoleID {
			return fmt.Errorf("%w: refreshed login %q: role %q unknown", ErrBadSecrets, r.Login, role)
		}
		if v == "" || len(v) > MaxSecretValue || !printable(v, false) {
			return fmt.Errorf("%w: refreshed login %q: %s token empty, over %d bytes, or not printable ASCII without spaces", ErrBadSecrets, r.Login, role, MaxSecretValue)
		}
	}
	return nil
}

// Validate checks s against the limits above and the field contracts of SecretBinding.
// It returns an error wrapping ErrBadSecrets that names the binding (by Name, never by
// value).
func (s SessionSecrets) Validate() error {
	if len(s.Bindings) > MaxSecretBindings {
		return fmt.Errorf("%w: %d bindings, at most %d", ErrBadSecrets, len(s.Bindings), MaxSecretBindings)
	}
	for i, b := range s.Bindings {
		if err := b.validate(); err != nil {
			return fmt.Errorf("%w: binding %q: %v", ErrBadSecrets, b.Name, err)
		}
		for _, o := range s.Bindings[:i] {
			if strings.Contains(o.Placeholder, b.Placeholder) || strings.Contains(b.Placeholder, o.Placeholder) {
				return fmt.Errorf("%w: bindings %q and %q: one placeholder contains the other", ErrBadSecrets, o.Name, b.Name)
			}
		}
	}
	n, err := s.encodedSize()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadSecrets, err)
	}
	if n > MaxSecretsBytes {
		return fmt.Errorf("%w: %d bytes encoded, at most %d", ErrBadSecrets, n, MaxSecretsBytes)
	}
	return nil
}

// encodedSize returns len(json.Marshal(s)) for bindings whose values are printable ASCII
// (validate), without encoding the values: json.Marshal would leave copies of them in
// its result and in its pooled buffer, which the egress process cannot wipe. The rest is
// encoded with every Value empty and each value's encoded length added.
func (s SessionSecrets) encodedSize() (int, error) {
	blank := SessionSecrets{}
	if s.Bindings != nil {
		blank.Bindings = make([]SecretBinding, len(s.Bindings))
	}
	n := 0
	for i, b := range s.Bindings {
		n += jsonStringLen(b.Value) - len(`""`)
		b.Value = ""
		blank.Bindings[i] = b
	}
	data, err := json.Marshal(blank)
	return len(data) + n, err
}

// jsonStringLen is the length of printable ASCII v as json.Marshal encodes it: quoted,
// `"` and `\` escaped with a backslash, and `<`, `>`, `&` as \u00XX (HTML-safe).
func jsonStringLen(v string) int {
	n := len(`""`) + len(v)
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"', '\\':
			n++
		case '<', '>', '&':
			n += 5
		}
	}
	return n
}

func (b SecretBinding) validate() error {
	if b.Name == "" || len(b.Name) > 256 || !printable(b.Name, true) {
		return fmt.Errorf("name: empty, too long or not printable")
	}
	if len(b.Placeholder) < MinPlaceholder || len(b.Placeholder) > MaxSecretValue || !placeholderChars(b.Placeholder) {
		return fmt.Errorf("placeholder: %d bytes, want %d..%d of [A-Za-z0-9._-]", len(b.Placeholder), MinPlaceholder, MaxSecretValue)
	}
	if b.Value == "" || len(b.Value) > MaxSecretValue || !printable(b.Value, false) {
		return fmt.Errorf("value: empty, over %d bytes, or not printable ASCII without spaces", MaxSecretValue)
	}
	if b.Value == b.Placeholder {
		return fmt.Errorf("placeholder equals the value")
	}
	if len(b.Hosts) > MaxSecretHosts {
		return fmt.Errorf("%d hosts, at most %d", len(b.Hosts), MaxSecretHosts)
	}
	for _, h := range b.Hosts {
		if !secretHostRe.MatchString(h) || len(h) > 253 {
			return fmt.Errorf("host %q: not a lower-case DNS name", h)
		}
	}
	switch b.Role {
	case RoleKey, RoleAccess, RoleID:
		if len(b.TokenURLs) != 0 {
			return fmt.Errorf("token_urls on a %q binding", b.Role)
		}
	case RoleRefresh:
		if len(b.TokenURLs) == 0 || len(b.TokenURLs) > 4 {
			return fmt.Errorf("%d token_urls, want 1..4", len(b.TokenURLs))
		}
		for _, t := range b.TokenURLs {
			u, err := url.Parse(t)
			if err != nil || u.Scheme != "https" || u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" || u.Path == "" {
				return fmt.Errorf("token_url %q: want https://HOST/PATH", t)
			}
			if !contains(b.Hosts, u.Hostname()) {
				return fmt.Errorf("token_url host %q is not one of the binding's hosts", u.Hostname())
			}
		}
	default:
		return fmt.Errorf("role %q unknown", b.Role)
	}
	if (b.Role == RoleKey) != (b.Login == "") {
		return fmt.Errorf("login %q with role %q: a login needs an OAuth role and the reverse", b.Login, b.Role)
	}
	return nil
}

// secretHostRe is a lower-case DNS name of at least two labels (RFC 1123 labels).
var secretHostRe = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

func printable(s string, spaces bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c > 0x7e || c < 0x20 || (c == ' ' && !spaces) {
			return false
		}
	}
	return true
}

// placeholderChars reports whether s is made only of [A-Za-z0-9._-]: characters that
// need no escaping in a header, a URL, a form or a JSON string, so a placeholder is
// found as it is wherever it travels.
func placeholderChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
