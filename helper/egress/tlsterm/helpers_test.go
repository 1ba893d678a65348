package tlsterm

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"brood.dev/brood/helper/api"
)

// Names of the fake hosts; every connection stays on loopback.
const (
	provider = "api.provider.test"
	other    = "api.other.test"
	authHost = "auth.provider.test"
)

// Values of the fake session: the real ones never reach the guest-side client.
const (
	realKey      = "sk-proj-REALKEYREALKEYREALKEYREALKEY0001"
	keyPH        = "sk-proj-PLACEHOLDERplaceholder0000000001"
	realOther    = "other-REAL-0000000000000000000000000002"
	otherPH      = "other-PLACEHOLDER-000000000000000000002"
	realAccess   = "access-REAL-000000000000000000000000003"
	accessPH     = "access-PLACEHOLDER-0000000000000000003"
	realRefresh  = "refresh/REAL+00000000000000000000000004"
	refreshPH    = "refresh-PLACEHOLDER-000000000000000004"
	tokenURL     = "https://" + authHost + "/oauth/token"
	loginName    = "test-login"
	nowhereReal  = "nowhere-REAL-0000000000000000000000005"
	nowherePH    = "nowhere-PLACEHOLDER-00000000000000005"
	maxBodyTest  = 64 << 10
	sseTotalSize = 10 << 20
)

func testSecrets() api.SessionSecrets {
	return api.SessionSecrets{Bindings: []api.SecretBinding{
		{Name: "$PROVIDER_API_KEY", Placeholder: keyPH, Value: realKey, Hosts: []string{provider}},
		{Name: "$OTHER_TOKEN", Placeholder: otherPH, Value: realOther, Hosts: []string{other}},
		{Name: "login access", Placeholder: accessPH, Value: realAccess, Hosts: []string{provider}, Login: loginName, Role: api.RoleAccess},
		{Name: "login refresh", Placeholder: refreshPH, Value: realRefresh, Hosts: []string{authHost}, Login: loginName, Role: api.RoleRefresh, TokenURLs: []string{tokenURL}},
		{Name: "$UNBOUND_SECRET", Placeholder: nowherePH, Value: nowhereReal},
	}}
}

// upstream is a fake real host: a TLS server (h2 and http/1.1) whose certificate comes
// from its own CA, trusted only through Config.RootCAs.
type upstream struct {
	addr  netip.AddrPort
	roots *x509.CertPool
	mu    sync.Mutex
	seen  []*http.Request // requests as received, bodies read into bodies
	body  [][]byte
}

func (u *upstream) requests() ([]*http.Request, [][]byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*http.Request(nil), u.seen...), append([][]byte(nil), u.body...)
}

// startUpstream serves h (after recording each request) on loopback for the names given.
func startUpstream(t *testing.T, h http.HandlerFunc, names ...string) *upstream {
	t.Helper()
	return startUpstreamOn(t, h, nil, names...)
}

// startUpstreamOn is startUpstream with each accepted connection passed through wrap
// (nil: none) before TLS.
func startUpstreamOn(t *testing.T, h http.HandlerFunc, wrap func(net.Conn) net.Conn, names ...string) *upstream {
	t.Helper()
	ca, err := NewCA(names, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{roots: x509.NewCertPool()}
	u.roots.AddCert(ca.Certificate())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = l.Addr().(*net.TCPAddr).AddrPort()
	if wrap != nil {
		l = wrapListener{l, wrap}
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b []byte
		if r.Body != nil && !isStream(r) {
			b, _ = io.ReadAll(r.Body)
		}
		u.mu.Lock()
		u.seen, u.body = append(u.seen, r), append(u.body, b)
		u.mu.Unlock()
		h(w, r)
	}), ErrorLog: discardLog}
	srv.TLSConfig = &tls.Config{NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) { return ca.Leaf(hi.ServerName) }}
	if err := http2.ConfigureServer(srv, nil); err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(l, "", "")
	t.Cleanup(func() { srv.Close() })
	return u
}

// wrapListener passes each accepted connection through wrap.
type wrapListener struct {
	net.Listener
	wrap func(net.Conn) net.Conn
}

func (l wrapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.wrap(c), nil
}

func isStream(r *http.Request) bool { return r.Header.Get("X-Test-Stream") != "" }

// session is a terminator listening on loopback: each accepted connection is terminated
// for sni towards up.
type session struct {
	term   *Terminator
	ca     *CA
	addr   string
	mu     sync.Mutex
	events []Event
	errs   chan error
	conns  int
}

func (s *session) eventsOf(kind EventKind) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Event
	for _, e := range s.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func startSession(t *testing.T, up *upstream, sni string) *session {
	t.Helper()
	return startSessionOn(t, up, sni, nil)
}

// startSessionOn is startSession with each guest connection passed through wrap (nil:
// none) before the terminator gets it.
func startSessionOn(t *testing.T, up *upstream, sni string, wrap func(net.Conn) net.Conn) *session {
	t.Helper()
	ca, err := NewCA([]string{provider, other, authHost, "nobinding.test"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBindings(testSecrets())
	if err != nil {
		t.Fatal(err)
	}
	s := &session{ca: ca, errs: make(chan error, 64)}
	s.term, err = New(Config{CA: ca, Bindings: b, RootCAs: up.roots, MaxBody: maxBodyTest,
		Events: func(e Event) { s.mu.Lock(); s.events = append(s.events, e); s.mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
			if wrap != nil {
				c = wrap(c)
			}
			go func() { s.errs <- s.term.Terminate(ctx, c, sni, up.addr) }()
		}
	}()
	return s
}

// client returns a guest-side HTTP client that reaches the session for any URL, trusting
// only the session CA, over h2 when h2 is set.
func (s *session) client(h2 bool, sni string) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca.CertPEM())
	conf := &tls.Config{RootCAs: pool, ServerName: sni}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", s.addr)
	}
	if h2 {
		conf.NextProtos = []string{"h2"}
		return &http.Client{Transport: &http2.Transport{TLSClientConfig: conf,
			DialTLSContext: func(ctx context.Context, n, a string, c *tls.Config) (net.Conn, error) {
				raw, err := dial(ctx, n, a)
				if err != nil {
					return nil, err
				}
				tc := tls.Client(raw, c)
				return tc, tc.HandshakeContext(ctx)
			}}}
	}
	conf.NextProtos = []string{"http/1.1"}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: conf, DialContext: dial, ForceAttemptHTTP2: false,
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
}

func mustDo(t *testing.T, c *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("read response: %v", err)
	}
	return resp, b
}

func gzipped(data []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(data)
	zw.Close()
	return buf.Bytes()
}
