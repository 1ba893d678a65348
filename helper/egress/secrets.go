package egress

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress/tlsterm"
	"brood.dev/brood/internal/lockedmem"
	"brood.dev/brood/netpolicy"
	"brood.dev/brood/netpolicy/policywire"
)

// Secret bindings in the egress process. The daemon narrows a session's bindings to its
// policy (narrowSecrets), starts the process with -secrets and sends them as the first
// message on the control socket (procSecrets); the process builds the TLS terminator
// (tlsterm.NewSession), answers the session CA's certificate (procSecretsReply) and
// hands the terminator to its name gate. The values cross only that socketpair: they are
// in no file, argument, environment variable or log. Each swap, block and refresh comes
// back as an opSecret message (names and hosts only), which the daemon logs and counts.

// secretsTimeout bounds the daemon's wait for the process's answer to the bindings.
const secretsTimeout = 10 * time.Second

// procSecrets is the daemon's first message to a process started with -secrets.
type procSecrets struct {
	Secrets api.SessionSecrets `json:"secrets"`
	// TestRoots (PEM) replace the host's trust store for the real hosts' certificates. A
	// process refuses them unless its TestMain called AcceptTestRoots, which broodd-helper
	// never does, so a production helper can never be made to trust them.
	TestRoots []byte `json:"test_roots,omitempty"`
}

// procSecretsReply answers procSecrets: the CA certificate (PEM), or why not.
type procSecretsReply struct {
	CA  string `json:"ca,omitempty"`
	Why string `json:"why,omitempty"`
}

// narrowSecrets returns s with every binding's hosts narrowed to the session's policy
// eff (policywire.NarrowSecrets). A binding that named hosts and keeps none is an error
// wrapping api.ErrPolicy that names the binding (by its Name, never its value) and the
// hosts the policy does not allow. A binding that named no host stays (its placeholder
// is refused everywhere). It also returns whether any binding keeps a host.
func narrowSecrets(eff *netpolicy.Effective, s api.SessionSecrets) (api.SessionSecrets, bool, error) {
	if err := s.Validate(); err != nil {
		return api.SessionSecrets{}, false, err
	}
	out, removed := policywire.NarrowSecrets(eff, s)
	bound := false
	for i, b := range out.Bindings {
		if len(b.Hosts) > 0 {
			bound = true
			continue
		}
		if len(s.Bindings[i].Hosts) == 0 {
			continue
		}
		var lost []string
		for _, r := range removed {
			if h, ok := strings.CutPrefix(r, b.Name+": "); ok {
				lost = append(lost, h)
			}
		}
		return api.SessionSecrets{}, false, fmt.Errorf("%w: secret %s may go only to %s, which the session's egress policy does not allow (allow it with --allow-host, or the login that needs it cannot be used)",
			api.ErrPolicy, b.Name, strings.Join(lost, ", "))
	}
	return out, bound, nil
}

// sendSecrets sends s (and TestRoots) to the process on c and returns the CA certificate
// it answers. The encoding is cleared from memory once sent.
func sendSecrets(c *net.UnixConn, s api.SessionSecrets, testRoots []byte) (string, error) {
	b, err := json.Marshal(procSecrets{Secrets: s, TestRoots: testRoots})
	if err != nil {
		return "", err
	}
	defer clear(b)
	if len(b) > procMaxMsg {
		return "", fmt.Errorf("secret bindings: %d bytes encoded, at most %d", len(b), procMaxMsg)
	}
	c.SetDeadline(time.Now().Add(secretsTimeout))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(b); err != nil {
		return "", fmt.Errorf("send secret bindings: %w", err)
	}
	buf := make([]byte, procMaxMsg)
	n, err := c.Read(buf)
	if err != nil {
		return "", fmt.Errorf("read the session CA: %w", err)
	}
	var r procSecretsReply
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		return "", fmt.Errorf("read the session CA: %w", err)
	}
	if r.Why != "" || r.CA == "" {
		return "", fmt.Errorf("start TLS termination: %s", r.Why)
	}
	return r.CA, nil
}

// recvSecrets is the process's side of sendSecrets: it reads the bindings from c, builds
// the terminator (its events go to events; when the bindings ask for write-back, each
// refreshed login goes to refreshed) and answers the CA certificate, or the error.
// The message is read into locked memory and each value is decoded there
// (decodeSecrets), never into the Go heap; the terminator copies the values into its own
// table, and this memory is zeroed before the answer is sent.
func recvSecrets(c *net.UnixConn, events func(tlsterm.Event), refreshed func(api.RefreshedLogin)) (*tlsterm.Terminator, error) {
	mem := lockedmem.New()
	defer mem.Wipe()
	buf, err := mem.Alloc(procMaxMsg)
	if err != nil {
		return nil, fmt.Errorf("read secret bindings: %w", err)
	}
	n, err := c.Read(buf)
	if err != nil {
		return nil, fmt.Errorf("read secret bindings: %w", err)
	}
	m, err := decodeSecrets(buf[:n], mem)
	if err != nil {
		return nil, fmt.Errorf("read secret bindings: %w", err)
	}
	t, pem, err := buildTerminator(m, events)
	if err == nil && m.Secrets.WriteBack {
		t.OnRefresh(refreshed)
	}
	mem.Wipe() // before the answer: once the daemon has the CA, only the table holds values
	r := procSecretsReply{CA: string(pem)}
	if err != nil {
		r = procSecretsReply{Why: err.Error()}
	}
	b, _ := json.Marshal(r)
	if _, werr := c.Write(b); werr != nil && err == nil {
		err = fmt.Errorf("answer the session CA: %w", werr)
	}
	return t, err
}

// wireSecrets is procSecrets as the egress process decodes it: each binding's value is
// kept as its raw JSON string (rawJSON), which decodeSecrets unquotes into locked memory.
type wireSecrets struct {
	Secrets struct {
		Bindings  []wireBinding `json:"bindings"`
		WriteBack bool          `json:"write_back,omitempty"`
	} `json:"secrets"`
	TestRoots []byte `json:"test_roots,omitempty"`
}

// wireBinding is an api.SecretBinding whose "value" member (this field, shallower than
// the embedded one, takes it) stays raw.
type wireBinding struct {
	api.SecretBinding
	Value rawJSON `json:"value"`
}

// rawJSON is a JSON value as the bytes of the decoder's input (encoding/json hands
// UnmarshalJSON a slice of it), not copied.
type rawJSON []byte

func (r *rawJSON) UnmarshalJSON(b []byte) error { *r = b; return nil }

// decodeSecrets decodes the procSecrets message data with every value unquoted into a
// slot of mem (the strings share mem's bytes). The error is json's or unquoteTo's.
func decodeSecrets(data []byte, mem *lockedmem.Arena) (procSecrets, error) {
	var w wireSecrets
	if err := json.Unmarshal(data, &w); err != nil {
		return procSecrets{}, err
	}
	m := procSecrets{TestRoots: w.TestRoots}
	m.Secrets.WriteBack = w.Secrets.WriteBack
	if w.Secrets.Bindings != nil {
		m.Secrets.Bindings = make([]api.SecretBinding, len(w.Secrets.Bindings))
	}
	for i, b := range w.Secrets.Bindings {
		v, err := unquoteTo(mem, b.Value)
		if err != nil {
			return procSecrets{}, fmt.Errorf("binding %q: %w", b.Name, err)
		}
		b.SecretBinding.Value = v
		m.Secrets.Bindings[i] = b.SecretBinding
	}
	return m, nil
}

// unquoteTo decodes the JSON string raw (RFC 8259 section 7; ASCII only, as a value is
// printable ASCII) into a slot of mem and returns it as a string sharing the slot. A
// missing value (raw empty) is "". The error names the problem, never the value.
func unquoteTo(mem *lockedmem.Arena, raw []byte) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", errors.New("value: not a JSON string")
	}
	raw = raw[1 : len(raw)-1]
	if len(raw) == 0 {
		return "", nil
	}
	dst, err := mem.Alloc(len(raw))
	if err != nil {
		return "", err
	}
	n := 0
	for i := 0; i < len(raw); i, n = i+1, n+1 {
		if dst[n] = raw[i]; raw[i] != '\\' {
			continue
		}
		if i++; i == len(raw) {
			return "", errors.New("value: a JSON escape cut short")
		}
		switch e := raw[i]; {
		case e == '"' || e == '\\' || e == '/':
			dst[n] = e
		case strings.IndexByte("bfnrt", e) >= 0:
			dst[n] = "\b\f\n\r\t"[strings.IndexByte("bfnrt", e)]
		case e == 'u' && i+4 < len(raw):
			c, ok := hex4(raw[i+1 : i+5])
			if !ok || c > 0x7f {
				return "", errors.New("value: a \\u escape that is not ASCII")
			}
			dst[n], i = byte(c), i+4
		default:
			return "", errors.New("value: an unknown JSON escape")
		}
	}
	return lockedmem.View(dst[:n]), nil
}

// hex4 parses the four hexadecimal digits of a \u escape, without a copy.
func hex4(b []byte) (uint16, bool) {
	var v uint16
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint16(c)
	}
	return v, true
}

// buildTerminator makes the session's terminator from m.
func buildTerminator(m procSecrets, events func(tlsterm.Event)) (*tlsterm.Terminator, []byte, error) {
	var roots *x509.CertPool
	if len(m.TestRoots) > 0 {
		if !acceptTestRoots && !e2eBuild {
			return nil, nil, errors.New("test roots offered to a production egress process")
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(m.TestRoots) {
			return nil, nil, errors.New("test roots: no certificate")
		}
	}
	return tlsterm.NewSession(m.Secrets, nil, roots, events)
}

// acceptTestRoots is AcceptTestRoots's knob.
var acceptTestRoots bool

// AcceptTestRoots lets this process's egress processes take procSecrets.TestRoots. Only
// test binaries call it, from TestMain (it must run in the egress process itself);
// broodd-helper never does.
func AcceptTestRoots() { acceptTestRoots = true }

// secretCounts counts one session's terminator events per host, for the summary.
type secretCounts struct {
	mu    sync.Mutex
	hosts map[string]api.SecretCounts
}

// otherHosts is the key of the hosts past api.SummaryNames.
const otherHosts = "(other)"

func (s *secretCounts) count(e tlsterm.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hosts == nil {
		s.hosts = map[string]api.SecretCounts{}
	}
	key := e.Host
	if _, ok := s.hosts[key]; !ok && len(s.hosts) >= api.SummaryNames {
		key = otherHosts
	}
	c := s.hosts[key]
	switch e.Kind {
	case tlsterm.EventSwap:
		c.Swaps++
	case tlsterm.EventBlock:
		c.Blocks++
	case tlsterm.EventRefresh:
		c.Refreshes++
	}
	s.hosts[key] = c
}

func (s *secretCounts) snapshot() map[string]api.SecretCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.hosts) == 0 {
		return nil
	}
	out := make(map[string]api.SecretCounts, len(s.hosts))
	for k, v := range s.hosts {
		out[k] = v
	}
	return out
}

// secretDecision is a terminator event as the decision log holds it: Secret is the
// event's kind (which tells it from a DNS or gate decision).
type secretDecision struct {
	Time    time.Time `json:"time"`
	Secret  string    `json:"secret"`
	Host    string    `json:"host"`
	Binding string    `json:"binding,omitempty"`
	Reason  string    `json:"reason,omitempty"`
}

// validEvent checks an event the process reports before it is logged and counted.
func validEvent(e *tlsterm.Event) bool {
	if e == nil || len(e.Host) > 253 || len(e.Binding) > 256 || len(e.Reason) > 1024 {
		return false
	}
	switch e.Kind {
	case tlsterm.EventSwap, tlsterm.EventBlock, tlsterm.EventRefresh:
		return true
	}
	return false
}

// gateTerminator hands the name gate's admitted TLS connections of the bound hosts to
// the session's terminator. The gate has already checked that the SNI is a name this
// session resolved to the connection's destination, on that port.
type gateTerminator struct{ t *tlsterm.Terminator }

func (g gateTerminator) Terminates(name string) bool { return g.t.Covers(name) }

func (g gateTerminator) Terminate(guest net.Conn, hello []byte, name string, dst netip.AddrPort) error {
	return g.t.Terminate(context.Background(), &replayConn{Conn: guest, head: hello}, name, dst)
}

// replayConn reads head (the bytes the gate already read) before the rest of Conn.
type replayConn struct {
	net.Conn
	head []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// refreshedLogins keeps, in the daemon's memory, the logins one session's egress process
// reported refreshed (opRefreshed), when the session's bindings asked for write-back:
// the latest report of each login, until Manager.StopKeep hands them out. The values are
// never logged.
type refreshedLogins struct {
	mu sync.Mutex
	// allowed are the logins of the session's bindings; nil: write-back was not asked,
	// and every report is refused.
	allowed map[string]bool
	logins  map[string]api.RefreshedLogin
}

// allow records the logins of s's bindings when s asks for write-back.
func (r *refreshedLogins) allow(s *api.SessionSecrets) {
	if s == nil || !s.WriteBack {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.allowed = map[string]bool{}
	for _, b := range s.Bindings {
		if b.Login != "" {
			r.allowed[b.Login] = true
		}
	}
}

// put keeps m as its login's latest refresh. It returns why it refused m, or "": m must
// be valid (api.RefreshedLogin.Validate), of one of the allowed logins, and every login
// kept must encode within api.MaxSecretsBytes.
func (r *refreshedLogins) put(m *api.RefreshedLogin) string {
	if m == nil {
		return "no login"
	}
	if err := m.Validate(); err != nil {
		return err.Error()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.allowed[m.Login] {
		return "login " + m.Login + " is not one of the session's write-back logins"
	}
	old, had := r.logins[m.Login]
	if r.logins == nil {
		r.logins = map[string]api.RefreshedLogin{}
	}
	r.logins[m.Login] = *m
	if b, err := json.Marshal(api.RefreshedLogins{Logins: r.list()}); err != nil || len(b) > api.MaxSecretsBytes {
		if had {
			r.logins[m.Login] = old
		} else {
			delete(r.logins, m.Login)
		}
		return fmt.Sprintf("the refreshed logins would take over %d bytes", api.MaxSecretsBytes)
	}
	return ""
}

// take returns the kept logins, sorted by name, and forgets them.
func (r *refreshedLogins) take() []api.RefreshedLogin {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.list()
	r.logins = nil
	return out
}

func (r *refreshedLogins) list() []api.RefreshedLogin {
	var out []api.RefreshedLogin
	for _, k := range slices.Sorted(maps.Keys(r.logins)) {
		out = append(out, r.logins[k])
	}
	return out
}
