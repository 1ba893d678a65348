package egress

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress/tlsterm"
	"brood.dev/brood/helper/landlockabi"
	"brood.dev/brood/netpolicy"
	"brood.dev/brood/netpolicy/dnsproxy"
	"brood.dev/brood/netpolicy/namegate"
)

// ProcMaxFDs is the egress process's RLIMIT_NOFILE (soft and hard): stdio, the control
// socket, the four DNS sockets, the name gate's two listeners, MaxDNSTCPConns
// connections, MaxDNSInflight upstream sockets, two descriptors (guest and upstream) per
// gated connection (MaxGateConns), and room for the Go runtime (epoll, its pipe) and the
// connections over a cap that are accepted only to be closed: 3+1+4+2+32+64+512+16 = 634.
const ProcMaxFDs = 3 + 1 + 4 + 2 + MaxDNSTCPConns + MaxDNSInflight + 2*MaxGateConns + 16

// procCallTimeout bounds one check or pin round trip to the daemon.
const procCallTimeout = 5 * time.Second

// ProxyMain runs one session's DNS proxy and name gate as the egress process
// (ProxySubcommand): args are -session ID and -upstream HOST:PORT; descriptors are as
// procFD* say. It confines itself (confineProc), serves the four DNS sockets and the two
// gate listeners, asks the daemon over the control socket to check names, pin answers
// and log decisions, and exits when the control socket closes (the session ended) or on
// SIGTERM. It returns the exit code.
func ProxyMain(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("process", ProxySubcommand)
	fs := flag.NewFlagSet(ProxySubcommand, flag.ContinueOnError)
	id := fs.String("session", "", "session `id` (for the log)")
	upstream := fs.String("upstream", "", "upstream resolver `host:port`")
	secrets := fs.Bool("secrets", false, "read the session's secret bindings from the control socket first")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		return 2
	}
	log = log.With("session", *id)
	up, err := netip.ParseAddrPort(*upstream)
	if err != nil {
		log.Error("egress process: bad -upstream", "err", err)
		return 2
	}
	if *secrets {
		if err := loadTrustStore(); err != nil {
			log.Error("egress process", "err", err)
			return 1
		}
	}
	if err := confineProc(up.Port()); err != nil {
		log.Error("egress process: confine", "err", err)
		return 1
	}
	if err := serveProc(log, *id, up.String(), *secrets); err != nil {
		log.Error("egress process", "err", err)
		return 1
	}
	return 0
}

// loadTrustStore loads the host's trust store, which the TLS terminator verifies the real
// hosts against, before confineProc: crypto/x509 reads it once and keeps it, and under
// Landlock no file is readable.
func loadTrustStore() error {
	if _, err := x509.SystemCertPool(); err != nil {
		return fmt.Errorf("load the host's trust store: %w", err)
	}
	return nil
}

// confineProc makes the process not dumpable and no_new_privs, sets RLIMIT_NOFILE to
// ProcMaxFDs and enforces Landlock (landlockabi.Config) with no filesystem access at all
// and, of classic TCP, only connecting to the upstream's port (answers truncated over
// UDP are asked again over TCP) and to ports 443 and 80 (the name gate's upstream
// connections, each to the original destination of an admitted connection). The
// sockets are already bound and listening. On a kernel below the pinned ABI it enforces
// what the kernel supports.
func confineProc(upstreamPort uint16) error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err)
	}
	if err := llsys.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	lim := unix.Rlimit{Cur: ProcMaxFDs, Max: ProcMaxFDs}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("setrlimit(RLIMIT_NOFILE, %d): %w", ProcMaxFDs, err)
	}
	llcfg := landlockabi.Config
	if abi, _ := landlockabi.Kernel(); abi < landlockabi.Pinned {
		llcfg = llcfg.BestEffort()
	}
	if err := llcfg.Restrict(landlock.ConnectTCP(upstreamPort), landlock.ConnectTCP(namegate.PortTLS),
		landlock.ConnectTCP(namegate.PortHTTP)); err != nil {
		return fmt.Errorf("landlock restrict egress process: %w", err)
	}
	return nil
}

// serveProc serves the proxy and the gate on the inherited sockets until the control
// socket closes. With secrets, it first reads the session's bindings (recvSecrets), its
// gate terminates the TLS of their hosts, and the bindings' real values are zeroed once
// the servers closed; a table that could not be locked in memory is logged.
func serveProc(log *slog.Logger, id, upstream string, secrets bool) error {
	c, err := net.FileConn(os.NewFile(procFDCtl, "ctl"))
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	ctl := &ctlClient{c: c.(*net.UnixConn), pending: map[uint64]chan procReply{}}
	var tt namegate.Terminator
	if secrets {
		t, err := recvSecrets(ctl.c, ctl.logSecret, ctl.sendRefreshed)
		if err != nil {
			return err
		}
		defer t.Secrets().Wipe() // after the servers below closed (defers run last first)
		if err := t.Secrets().LockErr(); err != nil {
			log.Warn("egress process: secret bindings not locked in memory: they are kept out of core dumps but may be swapped out", "err", err)
		}
		tt = gateTerminator{t}
	}
	names := &namegate.Names{}
	gate, err := serveGate(ctl, names, tt)
	if err != nil {
		return err
	}
	defer gate.Close()
	px, err := dnsproxy.New(dnsproxy.Config{Policy: remotePolicy{ctl}, Upstream: dnsproxy.NewUpstream(upstream),
		Pinner: remotePinner{ctl, names}, Log: ctl.logDecision})
	if err != nil {
		return err
	}
	lim := newProxyLimits(id, log)
	lim.onPanic = func() { _ = ctl.send(procMsg{Op: opPanic}) }
	h := lim.handler(nameHandler{px})
	var servers []*dnsproxy.Server
	for _, fd := range [][2]int{{procFDUDP4, procFDTCP4}, {procFDUDP6, procFDTCP6}} {
		pc, err := net.FilePacketConn(os.NewFile(uintptr(fd[0]), "udp"))
		if err != nil {
			return fmt.Errorf("DNS socket %d: %w", fd[0], err)
		}
		l, err := net.FileListener(os.NewFile(uintptr(fd[1]), "tcp"))
		if err != nil {
			return fmt.Errorf("DNS socket %d: %w", fd[1], err)
		}
		servers = append(servers, dnsproxy.Serve(h, pc, lim.listener(l)))
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- ctl.readLoop() }()
	select {
	case err = <-done:
	case <-term:
	}
	ctx, cancel := context.WithTimeout(context.Background(), proxyCloseTimeout)
	defer cancel()
	for _, s := range servers {
		s.Close(ctx)
	}
	return err
}

// serveGate serves the name gate on the two inherited listeners, handing admitted TLS
// connections of the names term covers to term (nil: none); its decisions go to the
// daemon's log.
func serveGate(ctl *ctlClient, names *namegate.Names, term namegate.Terminator) (*namegate.Gate, error) {
	gate, err := namegate.New(namegate.Config{Names: names, Log: ctl.logGate, Dial: gateDialer(), MaxConns: MaxGateConns,
		Terminator: term})
	if err != nil {
		return nil, err
	}
	for _, fd := range []int{procFDGate4, procFDGate6} {
		l, err := net.FileListener(os.NewFile(uintptr(fd), "gate"))
		if err != nil {
			return nil, fmt.Errorf("name gate socket %d: %w", fd, err)
		}
		go gate.Serve(l)
	}
	return gate, nil
}

// nameKey carries the question name of the query being answered to remotePinner.
type nameKey struct{}

// nameHandler answers with Proxy.Handle, the question's name in the context, and truncates
// UDP replies to the client's advertised size (as Proxy.ServeDNS does).
type nameHandler struct{ px *dnsproxy.Proxy }

func (h nameHandler) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	ctx := context.Background()
	if len(r.Question) == 1 {
		ctx = context.WithValue(ctx, nameKey{}, r.Question[0].Name)
	}
	reply := h.px.Handle(ctx, r)
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if o := r.IsEdns0(); o != nil {
			size = int(min(o.UDPSize(), 1232))
		}
		reply.Truncate(size)
	}
	_ = w.WriteMsg(reply)
}

// remotePolicy asks the daemon to decide each name.
type remotePolicy struct{ ctl *ctlClient }

func (p remotePolicy) Check(name string) (netpolicy.Grant, string, bool) {
	r, err := p.ctl.call(procMsg{Op: opCheck, Name: name})
	if err != nil {
		return netpolicy.Grant{}, "helper unreachable: " + err.Error(), false
	}
	if !r.OK {
		return netpolicy.Grant{}, r.Why, false
	}
	// Only the log shows Source and the ports; the daemon decides both again when it pins.
	g := netpolicy.Grant{Source: netpolicy.Source{Layer: netpolicy.Layer(r.Source)}}
	for _, s := range r.Ports {
		port, err := netpolicy.ParsePort(s)
		if err != nil {
			return netpolicy.Grant{}, "helper answered port " + s, false
		}
		g.Entry.Ports = append(g.Entry.Ports, port)
	}
	return g, "", true
}

// remotePinner asks the daemon to pin an answer for the question's name; the daemon
// decides the name and ports again. What the daemon pinned (its ports and timeout) is
// recorded for the name in the name gate's table.
type remotePinner struct {
	ctl   *ctlClient
	names *namegate.Names
}

func (p remotePinner) Pin(ctx context.Context, addrs []netip.Addr, _ []netpolicy.Port, timeout time.Duration) error {
	name, _ := ctx.Value(nameKey{}).(string)
	r, err := p.ctl.call(procMsg{Op: opPin, Name: name, Addrs: addrs, TimeoutS: int64(timeout / time.Second)})
	if err != nil {
		return err
	}
	if !r.OK {
		return errors.New("refused by the helper: " + r.Why)
	}
	var ports []netpolicy.Port
	for _, s := range r.Ports {
		if port, err := netpolicy.ParsePort(s); err == nil {
			ports = append(ports, port)
		}
	}
	p.names.Add(name, addrs, ports, time.Duration(r.TimeoutS)*time.Second)
	return nil
}

// ctlClient is the process's end of the control socket: concurrent calls matched to
// replies by ID.
type ctlClient struct {
	c       *net.UnixConn
	wmu     sync.Mutex
	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan procReply
}

func (c *ctlClient) send(m procMsg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > procMaxMsg {
		return fmt.Errorf("control message of %d bytes (max %d)", len(b), procMaxMsg)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.c.Write(b)
	return err
}

func (c *ctlClient) call(m procMsg) (procReply, error) {
	ch := make(chan procReply, 1)
	c.mu.Lock()
	c.next++
	m.ID = c.next
	c.pending[m.ID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, m.ID)
		c.mu.Unlock()
	}()
	if err := c.send(m); err != nil {
		return procReply{}, fmt.Errorf("ask the helper: %w", err)
	}
	select {
	case r := <-ch:
		return r, nil
	case <-time.After(procCallTimeout):
		return procReply{}, errors.New("the helper did not answer")
	}
}

func (c *ctlClient) logDecision(d dnsproxy.Decision) {
	b, err := json.Marshal(d)
	if err == nil {
		_ = c.send(procMsg{Op: opLog, Decision: b})
	}
}

func (c *ctlClient) logGate(d namegate.Decision) {
	b, err := json.Marshal(d)
	if err == nil {
		_ = c.send(procMsg{Op: opLog, Decision: b})
	}
}

func (c *ctlClient) logSecret(e tlsterm.Event) {
	_ = c.send(procMsg{Op: opSecret, Event: &e})
}

// sendRefreshed hands a refreshed login's new real values to the daemon (opRefreshed).
func (c *ctlClient) sendRefreshed(r api.RefreshedLogin) {
	_ = c.send(procMsg{Op: opRefreshed, Refreshed: &r})
}

// readLoop delivers replies until the control socket closes (nil: the daemon hung up).
func (c *ctlClient) readLoop() error {
	buf := make([]byte, procMaxMsg)
	for {
		n, err := c.c.Read(buf)
		if err != nil || n == 0 {
			return nil
		}
		var r procReply
		if err := json.Unmarshal(buf[:n], &r); err != nil {
			return fmt.Errorf("malformed reply from the helper: %w", err)
		}
		c.mu.Lock()
		ch := c.pending[r.ID]
		c.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}
