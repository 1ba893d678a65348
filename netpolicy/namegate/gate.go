package namegate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a Gate's Config.
const (
	// DefaultMaxConns bounds the connections one session's gate holds at once (each
	// costs the process two descriptors: the guest's and the upstream's).
	DefaultMaxConns = 256
	// DefaultHelloTimeout bounds the time from accept to a complete ClientHello or
	// request head: a client that trickles (slowloris) or stalls is reset then.
	DefaultHelloTimeout = 10 * time.Second
	// DefaultDialTimeout bounds the connect to the original destination.
	DefaultDialTimeout = 10 * time.Second
)

// Ports the gate serves: TLS (RFC 8446, SNI) and HTTP/1.x (RFC 9112, Host).
const (
	PortTLS  = 443
	PortHTTP = 80
)

// Verdicts of a gate Decision.
const (
	Admitted = "admitted" // spliced (or handed to the Terminator)
	Refused  = "refused"  // reset before anything reached the destination
	Failed   = "failed"   // admitted, but the destination could not be reached; reset
)

// Decision is one gated connection, for the session's decision log. Gate is always set
// ("tls" or "http"), which tells it from a DNS decision.
type Decision struct {
	Time    time.Time `json:"time"`
	Gate    string    `json:"gate"`
	Verdict string    `json:"verdict"`
	Name    string    `json:"name,omitempty"` // the SNI or Host, when there was one
	Dst     string    `json:"dst,omitempty"`  // the original destination, address:port
	Reason  string    `json:"reason,omitempty"`
}

// Terminator is the seam for hosts whose TLS is to be terminated by brood (to add a
// secret the guest never sees) instead of spliced. Nothing implements it yet: a nil
// Terminator splices every admitted connection.
type Terminator interface {
	// Terminates reports whether admitted TLS connections for name (lower case) are
	// handed to Terminate instead of being spliced.
	Terminates(name string) bool
	// Terminate serves guest, a connection admitted for name to dst, whose first bytes
	// (the ClientHello, hello) the gate has already read. It owns guest and closes it.
	Terminate(guest net.Conn, hello []byte, name string, dst netip.AddrPort) error
}

// Config configures a Gate. Names is required.
type Config struct {
	Names *Names
	// Log receives one Decision per connection; nil: none.
	Log func(Decision)
	// Dial connects to an admitted connection's original destination; nil: a
	// net.Dialer with DialTimeout. It is called with exactly that address.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// OriginalDst returns the destination the guest connected to before the session's
	// nft chain redirected it; nil: OriginalDst (SO_ORIGINAL_DST).
	OriginalDst func(c *net.TCPConn) (netip.AddrPort, error)
	// MaxConns, HelloTimeout, DialTimeout: zero takes the Default.
	MaxConns     int
	HelloTimeout time.Duration
	DialTimeout  time.Duration
	// Terminator, when set, takes admitted TLS connections of the names it terminates.
	Terminator Terminator
}

// Gate serves redirected guest connections. Counters are safe to read at any time.
type Gate struct {
	cfg Config

	Admitted, Refused, Failed atomic.Int64
	// OverCap counts connections reset at once because MaxConns were open (they are
	// counted and logged as Refused too).
	OverCap atomic.Int64
	open    atomic.Int64

	mu     sync.Mutex
	lns    []net.Listener
	conns  sync.WaitGroup
	closed bool
}

// New returns a Gate for cfg; it fails without Names.
func New(cfg Config) (*Gate, error) {
	if cfg.Names == nil {
		return nil, errors.New("name gate: no Names")
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = DefaultHelloTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: cfg.DialTimeout}
		cfg.Dial = d.DialContext
	}
	if cfg.OriginalDst == nil {
		cfg.OriginalDst = OriginalDst
	}
	return &Gate{cfg: cfg}, nil
}

// Open returns the number of connections the gate holds now.
func (g *Gate) Open() int64 { return g.open.Load() }

// Serve accepts connections on l until it is closed (Close) and gates each in its own
// goroutine. It returns nil after Close, else the listener's error.
func (g *Gate) Serve(l net.Listener) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		l.Close()
		return nil
	}
	g.lns = append(g.lns, l)
	g.mu.Unlock()
	for {
		c, err := l.Accept()
		if err != nil {
			g.mu.Lock()
			closed := g.closed
			g.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			if isTemporary(err) {
				time.Sleep(50 * time.Millisecond) // EMFILE and the like: back off, keep serving
				continue
			}
			return fmt.Errorf("name gate: accept on %s: %w", l.Addr(), err)
		}
		tc, ok := c.(*net.TCPConn)
		if !ok {
			c.Close()
			continue
		}
		if g.open.Add(1) > int64(g.cfg.MaxConns) {
			g.open.Add(-1)
			g.OverCap.Add(1)
			d := Decision{Time: time.Now().UTC(), Gate: "tcp",
				Reason: fmt.Sprintf("over the session's cap of %d connections held at once", g.cfg.MaxConns)}
			if dst, err := g.cfg.OriginalDst(tc); err == nil {
				d.Dst = dst.String()
			}
			g.refuse(tc, d)
			continue
		}
		g.conns.Add(1)
		go func() {
			defer g.conns.Done()
			defer g.open.Add(-1)
			g.handle(tc)
		}()
	}
}

// isTemporary reports accept errors a server retries (descriptor or memory exhaustion,
// an aborted connection).
func isTemporary(err error) bool {
	var se *os.SyscallError
	if !errors.As(err, &se) {
		return false
	}
	switch se.Err.Error() {
	case "too many open files", "too many open files in system", "no buffer space available",
		"cannot allocate memory", "software caused connection abort", "connection reset by peer":
		return true
	}
	return false
}

// Close stops the listeners and resets nothing: connections being spliced end when
// either side closes (or the process exits).
func (g *Gate) Close() {
	g.mu.Lock()
	g.closed = true
	lns := g.lns
	g.lns = nil
	g.mu.Unlock()
	for _, l := range lns {
		l.Close()
	}
}

// handle gates one connection: original destination, name, admission, then splice.
func (g *Gate) handle(c *net.TCPConn) {
	d := Decision{Time: time.Now().UTC()}
	dst, err := g.cfg.OriginalDst(c)
	if err != nil || !dst.IsValid() {
		d.Gate, d.Reason = "tcp", fmt.Sprintf("no original destination: %v", err)
		g.refuse(c, d)
		return
	}
	d.Dst = dst.String()
	if la, ok := c.LocalAddr().(*net.TCPAddr); ok && la.AddrPort().Addr().Unmap() == dst.Addr().Unmap() {
		d.Gate, d.Reason = "tcp", "not redirected (connection to the gate itself)"
		g.refuse(c, d)
		return
	}
	var head []byte
	switch dst.Port() {
	case PortTLS:
		d.Gate = "tls"
		head, d.Name, err = g.readName(c, dst, readTLSName)
	case PortHTTP:
		d.Gate = "http"
		head, d.Name, err = g.readName(c, dst, readHTTPName)
	default:
		d.Gate, err = "tcp", fmt.Errorf("port %d is not gated", dst.Port())
	}
	if err == nil {
		if ok, why := g.cfg.Names.Admits(d.Name, dst); !ok {
			err = errors.New(why)
		}
	}
	if err != nil {
		d.Reason = err.Error()
		g.refuse(c, d)
		return
	}
	if d.Gate == "tls" && g.cfg.Terminator != nil && g.cfg.Terminator.Terminates(d.Name) {
		g.admit(d)
		_ = g.cfg.Terminator.Terminate(c, head, d.Name, dst)
		return
	}
	g.splice(c, head, dst, d)
}

// nameReader reads what a client sent first and returns those bytes and the name they
// carry.
type nameReader func(c *net.TCPConn, dst netip.AddrPort) ([]byte, string, error)

// readName runs read under the HelloTimeout read deadline.
func (g *Gate) readName(c *net.TCPConn, dst netip.AddrPort, read nameReader) ([]byte, string, error) {
	c.SetReadDeadline(time.Now().Add(g.cfg.HelloTimeout))
	head, name, err := read(c, dst)
	c.SetReadDeadline(time.Time{})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("no complete first message within %v", g.cfg.HelloTimeout)
	}
	return head, name, err
}

// readUntil reads from c into a buffer until parse stops answering ErrIncomplete, the
// peer stops sending, or MaxHelloBytes are read.
func readUntil(c net.Conn, parse func([]byte) error) ([]byte, error) {
	buf := make([]byte, 0, 4096)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := c.Read(buf[len(buf):min(cap(buf), MaxHelloBytes)])
		buf = buf[:len(buf)+n]
		if n > 0 {
			perr := parse(buf)
			if !errors.Is(perr, ErrIncomplete) {
				return buf, perr
			}
			if len(buf) >= MaxHelloBytes {
				return buf, ErrTooLarge
			}
		}
		if err != nil {
			if err == io.EOF {
				err = errors.New("client closed before its first message was complete")
			}
			return buf, err
		}
	}
}

func readTLSName(c *net.TCPConn, _ netip.AddrPort) ([]byte, string, error) {
	var h Hello
	head, err := readUntil(c, func(b []byte) (err error) { h, _, err = ParseClientHello(b); return err })
	switch {
	case err != nil:
		return nil, "", fmt.Errorf("ClientHello: %w", err)
	case h.ECH:
		return nil, h.ServerName, errors.New("ClientHello with encrypted_client_hello (the name served is hidden)")
	case h.ServerName == "":
		return nil, "", errors.New("ClientHello without server_name")
	case isIPLiteral(h.ServerName):
		return nil, h.ServerName, errors.New("server_name is an IP address")
	}
	return head, h.ServerName, nil
}

// readHTTPName reads the first request head and returns the bytes read with a
// "Connection: close" header added to that head (withClose), and its Host.
func readHTTPName(c *net.TCPConn, dst netip.AddrPort) ([]byte, string, error) {
	var host string
	var n int
	port := strconv.Itoa(int(dst.Port()))
	head, err := readUntil(c, func(b []byte) (err error) { host, n, err = ParseHTTPHost(b, port); return err })
	switch {
	case err != nil:
		return nil, "", fmt.Errorf("request head: %w", err)
	case isIPLiteral(host):
		return nil, host, errors.New("Host is an IP address")
	}
	return withClose(head, n), host, nil
}

// withClose inserts "Connection: close" as the last header line of the request head
// b[:n] (which ends with the empty line). The server must then close the connection
// after its response to this request and not act on further requests received on it
// (RFC 9112 9.6), so the one request whose Host the gate checked is the only one a
// compliant server answers on the connection.
func withClose(b []byte, n int) []byte {
	out := make([]byte, 0, len(b)+19)
	out = append(out, b[:n-2]...)
	out = append(out, "Connection: close\r\n"...)
	return append(out, b[n-2:]...)
}

func (g *Gate) log(d Decision) {
	if g.cfg.Log != nil {
		g.cfg.Log(d)
	}
}

func (g *Gate) refuse(c *net.TCPConn, d Decision) {
	d.Verdict = Refused
	g.Refused.Add(1)
	g.log(d)
	reset(c)
}

func (g *Gate) admit(d Decision) {
	d.Verdict = Admitted
	g.Admitted.Add(1)
	g.log(d)
}

// reset closes c with SO_LINGER 0, so the peer gets a TCP RST instead of a FIN.
func reset(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

// splice dials dst, writes head to it, then copies both ways until both have ended;
// an end of file is passed on as a half-close (shutdown SHUT_WR), an error ends both.
func (g *Gate) splice(c *net.TCPConn, head []byte, dst netip.AddrPort, d Decision) {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.DialTimeout)
	uc, err := g.cfg.Dial(ctx, "tcp", dst.String())
	cancel()
	if err != nil {
		d.Verdict, d.Reason = Failed, err.Error()
		g.Failed.Add(1)
		g.log(d)
		reset(c)
		return
	}
	g.admit(d)
	defer uc.Close()
	defer c.Close()
	if _, err := uc.Write(head); err != nil {
		reset(c)
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(uc, c)
	}()
	pipe(c, uc)
	<-done
}

// copyBufSize is the buffer of one direction of a spliced connection (bytes): with
// DefaultMaxConns connections, 256 × 2 × 16 KiB = 8 MiB at most.
const copyBufSize = 16 << 10

// pipe copies src to dst through a buffer of its own. At src's end of file it half-closes
// dst (CloseWrite); on an error, or when dst cannot half-close, it closes both, which
// ends the other direction.
//
// The copy hides the connections' ReadFrom and WriteTo: between two TCP sockets io.Copy
// would use splice(2), which takes a pipe (two more descriptors) per direction while it
// runs, so each connection would cost six descriptors instead of two and the process's
// RLIMIT_NOFILE would no longer bound the connections it can hold.
func pipe(dst, src net.Conn) {
	_, err := io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, make([]byte, copyBufSize))
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil && cw.CloseWrite() == nil {
		return
	}
	dst.Close()
	src.Close()
}
