package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
	"brood.dev/brood/netpolicy/dnsproxy"
	"brood.dev/brood/netpolicy/namegate"
	"brood.dev/brood/netpolicy/nftrules"
	"golang.org/x/sys/unix"
)

// IPv6Forwarder reads and sets IPv6 forwarding of one interface (IPv6Conf; a stand-in in
// tests): force_forwarding, and the global switch it never sets.
type IPv6Forwarder interface {
	EnableForwarding(name string) error
	SetForwarding(name string, on bool) error
	Forwarding(name string) (bool, error)
	GlobalForwarding() (bool, error)
}

// proxyCloseTimeout bounds the wait for in-flight queries when a session's proxy stops.
const proxyCloseTimeout = 2 * time.Second

// Manager owns the network side of VM sessions in the helper daemon: the address pool,
// taps, forwarding, the nft table and one DNS proxy per session. The zero value is not
// usable: see New.
type Manager struct {
	cfg      Config
	links    Links
	fw       nftrules.Firewall
	ct       *nftrules.Conntrack // nil: conntrack entries are left to time out
	pool     *addrPool
	upstream dnsproxy.Upstream
	logDir   string
	log      *slog.Logger
	// Discover returns the registries the host's own system configuration uses (for
	// standard and permissive); nil means none.
	Discover func() []netpolicy.Discovered
	// IPv6 sets per-interface IPv6 forwarding (IPv6Conf); nil: guests get no IPv6 address
	// or route (their proxy still answers AAAA, which they cannot use).
	IPv6 IPv6Forwarder

	// ProxyExe is the broodd-helper binary that runs each session's DNS proxy as an
	// unprivileged egress process (ProxySubcommand); empty: the proxy runs inside this
	// process (tests of other layers). Open sets it.
	ProxyExe     string
	upstreamAddr string
	// TestRoots (PEM), when set, verify the real hosts of terminated connections instead
	// of the host's trust store. Only a test binary's egress process accepts them
	// (procSecrets); a production one refuses the session.
	TestRoots []byte

	closers []func() // Open's handles

	// fwdMu serializes switching uplink forwarding on (session start) and back (the last
	// session's end); prior holds what each uplink had before (see ForwardingRecord).
	fwdMu sync.Mutex
	prior map[string]priorForwarding

	mu       sync.Mutex
	sessions map[string]*Session

	// netMu serializes the refreshes of the permissive sessions' refused networks and
	// guards watch and each Session's permissive and refused (netwatch.go); taken before mu.
	netMu     sync.Mutex
	watch     *netWatch
	onRefresh func() // tests: called after each refresh
}

// Session is one VM session's network as the egress layer holds it: tap, addresses, nft
// chains and sets, DNS proxy and decision log. Addrs, V6 and Info are set by Start and
// read-only after it.
type Session struct {
	Addrs Addrs          // the session's slot of the pool
	V6    bool           // the guest gets its IPv6 address and route (forwarding is on)
	Info  api.EgressInfo // what StartVM reports about the network
	// SecretsCA is the session CA certificate (PEM) the egress process made for the
	// session's secret bindings; empty without any.
	SecretsCA string

	id, tap   string
	slot      int
	tapFile   *os.File           // the VMM's queue descriptor; handed to the runner, then closed
	servers   []*dnsproxy.Server // the in-process proxy (no ProxyExe)
	gate      *namegate.Gate     // the in-process name gate (no ProxyExe)
	gateLns   []*net.TCPListener // the name gate's listeners until they are handed over
	gatePorts [2]uint16          // their ports on Addrs.Host4, Addrs.Host6
	proc      *proxyProc         // the egress process (ProxyExe)
	logPath   string
	logFile   *os.File
	dlog      *decisionLog
	secrets   secretCounts    // the terminator's events, by host
	refreshed refreshedLogins // the logins its process reported refreshed (write-back only)

	// nets: whether the session holds the watch of the host's networks and has its
	// refused sets kept current (netwatch.go); refused is what those sets hold. Guarded by
	// Manager.netMu.
	nets    netState
	refused []netip.Prefix
}

// New prepares the host for VM egress: the address pool, the upstream resolver and
// the nft table with its masquerade chain (forwarding is enabled per interface, on the
// uplinks and each tap, at session start; never the global switch). Decision logs go to
// logDir (created 0700).
func New(cfg Config, logDir string, links Links, fw nftrules.Firewall, ct *nftrules.Conntrack, log *slog.Logger) (*Manager, error) {
	pool, err := newAddrPool(cfg.PoolV4, cfg.PoolV6)
	if err != nil {
		return nil, err
	}
	up := cfg.Upstream
	if up == "" {
		if up, err = dnsproxy.UpstreamFromResolvConf("/etc/resolv.conf"); err != nil {
			return nil, fmt.Errorf("egress upstream resolver: %w", err)
		}
	}
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return nil, fmt.Errorf("egress log directory: %w", err)
	}
	// Decision logs of sessions a previous helper did not stop (their sessions are gone).
	if stale, err := filepath.Glob(filepath.Join(logDir, "*.jsonl")); err == nil {
		for _, f := range stale {
			os.Remove(f)
		}
	}
	e := &Manager{cfg: cfg, links: links, fw: fw, ct: ct, pool: pool, upstream: dnsproxy.NewUpstream(up),
		upstreamAddr: up, logDir: logDir, log: log, sessions: map[string]*Session{}, prior: map[string]priorForwarding{}}
	if err := fw.EnsureTable(); err != nil {
		return nil, err
	}
	if err := fw.EnsureMasquerade(); err != nil {
		return nil, err
	}
	log.Info("egress ready", "pool_v4", pool.v4, "pool_v6", pool.v6, "upstream", up)
	return e, nil
}

// uplinkForwarding enables forwarding on the uplinks (egress.uplinks, else the interfaces
// of the default routes now): replies enter by the uplink, and IPv4 forwards by the input
// interface's flag. It runs at every session start (idempotent), so an uplink that came up
// after the helper is used. With ForwardingLinks, each uplink's previous forwarding is
// recorded first (holdUplink) and the uplinks it was off on are held in the nft table,
// which then drops what they would forward to anything but a tap.
func (e *Manager) uplinkForwarding() error {
	uplinks, err := e.uplinks()
	if err != nil {
		return err
	}
	if len(uplinks) == 0 {
		e.log.Warn("egress: no default route and no egress.uplinks; guests reach only their DNS proxy")
	}
	e.fwdMu.Lock()
	defer e.fwdMu.Unlock()
	fl, ok := e.links.(ForwardingLinks)
	for _, u := range uplinks {
		if err := nftrules.ValidateIfName(u); err != nil {
			return err
		}
		if ok {
			err = e.holdUplink(fl, u)
		} else {
			err = e.forwarding(u)
		}
		if err != nil {
			return err
		}
	}
	return e.fw.HoldUplinks(e.heldLists())
}

// uplinks returns egress.uplinks, else the interfaces of the default routes now.
func (e *Manager) uplinks() ([]string, error) {
	if len(e.cfg.Uplinks) > 0 {
		return e.cfg.Uplinks, nil
	}
	return e.links.DefaultRouteLinks()
}

// forwarding enables forwarding on interface name only: IPv4 over rtnetlink (see
// NetlinkLinks.EnableForwarding) and, with e.IPv6, IPv6's force_forwarding through the
// pre-confinement directory descriptor (IPv6Conf). Neither global switch is touched.
func (e *Manager) forwarding(name string) error {
	if err := nftrules.ValidateIfName(name); err != nil {
		return err
	}
	if err := e.links.EnableForwarding(name); err != nil {
		return err
	}
	if e.IPv6 != nil {
		return e.IPv6.EnableForwarding(name)
	}
	return nil
}

// Start resolves the policy of a StartVM request and builds the session's network: tap
// (owned by uid:gid), addresses, forwarding on the tap, nft chains and sets, and the DNS
// proxy on the tap's host addresses. Policy errors wrap api.ErrPolicy and happen before
// anything is created; on any later error everything created is removed again. The
// secret bindings of a (a.Secrets) are narrowed to the policy (narrowSecrets) and handed
// to the egress process, which terminates TLS for their hosts (Session.SecretsCA).
func (e *Manager) Start(a api.StartVMArgs, uid, gid uint32) (*Session, error) {
	eff, sysDigest, err := e.Resolve(a.PolicyArgs())
	if err != nil {
		return nil, fmt.Errorf("egress of session %s: %w", a.ID, err)
	}
	sec, err := e.sessionSecrets(a, eff)
	if err != nil {
		return nil, fmt.Errorf("egress of session %s: %w", a.ID, err)
	}
	tap, err := nftrules.TapName(a.ID)
	if err != nil {
		return nil, fmt.Errorf("egress of session %s: %w: %w", a.ID, api.ErrBadRequest, err)
	}
	e.mu.Lock()
	if _, dup := e.sessions[a.ID]; dup {
		e.mu.Unlock()
		return nil, fmt.Errorf("egress of session %s: already set up: %w", a.ID, api.ErrState)
	}
	slot, err := e.pool.take()
	if err != nil {
		e.mu.Unlock()
		return nil, err
	}
	s := &Session{id: a.ID, tap: tap, slot: slot, Addrs: e.pool.addrs(slot)}
	e.sessions[a.ID] = s
	e.mu.Unlock()
	if err := e.build(s, eff, uid, gid, sec); err != nil {
		e.Stop(a.ID)
		return nil, fmt.Errorf("egress of session %s: %w", a.ID, err)
	}
	s.Info = api.EgressInfo{Profile: eff.Profile.String(), Tap: tap,
		GuestV4: netip.PrefixFrom(s.Addrs.Guest4, 30).String(), DNS: s.Addrs.Host4.String(),
		Hosts: hostList(eff), AgentHosts: agentHostList(eff), Digest: eff.Digest(), SystemDigest: sysDigest}
	if s.V6 {
		s.Info.GuestV6 = netip.PrefixFrom(s.Addrs.Guest6, 126).String()
		s.Info.DNS6 = s.Addrs.Host6.String()
	}
	e.log.Info("audit: egress up", "session", a.ID, "tap", tap, "guest", s.Info.GuestV4, "guest_v6", s.Info.GuestV6,
		"profile", s.Info.Profile, "hosts", s.Info.Hosts,
		"policy_digest", s.Info.Digest, "system_policy_digest", sysDigest)
	return s, nil
}

// Resolve returns the effective policy of a session started with a's egress inputs and
// the system policy's digest: resolvePolicy over the registries of the host's system
// configuration (Discover). Start enforces exactly this; the ResolvePolicy call answers it.
func (e *Manager) Resolve(a api.ResolvePolicyArgs) (*netpolicy.Effective, string, error) {
	var disc []netpolicy.Discovered
	if e.Discover != nil {
		disc = e.Discover()
	}
	return resolvePolicy(&e.cfg, a, disc)
}

// sessionSecrets returns the bindings of a narrowed to eff, or nil when a has none or
// none keeps a host (no connection is then terminated). Bindings need the egress
// process (ProxyExe) and a gated profile: a permissive session's connections do not pass
// the name gate, so nothing could swap a placeholder there.
func (e *Manager) sessionSecrets(a api.StartVMArgs, eff *netpolicy.Effective) (*api.SessionSecrets, error) {
	if a.Secrets == nil || len(a.Secrets.Bindings) == 0 {
		return nil, nil
	}
	if e.ProxyExe == "" {
		return nil, fmt.Errorf("secret bindings: %w: this helper runs no egress process", api.ErrUnavailable)
	}
	if eff.AnyPort() {
		return nil, fmt.Errorf("%w: secret bindings need a gated egress profile (locked or standard): profile %s does not pass connections through the name gate (use --egress standard, or a raw_env list to give the VM the real values)", api.ErrPolicy, eff.Profile)
	}
	sec, bound, err := narrowSecrets(eff, *a.Secrets)
	if err != nil || !bound {
		return nil, err
	}
	return &sec, nil
}

func (e *Manager) build(s *Session, eff *netpolicy.Effective, uid, gid uint32, sec *api.SessionSecrets) error {
	ad := s.Addrs
	if err := e.uplinkForwarding(); err != nil {
		return err
	}
	f, err := e.links.CreateTap(s.tap, uid, gid, []netip.Prefix{netip.PrefixFrom(ad.Host4, 30), netip.PrefixFrom(ad.Host6, 126)})
	if err != nil {
		return err
	}
	s.tapFile = f
	if err := e.forwarding(s.tap); err != nil {
		return err
	}
	s.V6 = e.IPv6 != nil
	ns := nftrules.Session{ID: s.id, ProxyV4: ad.Host4, ProxyV6: ad.Host6,
		GuestV4: ad.Guest4, GuestV6: ad.Guest6, GuestLL: ad.GuestLL, AnyPort: eff.AnyPort()}
	if ns.GatePort4, ns.GatePort6, err = s.bindGates(); err != nil {
		return err
	}
	s.gatePorts = [2]uint16{ns.GatePort4, ns.GatePort6}
	if ns.AnyPort {
		if ns.Refused, err = e.permissiveRefused(s); err != nil {
			return err
		}
	}
	if err := e.fw.AddSession(ns); err != nil {
		return err
	}
	if ns.AnyPort {
		e.trackRefused(s, ns.Refused)
	}
	s.logPath = filepath.Join(e.logDir, s.id+".jsonl")
	if s.logFile, err = os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_CLOEXEC, 0o600); err != nil {
		return fmt.Errorf("egress decision log: %w", err)
	}
	s.dlog = newDecisionLog(s.logFile, MaxDecisionLogBytes)
	if e.ProxyExe != "" {
		return e.startProc(s, eff, uid, gid, sec)
	}
	names := &namegate.Names{}
	if s.gate, err = namegate.New(namegate.Config{Names: names, Log: s.dlog.logGate, Dial: gateDialer(), MaxConns: MaxGateConns}); err != nil {
		return err
	}
	for _, l := range s.gateLns {
		go s.gate.Serve(l)
	}
	s.gateLns = nil
	px, err := dnsproxy.New(dnsproxy.Config{Policy: eff, Upstream: e.upstream,
		Pinner: namesPinner{sessionPinner{e.fw, s.id}, names}, Log: s.dlog.Log})
	if err != nil {
		return err
	}
	lim := newProxyLimits(s.id, e.log)
	for _, a := range []netip.Addr{ad.Host4, ad.Host6} {
		srv, err := listenDNS(nameHandler{px}, netip.AddrPortFrom(a, DNSPort), s.tap, lim)
		if err != nil {
			return err
		}
		s.servers = append(s.servers, srv)
	}
	return nil
}

// bindGates binds the session's name gate listeners on its two host addresses (bindGate)
// and returns their ports (IPv4, IPv6).
func (s *Session) bindGates() (uint16, uint16, error) {
	var ports [2]uint16
	for i, a := range []netip.Addr{s.Addrs.Host4, s.Addrs.Host6} {
		l, port, err := bindGate(a, s.tap)
		if err != nil {
			return 0, 0, err
		}
		s.gateLns = append(s.gateLns, l)
		ports[i] = port
	}
	return ports[0], ports[1], nil
}

// closeGateListeners closes the daemon's copies of the name gate's listeners.
func (s *Session) closeGateListeners() {
	for _, l := range s.gateLns {
		l.Close()
	}
	s.gateLns = nil
}

// TapFile returns the tap's queue descriptor for the runner (nil for a stand-in link).
func (s *Session) TapFile() *os.File { return s.tapFile }

// Stop removes session id's network at once: the proxy, the nft chains and sets (and so
// its pins), its conntrack entries and the tap; then it releases the addresses. It
// returns the summary of the session's decision log (nil when id had no network) and
// every error met (it does not stop at the first).
func (e *Manager) Stop(id string) (*api.EgressSummary, error) {
	sum, log, err := e.StopKeepLog(id)
	if log != nil {
		log.Close()
	}
	return sum, err
}

// StopKeepLog is Stop that also returns the session's whole decision log (JSON lines of
// dnsproxy.Decision, at most MaxDecisionLogBytes; nil when id had no network or the log
// could not be reopened): a read-only descriptor of the file, which is unlinked, so
// nothing of it stays on disk once the caller closes it.
func (e *Manager) StopKeepLog(id string) (*api.EgressSummary, *os.File, error) {
	end, err := e.StopKeep(id)
	return end.Summary, end.Log, err
}

// Ended is what StopKeep keeps of a session's network once it is gone.
type Ended struct {
	Summary *api.EgressSummary // nil when the session had no network
	Log     *os.File           // StopKeepLog's decision log
	// Refreshed are the logins the egress process reported refreshed, with their new
	// real values, when the bindings asked for write-back (api.SessionSecrets.WriteBack).
	Refreshed []api.RefreshedLogin
}

// StopKeep is StopKeepLog that also hands out the session's refreshed logins (Ended).
// The egress process has exited when it returns, so no refresh is reported after it.
func (e *Manager) StopKeep(id string) (Ended, error) {
	e.mu.Lock()
	s := e.sessions[id]
	delete(e.sessions, id)
	e.mu.Unlock()
	if s == nil {
		return Ended{}, nil
	}
	e.untrackRefused(s) // before its sets go
	var errs []error
	if s.proc != nil {
		errs = append(errs, s.proc.stop())
	}
	ctx, cancel := context.WithTimeout(context.Background(), proxyCloseTimeout)
	for _, srv := range s.servers {
		errs = append(errs, srv.Close(ctx))
	}
	cancel()
	if s.gate != nil {
		s.gate.Close()
	}
	s.closeGateListeners()
	errs = append(errs, e.fw.DeleteSession(id))
	if e.ct != nil {
		if _, err := e.ct.Forget(s.Addrs.Net4, s.Addrs.Net6); err != nil {
			errs = append(errs, fmt.Errorf("forget conntrack entries of session %s: %w", id, err))
		}
	}
	if s.tapFile != nil {
		s.tapFile.Close()
	}
	errs = append(errs, e.links.DeleteLink(s.tap))
	var sum *api.EgressSummary
	var log *os.File
	if s.logFile != nil {
		_, _, werr := s.dlog.counts()
		errs = append(errs, werr, s.logFile.Close())
		sum = summarize(s.logPath, s.dlog)
		sum.Secrets = s.secrets.snapshot()
		var err error
		if log, err = os.OpenFile(s.logPath, os.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			errs = append(errs, fmt.Errorf("reopen egress decision log of session %s: %w", id, err))
		}
		os.Remove(s.logPath)
	}
	e.pool.release(s.slot)
	e.fwdMu.Lock()
	errs = append(errs, e.releaseUplinks())
	e.fwdMu.Unlock()
	err := errors.Join(errs...)
	end := Ended{Summary: sum, Log: log, Refreshed: s.refreshed.take()}
	e.log.Info("audit: egress down", "session", id, "tap", s.tap, "refreshed_logins", len(end.Refreshed), "err", err)
	return end, err
}

// StopAll removes every session's network (helper shutdown).
func (e *Manager) StopAll() {
	e.mu.Lock()
	var ids []string
	for id := range e.sessions {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	for _, id := range ids {
		e.Stop(id)
	}
}

// CloseTapFile closes the helper's copy of the tap descriptor once the runner has its own.
func (s *Session) CloseTapFile() {
	if s.tapFile != nil {
		s.tapFile.Close()
		s.tapFile = nil
	}
}

// Open opens the egress layer in the helper's network namespace on links and fw (the
// caller keeps owning them), with its own conntrack netlink handle, the IPv6 sysctl
// directory (before the helper confines itself; without per-interface IPv6 forwarding
// guests get IPv4 only) and discovery of the host's system-wide registries. Decision logs
// go to logDir. It runs after the startup cleanup (which deletes the nft table). Close it
// with Close after StopAll.
func Open(cfg Config, logDir string, links Links, fw nftrules.Firewall, log *slog.Logger) (*Manager, error) {
	ct, err := nftrules.NewConntrack(-1)
	if err != nil {
		return nil, err
	}
	e, err := New(cfg, logDir, links, fw, ct, log)
	if err != nil {
		ct.Close()
		return nil, err
	}
	e.closers = []func(){ct.Close}
	// Each session's DNS proxy runs as this binary's ProxySubcommand (resolved now,
	// before the daemon confines itself).
	if e.ProxyExe, err = os.Executable(); err != nil {
		ct.Close()
		return nil, fmt.Errorf("egress process binary: %w", err)
	}
	// Before confinement: the descriptor that keeps IPv6 forwarding writable (IPv6Conf).
	if v6, err := OpenIPv6Conf(); err != nil {
		log.Warn("egress: guests get no IPv6", "err", err)
	} else {
		e.IPv6 = v6
		e.closers = append(e.closers, func() { v6.Close() })
	}
	// Uplinks a previous helper switched on and did not switch back.
	fl, _ := links.(ForwardingLinks)
	if names, err := RestoreForwarding(logDir, fl, e.IPv6); err != nil {
		log.Warn("egress: restore uplink forwarding", "err", err)
	} else if names != nil {
		log.Info("audit: uplink forwarding restored from the record", "uplinks", names)
	}
	e.Discover = func() []netpolicy.Discovered {
		ctx, cancel := context.WithTimeout(context.Background(), discoverTimeout)
		defer cancel()
		d, _ := netpolicy.Discoverer{SystemOnly: true}.Discover(ctx)
		return d
	}
	return e, nil
}

// discoverTimeout bounds registry discovery at each session start.
const discoverTimeout = 5 * time.Second

// Close releases the conntrack handle Open opened.
func (e *Manager) Close() {
	for _, c := range e.closers {
		c()
	}
}
