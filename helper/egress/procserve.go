package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress/tlsterm"
	"brood.dev/brood/internal/hostexec"
	"brood.dev/brood/netpolicy"
	"brood.dev/brood/netpolicy/dnsproxy"
	"brood.dev/brood/netpolicy/nftrules"
)

// startProc binds session s's four DNS sockets (bindDNS, as root, before any privilege
// is dropped) and hands them, with the name gate's listeners (bound by build), to a new
// egress process; the daemon keeps no copy.
func (e *Manager) startProc(s *Session, eff *netpolicy.Effective, uid, gid uint32, sec *api.SessionSecrets) error {
	var socks []*os.File
	defer func() {
		for _, f := range socks {
			f.Close()
		}
	}()
	for _, a := range []netip.Addr{s.Addrs.Host4, s.Addrs.Host6} {
		pc, l, err := bindDNS(netip.AddrPortFrom(a, DNSPort), s.tap)
		if err != nil {
			return err
		}
		uf, err := pc.(*net.UDPConn).File()
		pc.Close()
		if err != nil {
			l.Close()
			return fmt.Errorf("DNS socket of session %s: %w", s.id, err)
		}
		socks = append(socks, uf)
		tf, err := l.(*net.TCPListener).File()
		l.Close()
		if err != nil {
			return fmt.Errorf("DNS socket of session %s: %w", s.id, err)
		}
		socks = append(socks, tf)
	}
	for _, l := range s.gateLns {
		f, err := l.File()
		if err != nil {
			return fmt.Errorf("name gate socket of session %s: %w", s.id, err)
		}
		socks = append(socks, f)
	}
	s.closeGateListeners()
	p, err := e.startProxyProc(s, eff, uid, gid, socks, sec)
	if err != nil {
		return err
	}
	s.proc = p
	return nil
}

// proxyProc is the daemon's side of one session's egress process.
type proxyProc struct {
	cmd  *hostexec.Cmd
	ctl  *net.UnixConn
	done chan struct{} // closed when serve returns
}

// procStopTimeout bounds the wait for the egress process after its control socket closed.
const procStopTimeout = 2 * time.Second

// startProxyProc starts exe's ProxySubcommand for session s as uid:gid (no supplementary
// group), with the bound sockets socks (DNS udp4, tcp4, udp6, tcp6, then the name gate's
// tcp4, tcp6 listeners; the caller closes its copies), Pdeathsig SIGKILL and its own
// process group, and serves its control requests against eff and the session's sets until
// Stop. Its environment is hostexec's (PATH and LC_ALL only), its working directory "/".
// With sec, the process is started with -secrets, sec is its first control message
// (sendSecrets) and the CA certificate it answers is s.SecretsCA.
func (e *Manager) startProxyProc(s *Session, eff *netpolicy.Effective, uid, gid uint32, socks []*os.File, sec *api.SessionSecrets) (*proxyProc, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("egress process of session %s: socketpair: %w", s.id, err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "egress-ctl"), os.NewFile(uintptr(fds[1]), "egress-ctl-child")
	defer theirs.Close()
	args := []string{ProxySubcommand, "-session", s.id, "-upstream", e.upstreamAddr}
	if sec != nil {
		args = append(args, "-secrets")
	}
	cmd := hostexec.Self(e.ProxyExe, args...)
	cmd.ExtraFiles = append([]*os.File{theirs}, socks...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
		Setpgid:    true,
	}
	if err := cmd.Start(); err != nil {
		mine.Close()
		return nil, fmt.Errorf("start egress process of session %s: %w", s.id, err)
	}
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("egress process of session %s: control socket: %w", s.id, err)
	}
	p := &proxyProc{cmd: cmd, ctl: c.(*net.UnixConn), done: make(chan struct{})}
	s.refreshed.allow(sec)
	if sec != nil {
		if s.SecretsCA, err = sendSecrets(p.ctl, *sec, e.TestRoots); err != nil {
			p.ctl.Close()
			cmd.Process.Kill()
			cmd.Wait()
			return nil, fmt.Errorf("egress process of session %s: %w", s.id, err)
		}
	}
	go func() {
		defer close(p.done)
		gate := &pinGate{eff: eff, fw: e.fw, id: s.id, dlog: s.dlog, log: e.log, secrets: &s.secrets, refreshed: &s.refreshed}
		err := gate.serve(p.ctl)
		e.log.Info("audit: egress process control ended", "session", s.id, "pid", cmd.Process.Pid, "err", err)
	}()
	e.log.Info("audit: egress process started", "session", s.id, "pid", cmd.Process.Pid, "uid", uid, "gid", gid)
	return p, nil
}

// stop half-closes the control socket (the process stops serving on EOF, finishes its
// in-flight queries and exits), reads the decisions it still sends until its end closes,
// and reaps it; a process that has not exited within procStopTimeout is killed.
func (p *proxyProc) stop() error {
	p.ctl.CloseWrite()
	timer := time.NewTimer(procStopTimeout)
	defer timer.Stop()
	exited := make(chan error, 1)
	go func() { <-p.done; exited <- p.cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-timer.C:
		p.cmd.Process.Kill()
		p.ctl.Close()
		err = <-exited
	}
	p.ctl.Close()
	var ee *hostexec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return fmt.Errorf("reap egress process %d: %w", p.cmd.Process.Pid, err)
	}
	return nil
}

// pinGate answers one egress process's control requests. It trusts nothing the process
// says about policy: a name is checked against the session's effective policy, the ports
// come from the policy's entry, the addresses must be outside the refused ranges, the
// timeout is clamped; only then is an nft element written.
type pinGate struct {
	eff  *netpolicy.Effective
	fw   nftrules.Firewall
	id   string
	dlog *decisionLog
	log  *slog.Logger
	// secrets counts the process's terminator events for the summary.
	secrets *secretCounts
	// refreshed keeps the logins the process reports refreshed (write-back only).
	refreshed *refreshedLogins
}

// serve reads requests from c until it closes and answers each in turn.
func (g *pinGate) serve(c *net.UnixConn) error {
	buf := make([]byte, procMaxMsg)
	for {
		n, err := c.Read(buf)
		if err != nil || n == 0 {
			return nil // closed by stop, or the process exited
		}
		var m procMsg
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			return fmt.Errorf("egress process of session %s: malformed control message: %w", g.id, err)
		}
		switch m.Op {
		case opLog:
			g.logDecision(m.Decision)
			continue
		case opSecret:
			g.logSecret(m.Event)
			continue
		case opRefreshed:
			if why := g.refreshed.put(m.Refreshed); why != "" {
				g.log.Warn("audit: refreshed login refused", "session", g.id, "why", why)
			} else {
				g.log.Info("audit: refreshed login kept for write-back", "session", g.id, "login", m.Refreshed.Login)
			}
			continue
		case opPanic:
			proxyPanics.Add(1)
			g.log.Error("egress: the egress process recovered a handler panic", "session", g.id, "panics", proxyPanics.Load())
			continue
		}
		r := g.answer(m)
		b, _ := json.Marshal(r)
		// After stop's half-close the reply cannot be sent; keep reading the decisions
		// the process still logs until it exits.
		_, _ = c.Write(b)
	}
}

// answer decides a check or pin request.
func (g *pinGate) answer(m procMsg) procReply {
	r := procReply{ID: m.ID}
	grant, why, ok := g.eff.Check(m.Name)
	switch {
	case m.Op != opCheck && m.Op != opPin:
		r.Why = "unknown operation"
	case !ok:
		r.Why = why
	case m.Op == opCheck:
		r.OK, r.Source = true, grant.Source.String()
		for _, p := range grant.Entry.EffectivePorts() {
			r.Ports = append(r.Ports, p.String())
		}
	default:
		var timeout time.Duration
		timeout, r.Why = g.pin(m, grant)
		if r.OK = r.Why == ""; r.OK {
			r.TimeoutS = int64(timeout / time.Second)
			for _, p := range grant.Entry.EffectivePorts() {
				r.Ports = append(r.Ports, p.String())
			}
		}
	}
	return r
}

// pin validates the addresses and timeout of m and pins them on grant's ports; it returns
// the timeout pinned, and why it refused or failed, or "".
func (g *pinGate) pin(m procMsg, grant netpolicy.Grant) (time.Duration, string) {
	if len(m.Addrs) == 0 || len(m.Addrs) > procMaxPinAddrs {
		return 0, fmt.Sprintf("%d addresses (want 1 to %d)", len(m.Addrs), procMaxPinAddrs)
	}
	for _, a := range m.Addrs {
		if !a.IsValid() || a.Zone() != "" {
			return 0, "invalid address " + a.String()
		}
		if why, bad := netpolicy.RefusedReason(a); bad {
			g.log.Warn("audit: egress process asked to pin a refused address", "session", g.id, "name", m.Name, "addr", a, "why", why)
			return 0, "address " + a.String() + " refused: " + why
		}
	}
	// Clamp the seconds before converting them: a huge value must not overflow.
	secs := min(max(m.TimeoutS, int64(dnsproxy.DefaultMinTTL/time.Second)), int64(dnsproxy.DefaultMaxTTL/time.Second))
	timeout := time.Duration(secs) * time.Second
	if err := g.fw.Pin(g.id, m.Addrs, grant.Entry.EffectivePorts(), timeout); err != nil {
		return 0, err.Error()
	}
	return timeout, ""
}

// logSecret counts one terminator event and appends it to the session's log; an
// invalid one is dropped and counted.
func (g *pinGate) logSecret(e *tlsterm.Event) {
	if !validEvent(e) {
		g.dlog.drop()
		return
	}
	g.secrets.count(*e)
	b, err := json.Marshal(secretDecision{Time: time.Now().UTC(), Secret: string(e.Kind), Host: e.Host, Binding: e.Binding, Reason: e.Reason})
	if err != nil {
		g.dlog.drop()
		return
	}
	g.dlog.logRaw(b)
}

// logDecision appends one decision (a single JSON object, compacted onto one line) to
// the session's log; anything else is dropped and counted.
func (g *pinGate) logDecision(raw json.RawMessage) {
	var buf bytes.Buffer
	if len(raw) == 0 || raw[0] != '{' || json.Compact(&buf, raw) != nil {
		g.dlog.drop()
		return
	}
	g.dlog.logRaw(buf.Bytes())
}
