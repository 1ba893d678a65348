package tlsterm

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Limits of a Terminator (Config fields of the same names override them).
const (
	// DefaultMaxBody is the largest request body buffered for inspection (a compressed
	// body, a token-endpoint body) and the largest token-endpoint response, in bytes.
	DefaultMaxBody = 1 << 20
	// DefaultMaxDecoded is the largest decoded size of a compressed request body, in
	// bytes.
	DefaultMaxDecoded = 8 << 20
	// handshakeTimeout bounds the guest's TLS handshake.
	handshakeTimeout = 30 * time.Second
	// idleTimeout closes a guest connection with no request for this long.
	idleTimeout = 5 * time.Minute
	// maxHeaderBytes is the largest HTTP/1.1 request header block, in bytes.
	maxHeaderBytes = 256 << 10
)

// Config is what a Terminator works with.
type Config struct {
	// CA mints the guest-facing certificates; it decides which names can be terminated.
	CA *CA
	// Bindings is the session's table of real values.
	Bindings *Bindings
	// RootCAs verifies the real hosts' certificates; nil is the host's trust store.
	RootCAs *x509.CertPool
	// DialContext connects to the real host; nil is a classic-TCP (not MPTCP) net.Dialer
	// with a 30 s timeout.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxBody and MaxDecoded override DefaultMaxBody and DefaultMaxDecoded when positive.
	MaxBody, MaxDecoded int64
	// Events, when set, receives every swap, block and refresh, from the connection's
	// goroutines. An Event never holds a value.
	Events func(Event)
}

// Terminator terminates the guest's TLS for the names its CA covers.
type Terminator struct {
	cfg   Config
	stats stats
}

// New returns a Terminator for cfg; CA and Bindings are required.
func New(cfg Config) (*Terminator, error) {
	if cfg.CA == nil || cfg.Bindings == nil {
		return nil, errors.New("new TLS terminator: a CA and a binding table are required")
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxDecoded <= 0 {
		cfg.MaxDecoded = DefaultMaxDecoded
	}
	if cfg.DialContext == nil {
		d := &net.Dialer{Timeout: 30 * time.Second}
		d.SetMultipathTCP(false) // classic TCP: Landlock's TCP rules do not cover MPTCP
		cfg.DialContext = d.DialContext
	}
	return &Terminator{cfg: cfg}, nil
}

// Terminate serves one guest connection until it ends: guest is the connection from the
// guest with its ClientHello still to be read (the caller that peeked at it replays it),
// sni the server name the connection was admitted for (the name the guest resolved for
// dst through the session's DNS), dst the destination the guest connected to, where the
// real host is reached. It returns nil when the connection ended after a completed
// handshake, an error wrapping ErrName when SNI is not the CA's or the ClientHello names
// another server, or the handshake's error. guest is closed on return.
func (t *Terminator) Terminate(ctx context.Context, guest net.Conn, sni string, dst netip.AddrPort) error {
	sni = normalizeHost(sni)
	defer guest.Close()
	if !t.cfg.CA.Covers(sni) {
		return fmt.Errorf("terminate TLS for %q: %w", sni, ErrName)
	}
	raw := &batchConn{Conn: newReadBuffered(guest)}
	tc := tls.Server(raw, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if normalizeHost(h.ServerName) != sni {
				return nil, fmt.Errorf("ClientHello names %q: %w", h.ServerName, ErrName)
			}
			return t.cfg.CA.Leaf(sni)
		},
	})
	defer tc.Close()
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		return fmt.Errorf("terminate TLS for %q: %w", sni, err)
	}
	up := t.upstream(sni, dst, tc.ConnectionState().NegotiatedProtocol == "h2")
	defer up.CloseIdleConnections()
	h := &handler{t: t, sni: sni, port: dst.Port(), up: up, batch: raw}
	serveConn(ctx, tc, h)
	return nil
}

// upstream returns the transport of one guest connection: every connection it makes goes
// to dst, with TLS for sni verified against RootCAs, in the guest's protocol: HTTP/2 when
// the guest speaks it (and the real host does), else HTTP/1.1, so that the real host
// sees the protocol the guest chose and a guest on HTTP/1.1 does not pay for HTTP/2's
// framing on the way in.
func (t *Terminator) upstream(sni string, dst netip.AddrPort, h2 bool) *http.Transport {
	protos := []string{"http/1.1"}
	if h2 {
		protos = []string{"h2", "http/1.1"}
	}
	conf := &tls.Config{ServerName: sni, RootCAs: t.cfg.RootCAs, NextProtos: protos, MinVersion: tls.VersionTLS12}
	return &http.Transport{
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := t.cfg.DialContext(ctx, "tcp", dst.String())
			if err != nil {
				return nil, fmt.Errorf("connect to %s for %q: %w", dst, sni, err)
			}
			tc := tls.Client(newReadBuffered(c), conf.Clone())
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, fmt.Errorf("TLS to %s for %q: %w", dst, sni, err)
			}
			return tc, nil
		},
		ForceAttemptHTTP2: h2,
		// Larger frames from the real host: fewer reads, writes and TLS records per
		// streamed response.
		HTTP2:           &http.HTTP2Config{MaxReadFrameSize: 256 << 10},
		WriteBufferSize: 64 << 10,
		ReadBufferSize:  64 << 10,
		// One connection to the real host per guest connection: a terminated connection
		// costs the egress process two descriptors, as a spliced one does (its
		// RLIMIT_NOFILE counts on that); a guest's concurrent HTTP/2 streams share it
		// when the real host speaks HTTP/2, and wait their turn when it does not.
		MaxConnsPerHost:       1,
		MaxIdleConnsPerHost:   1,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

var discardLog = log.New(io.Discard, "", 0)

// serveConn serves the one connection c until it closes or ctx ends: HTTP/2 when the
// handshake negotiated h2 (net/http's own HTTP/2 server, at most 100 streams at once),
// else HTTP/1.1.
func serveConn(ctx context.Context, c net.Conn, h http.Handler) {
	l := &oneConn{c: c, done: make(chan struct{})}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: handshakeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          discardLog,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: 100},
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				l.close()
			}
		},
	}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	srv.Serve(l)
	<-l.done
}

// readBufferSize is how much a terminated connection reads from its socket at once, in
// bytes: crypto/tls reads little more than the record it needs (a record is at most
// 2^14 + 256 bytes, RFC 8446 section 5.2), so without it records cost about a read(2)
// each even when many are waiting.
const readBufferSize = 64 << 10

// readBuffered is a net.Conn whose reads go through a buffer of readBufferSize bytes.
type readBuffered struct {
	net.Conn
	r *bufio.Reader
}

func newReadBuffered(c net.Conn) *readBuffered {
	return &readBuffered{Conn: c, r: bufio.NewReaderSize(c, readBufferSize)}
}

func (c *readBuffered) Read(p []byte) (int, error) { return c.r.Read(p) }

// oneConn is a listener that accepts c once, then blocks until it is closed.
type oneConn struct {
	c    net.Conn
	once sync.Once
	mu   sync.Mutex
	sent bool
	done chan struct{}
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.sent {
		l.sent = true
		l.mu.Unlock()
		return l.c, nil
	}
	l.mu.Unlock()
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConn) close()         { l.once.Do(func() { close(l.done) }) }
func (l *oneConn) Close() error   { l.close(); return nil }
func (l *oneConn) Addr() net.Addr { return l.c.LocalAddr() }
