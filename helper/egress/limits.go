package egress

import (
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"

	"brood.dev/brood/netpolicy/namegate"
)

// Per-session caps of the DNS proxy, so that one guest cannot exhaust the descriptors of
// the process that serves every session. A guest resolver keeps a few TCP connections and
// a few dozen queries in flight at most (glibc: one per nameserver and family).
//
//   - MaxDNSTCPConns bounds the TCP connections open at once to one session's proxy, over
//     its IPv4 and IPv6 listeners together. A connection over the cap is accepted and
//     closed at once: it costs one descriptor for the time of two system calls.
//   - MaxDNSInflight bounds the queries being answered at once for one session (UDP and
//     TCP together); each may hold an upstream socket for up to the upstream timeout.
//     A query over the cap gets SERVFAIL without being forwarded.
//
// Together they bound one session's proxy to 4 listening sockets + MaxDNSTCPConns +
// MaxDNSInflight descriptors.
const (
	MaxDNSTCPConns = 32
	MaxDNSInflight = 64
)

// MaxGateConns bounds the TCP 80/443 connections one session's name gate holds at once
// (namegate.DefaultMaxConns); each costs the egress process two descriptors, the guest's
// and the upstream's. A connection over the cap is reset at once and counted.
const MaxGateConns = namegate.DefaultMaxConns

// proxyPanics counts panics recovered in DNS proxy handlers, over all sessions: in this
// process, or reported by egress processes (opPanic).
var proxyPanics atomic.Int64

// ProxyPanics returns the number of panics recovered in DNS proxy handlers since start,
// the egress processes' included.
func ProxyPanics() int64 { return proxyPanics.Load() }

// proxyLimits is one session's caps: its TCP connection count and its in-flight slots.
// Over-cap events are counted (TCPRefused, QueriesShed) and logged once per session.
type proxyLimits struct {
	id          string
	log         *slog.Logger
	conns       atomic.Int64
	inflight    chan struct{}
	TCPRefused  atomic.Int64
	QueriesShed atomic.Int64
	warnConns   sync.Once
	warnQueries sync.Once
	// onPanic, when set, is called after a recovered panic (the egress process reports it
	// to the daemon, whose ProxyPanics counts it).
	onPanic func()
}

func newProxyLimits(id string, log *slog.Logger) *proxyLimits {
	return &proxyLimits{id: id, log: log, inflight: make(chan struct{}, MaxDNSInflight)}
}

// listener wraps a session's TCP listener with the connection cap.
func (l *proxyLimits) listener(ln net.Listener) net.Listener { return &capListener{ln, l} }

// handler wraps h with the in-flight cap and a recover that turns a panic into SERVFAIL.
func (l *proxyLimits) handler(h dns.Handler) dns.Handler {
	return dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		select {
		case l.inflight <- struct{}{}:
		default:
			l.QueriesShed.Add(1)
			l.warnQueries.Do(func() {
				l.log.Warn("egress: DNS queries over the session's in-flight cap answered SERVFAIL",
					"session", l.id, "max_inflight", MaxDNSInflight)
			})
			servfail(w, r)
			return
		}
		defer func() { <-l.inflight }()
		defer func() {
			if v := recover(); v != nil {
				proxyPanics.Add(1)
				l.log.Error("egress: DNS proxy handler panicked; recovered", "session", l.id,
					"panic", fmt.Sprint(v), "stack", string(debug.Stack()), "panics", proxyPanics.Load())
				servfail(w, r)
				if l.onPanic != nil {
					l.onPanic()
				}
			}
		}()
		h.ServeDNS(w, r)
	})
}

func servfail(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetRcode(r, dns.RcodeServerFailure)
	m.Question = nil
	_ = w.WriteMsg(m)
}

// capListener accepts at most MaxDNSTCPConns connections open at once for its session.
type capListener struct {
	net.Listener
	lim *proxyLimits
}

func (c *capListener) Accept() (net.Conn, error) {
	for {
		conn, err := c.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c.lim.conns.Add(1) > MaxDNSTCPConns {
			c.lim.conns.Add(-1)
			c.lim.TCPRefused.Add(1)
			c.lim.warnConns.Do(func() {
				c.lim.log.Warn("egress: DNS TCP connections over the session's cap closed",
					"session", c.lim.id, "max_conns", MaxDNSTCPConns)
			})
			conn.Close()
			continue
		}
		return &capConn{Conn: conn, lim: c.lim}, nil
	}
}

// capConn gives its slot back on the first Close.
type capConn struct {
	net.Conn
	lim  *proxyLimits
	once sync.Once
}

func (c *capConn) Close() error {
	c.once.Do(func() { c.lim.conns.Add(-1) })
	return c.Conn.Close()
}
