package namegate

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy"
)

// loopGate serves a Gate on 127.0.0.1 whose OriginalDst is dst for every connection and
// whose Dial reaches the test server up when asked for dst (and records what it was
// asked for).
type loopGate struct {
	*Gate
	addr   string
	mu     sync.Mutex
	dials  []string
	logged []Decision
}

func newLoopGate(t *testing.T, names *Names, dst netip.AddrPort, up string, cfg Config) *loopGate {
	t.Helper()
	lg := &loopGate{}
	cfg.Names = names
	cfg.OriginalDst = func(*net.TCPConn) (netip.AddrPort, error) { return dst, nil }
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		lg.mu.Lock()
		lg.dials = append(lg.dials, addr)
		lg.mu.Unlock()
		if addr != dst.String() {
			return nil, errors.New("dial to an address other than the destination")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, up)
	}
	cfg.Log = func(d Decision) { lg.mu.Lock(); lg.logged = append(lg.logged, d); lg.mu.Unlock() }
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lg.Gate, lg.addr = g, l.Addr().String()
	go g.Serve(l)
	t.Cleanup(g.Close)
	return lg
}

func (lg *loopGate) decisions() []Decision {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	return append([]Decision(nil), lg.logged...)
}

// tlsServer serves TLS for names with a test CA on 127.0.0.1 and echoes what it reads.
func tlsServer(t *testing.T, names ...string) (string, *tls.Config) {
	t.Helper()
	cert, pool := testenv.TestCA(t, names...)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Serve(t, l, func(c net.Conn) { io.Copy(c, c) })
	return l.Addr().String(), &tls.Config{RootCAs: pool}
}

// isReset reports whether err is the connection reset a refused connection gets.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

var https = []netpolicy.Port{{Proto: netpolicy.TCP, Num: 443}}

// dial connects to the gate over loopback, failing t on an error.
func (lg *loopGate) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", lg.addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// okGate is a loop gate (cfg) whose original destination is 192.0.2.10:443, in front of
// a TLS echo server whose certificate names ok.test and evil.test, with ok.test (and each
// of alsoNames) resolved to that address. It returns the gate, the client configuration
// trusting the server's CA, and the destination.
func okGate(t *testing.T, cfg Config, alsoNames ...string) (*loopGate, *tls.Config, netip.AddrPort) {
	t.Helper()
	up, ccfg := tlsServer(t, "ok.test", "evil.test")
	dst := netip.MustParseAddrPort("192.0.2.10:443")
	names := &Names{}
	for _, n := range append([]string{"ok.test"}, alsoNames...) {
		names.Add(n, []netip.Addr{dst.Addr()}, https, time.Minute)
	}
	return newLoopGate(t, names, dst, up, cfg), ccfg, dst
}

func TestGateSplicesAdmittedTLS(t *testing.T) {
	g, ccfg, dst := okGate(t, Config{})

	// Admitted: a real handshake through the gate, then bytes both ways and a half-close.
	raw := g.dial(t)
	cfg := ccfg.Clone()
	cfg.ServerName = "ok.test"
	c := tls.Client(raw, cfg)
	if err := c.Handshake(); err != nil {
		t.Fatalf("handshake through the gate: %v", err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through the gate: %q, %v", buf, err)
	}
	c.Close()

	// Refused: the same address with another tenant's SNI is reset before any byte
	// reaches the server.
	raw2 := g.dial(t)
	cfg.ServerName = "evil.test"
	if err := tls.Client(raw2, cfg).Handshake(); err == nil {
		t.Fatal("handshake with another name's SNI succeeded")
	}
	raw2.Close()
	d := g.decisions()
	if len(d) != 2 || d[0].Verdict != Admitted || d[0].Name != "ok.test" || d[1].Verdict != Refused || d[1].Name != "evil.test" ||
		d[1].Reason != "name not resolved to this address" || d[1].Gate != "tls" || d[1].Dst != dst.String() {
		t.Errorf("decisions = %+v", d)
	}
	if len(g.dials) != 1 {
		t.Errorf("dials = %v, want one (the admitted connection)", g.dials)
	}
}

func TestGateFragmentedHello(t *testing.T) {
	g, ccfg, _ := okGate(t, Config{})
	raw := g.dial(t)
	defer raw.Close()
	raw.(*net.TCPConn).SetNoDelay(true)
	cfg := ccfg.Clone()
	cfg.ServerName = "ok.test"
	// The first flight goes out in 5-byte writes, and each record carries 40 bytes of
	// handshake (so the ClientHello spans many records as well as many segments).
	c := tls.Client(&chunkWriter{Conn: raw, size: 5, reframe: 40}, cfg)
	if err := c.Handshake(); err != nil {
		t.Fatalf("handshake with a fragmented ClientHello: %v", err)
	}
	if d := g.decisions(); len(d) != 1 || d[0].Verdict != Admitted {
		t.Errorf("decisions = %+v", d)
	}
}

// chunkWriter writes its first Write (the ClientHello) re-framed into records of reframe
// handshake bytes, in writes of size bytes; later writes pass through.
type chunkWriter struct {
	net.Conn
	size, reframe int
	done          bool
}

func (w *chunkWriter) Write(b []byte) (int, error) {
	if w.done {
		return w.Conn.Write(b)
	}
	w.done = true
	out := reframe(nil, b, w.reframe)
	for len(out) > 0 {
		n := min(w.size, len(out))
		if _, err := w.Conn.Write(out[:n]); err != nil {
			return 0, err
		}
		out = out[n:]
	}
	return len(b), nil
}

func TestGateSlowlorisAndCap(t *testing.T) {
	g, _, _ := okGate(t, Config{MaxConns: 2, HelloTimeout: 300 * time.Millisecond})
	hello := realHello(t, "ok.test")
	var slow []net.Conn
	for range 2 {
		c := g.dial(t)
		defer c.Close()
		if _, err := c.Write(hello[:10]); err != nil { // never finishes its ClientHello
			t.Fatal(err)
		}
		slow = append(slow, c)
	}
	waitFor(t, func() bool { return g.Open() == 2 })
	// Both slots are held: a third connection is reset at once.
	// (On loopback the reset can arrive before connect returns.)
	if over, err := net.Dial("tcp", g.addr); err == nil {
		over.Write(hello)
		if _, err := over.Read(make([]byte, 1)); err == nil {
			t.Error("a connection over the cap was served")
		}
		over.Close()
	}
	waitFor(t, func() bool { return g.OverCap.Load() >= 1 })
	if g.OverCap.Load() != 1 {
		t.Errorf("OverCap = %d, want 1", g.OverCap.Load())
	}
	// The slow ones are reset once their deadline passes, and give their slots back.
	for _, c := range slow {
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("a slowloris connection got data")
		}
	}
	waitFor(t, func() bool { return g.Open() == 0 })
	d := g.decisions()
	if len(d) != 3 || d[0].Reason != "over the session's cap of 2 connections held at once" ||
		d[1].Verdict != Refused || d[1].Reason != "no complete first message within 300ms" || d[2].Reason != d[1].Reason {
		t.Errorf("decisions = %+v", d)
	}
	// A full ClientHello is admitted now.
	c := g.dial(t)
	defer c.Close()
	c.Write(hello)
	waitFor(t, func() bool { return g.Admitted.Load() == 1 })
}

func TestGateRefusals(t *testing.T) {
	g, _, _ := okGate(t, Config{}, "192.0.2.10") // the literal: even if one were ever recorded
	name := func(n string) [2]any { return [2]any{uint8(0), n} }
	for what, in := range map[string][]byte{
		"no SNI":           realHello(t, ""),
		"IP-literal SNI":   buildHello([2]any{uint16(0), sniData(name("192.0.2.10"))}),
		"ECH with allowed": buildHello([2]any{uint16(0), sniData(name("ok.test"))}, [2]any{uint16(extECH), []byte{0}}),
		"not TLS":          []byte("GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n"),
		"closed early":     realHello(t, "ok.test")[:20],
		"oversized":        reframe(t, buildHello([2]any{uint16(0), sniData(name("ok.test"))}, [2]any{uint16(0x1234), make([]byte, 40<<10)}), 1<<14),
	} {
		c := g.dial(t)
		c.Write(in)
		if what == "closed early" {
			c.(*net.TCPConn).CloseWrite()
		}
		if _, err := c.Read(make([]byte, 1)); !isReset(err) {
			t.Errorf("%s: read = %v, want a reset", what, err)
		}
		c.Close()
	}
	waitFor(t, func() bool { return g.Refused.Load() == 6 })
	if g.Admitted.Load() != 0 || len(g.dials) != 0 {
		t.Errorf("admitted %d, dials %v", g.Admitted.Load(), g.dials)
	}
	var reasons []string
	for _, d := range g.decisions() {
		reasons = append(reasons, d.Reason)
	}
	for _, want := range []string{"ClientHello without server_name", "server_name is an IP address",
		"ClientHello with encrypted_client_hello (the name served is hidden)", "ClientHello: larger than the gate reads"} {
		if !slices.Contains(reasons, want) {
			t.Errorf("no decision with reason %q in %q", want, reasons)
		}
	}
}

// waitFor polls cond (a state the code under test reaches on its own) until it holds;
// the test's own timeout bounds it.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWithClose(t *testing.T) {
	in := []byte("GET / HTTP/1.1\r\nHost: ok.test\r\n\r\nGET /2 HTTP/1.1\r\n")
	_, n, err := ParseHTTPHost(in, "80")
	if err != nil {
		t.Fatal(err)
	}
	got := string(withClose(in, n))
	want := "GET / HTTP/1.1\r\nHost: ok.test\r\nConnection: close\r\n\r\nGET /2 HTTP/1.1\r\n"
	if got != want {
		t.Errorf("withClose = %q, want %q", got, want)
	}
}

func TestGateDialFailure(t *testing.T) {
	// The destination refuses: the upstream address is a closed port on loopback.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	dst := netip.MustParseAddrPort("192.0.2.10:443")
	names := &Names{}
	names.Add("ok.test", []netip.Addr{dst.Addr()}, https, time.Minute)
	g := newLoopGate(t, names, dst, closed, Config{})
	c := g.dial(t)
	defer c.Close()
	c.Write(realHello(t, "ok.test"))
	if _, err := c.Read(make([]byte, 1)); !isReset(err) {
		t.Errorf("read = %v, want a reset", err)
	}
	waitFor(t, func() bool { return g.Failed.Load() == 1 })
	if d := g.decisions(); len(d) != 1 || d[0].Verdict != Failed || d[0].Name != "ok.test" || g.Admitted.Load() != 0 {
		t.Errorf("decisions = %+v, admitted %d", d, g.Admitted.Load())
	}
}
