package helper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress"
	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/helper/vmhost"
	"brood.dev/brood/netpolicy/policywire"
)

// writeTimeout bounds writing one response frame to a client that does not read.
const writeTimeout = 10 * time.Second

// Server answers helper calls on a listener. Every connection gets its own goroutine;
// identity is read once at accept and authorization decided once by Authorize.
type Server struct {
	cfg      *Config
	log      *slog.Logger
	sessions *Table
	caps     api.Capabilities // template; Peer is filled per connection
	doctor   []api.Check
	vmHost   *vmhost.Host     // nil: this helper runs no VMs
	spawner  *spawner.Client  // starts runners outside the helper's Landlock domain
	egress   *egress.Manager  // nil: VMs get no network device
	firewall func() api.Check // Doctor's host firewall check, run per call; nil: none
	cgroups  cgroupPlacer     // per-uid cgroups of runners; nil: runners stay in the helper's
	builder  imageBuilder     // nil: build_image is unavailable (build.go)
	builds   *builds

	health   Health // survived accept errors and handler panics (Doctor)
	conns    atomic.Int64
	lastBusy atomic.Int64 // unix nanoseconds of the last connection close or session change
	sem      chan struct{}
	wg       sync.WaitGroup
	// conns per uid (MaxConnsPerUser) and wait_vm calls in flight per uid
	// (MaxWaitsPerUser): one uid never holds every connection slot.
	uidConns, waits *uidQuota
}

// NewServer returns a server for a validated cfg; caps and doctor are the host facts
// reported by Hello and Doctor.
func NewServer(cfg *Config, log *slog.Logger, caps api.Capabilities, doctor []api.Check) *Server {
	s := &Server{
		cfg:      cfg,
		log:      log,
		sessions: NewTable(cfg.MaxSessionsPerUser),
		caps:     caps,
		doctor:   doctor,
		sem:      make(chan struct{}, cfg.MaxConns),
		uidConns: newUIDQuota(cfg.MaxConnsPerUser),
		waits:    newUIDQuota(cfg.MaxWaitsPerUser),
		builds:   newBuilds(),
	}
	s.caps.Version = api.Version
	s.lastBusy.Store(time.Now().UnixNano())
	return s
}

// EnableVMs lets the server run VMs on h (StartVM answers api.ErrUnavailable without),
// their runners started by sp and placed in cg's per-uid cgroups (nil: the helper's own).
// Call it before Serve.
func (s *Server) EnableVMs(h vmhost.Host, sp *spawner.Client, cg cgroupPlacer) {
	s.vmHost, s.spawner, s.cgroups = &h, sp, cg
}

// EnableEgress lets StartVM give VMs a network under an egress profile (nil: none).
func (s *Server) EnableEgress(e *egress.Manager) { s.egress = e }

// Sessions returns the session table (for shutdown and tests).
func (s *Server) Sessions() *Table { return s.sessions }

// Serve accepts connections on ln until ctx is cancelled (returns nil) or the helper has
// been idle for cfg.IdleTimeout with no connection and no session (returns ErrIdle). It
// closes ln and waits for the connection goroutines before returning.
func (s *Server) Serve(ctx context.Context, ln *net.UnixListener) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	if idle := s.cfg.IdleTimeout(); idle > 0 {
		go s.watchIdle(ctx, cancel, idle)
	}
	go s.watchUnstarted(ctx) // limits.go
	var err error
	for fails := 0; ; {
		var uc *net.UnixConn
		uc, err = ln.AcceptUnix()
		if err != nil && ctx.Err() == nil && acceptRetryable(err) {
			// Out of descriptors or socket memory: the client waits in the backlog; every
			// session keeps running and the next accept after the back-off takes it.
			fails++
			s.health.AcceptErrors.Add(1)
			s.log.Warn("accept failed; backing off", "err", err, "consecutive", fails, "backoff", acceptBackoff(fails))
			select {
			case <-time.After(acceptBackoff(fails)):
			case <-ctx.Done():
			}
			continue
		}
		if err != nil {
			break
		}
		fails = 0
		select {
		case s.sem <- struct{}{}:
		default:
			s.log.Warn("connection limit reached, closing new connection", "max_conns", s.cfg.MaxConns)
			uc.Close()
			continue
		}
		s.conns.Add(1)
		s.wg.Add(1)
		go func() {
			defer func() {
				<-s.sem
				s.lastBusy.Store(time.Now().UnixNano())
				s.conns.Add(-1)
				s.wg.Done()
			}()
			s.handleConn(ctx, uc)
		}()
	}
	cancel(nil)
	s.wg.Wait()
	if cause := context.Cause(ctx); errors.Is(cause, ErrIdle) {
		return ErrIdle
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("accept: %w", err)
}

// watchIdle cancels ctx with ErrIdle once no connection and no session has existed for idle.
func (s *Server) watchIdle(ctx context.Context, cancel context.CancelCauseFunc, idle time.Duration) {
	tick := time.NewTicker(min(idle/4+time.Millisecond, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if s.conns.Load() > 0 || s.sessions.Len() > 0 {
				s.lastBusy.Store(time.Now().UnixNano())
				continue
			}
			if time.Since(time.Unix(0, s.lastBusy.Load())) >= idle {
				s.log.Info("idle timeout, no sessions: exiting", "idle", idle)
				cancel(ErrIdle)
				return
			}
		}
	}
}

// connState is what the server knows about one connection.
type connState struct {
	cred     Cred
	decision Decision
	hello    bool
	uc       *net.UnixConn // nil in fuzz tests
	// vms are the sessions whose VM was started on this connection (server_vm.go): the
	// connection is their lease, never closed for idleness, and its end destroys them.
	vms []string
}

func (s *Server) handleConn(ctx context.Context, uc *net.UnixConn) {
	defer uc.Close()
	// 1. Identity, once, from the kernel. No credentials: close without a word.
	cred, err := PeerCred(uc)
	if err != nil {
		s.log.Warn("audit: closing connection", "err", err)
		return
	}
	// Each uid holds at most MaxConnsPerUser connections; the rest stay for other uids.
	if !s.uidConns.acquire(cred.UID) {
		s.log.Warn("audit: closing connection: per-user connection limit", "uid", cred.UID, "pid", cred.PID,
			"max_conns_per_user", s.cfg.MaxConnsPerUser)
		return
	}
	defer s.uidConns.release(cred.UID)
	st := &connState{cred: cred, decision: Authorize(cred, s.cfg.AllowUIDs, s.cfg.allowGIDs), uc: uc}
	s.log.Info("audit: accept", "uid", cred.UID, "gid", cred.GID, "pid", cred.PID,
		"allowed", st.decision.Allowed, "reason", st.decision.Reason)
	conn := api.NewConn(uc)
	stop := context.AfterFunc(ctx, func() { uc.SetReadDeadline(time.Now()) })
	defer stop()
	defer s.releaseLeases(st)
	for {
		if ctx.Err() != nil {
			return
		}
		// 2. One request, bounded in time and size.
		if err := uc.SetReadDeadline(s.readDeadline(st)); err != nil {
			return
		}
		body, files, err := conn.ReadFrame()
		if err != nil {
			if errors.Is(err, api.ErrTooLarge) {
				s.reply(conn, st, nil, err)
			}
			if !errors.Is(err, io.EOF) {
				s.log.Info("connection closed", "uid", cred.UID, "pid", cred.PID, "err", err)
			}
			return
		}
		// 3. Unauthorized peers get one typed answer, then the connection is closed.
		if !st.decision.Allowed {
			closeFiles(files)
			s.reply(conn, st, nil, fmt.Errorf("uid %d may not use the helper (%s): %w", cred.UID, st.decision.Reason, api.ErrPermissionDenied))
			return
		}
		// The handler may block for hours (wait_vm): no read deadline runs meanwhile.
		if err := uc.SetReadDeadline(time.Time{}); err != nil {
			return
		}
		result, rfiles, err := s.dispatch(ctx, st, body, files)
		ok := s.reply(conn, st, result, err, rfiles...)
		closeFiles(rfiles)
		if !ok {
			return
		}
	}
}

// reply sends result or err, with files attached to a successful result (the caller
// closes them); it reports whether the connection is still usable.
func (s *Server) reply(conn *api.Conn, st *connState, result any, err error, files ...*os.File) bool {
	var resp api.Response
	if err != nil {
		resp.Error = api.AsError(err)
		if resp.Error.Code == api.CodeInternal {
			s.log.Error("call failed", "uid", st.cred.UID, "err", err)
			resp.Error.Message = "internal error (see the helper's log)"
		}
	} else {
		raw, merr := json.Marshal(result)
		if merr != nil {
			resp.Error = &api.Error{Code: api.CodeInternal, Message: "encode result"}
		} else {
			resp.Result = raw
			resp.FDs = len(files)
		}
	}
	if resp.Error != nil {
		files = nil
	}
	body, err := json.Marshal(resp)
	if err != nil {
		return false
	}
	if len(body) > api.MaxFrame {
		// Never drop an answer silently: the client gets an error it shows.
		s.log.Error("reply too large; sending an error instead", "uid", st.cred.UID, "bytes", len(body), "max", api.MaxFrame)
		files = nil
		body, _ = json.Marshal(api.Response{Error: &api.Error{Code: api.CodeInternal,
			Message: fmt.Sprintf("reply of %d bytes exceeds the %d-byte frame (see the helper's log)", len(body), api.MaxFrame)}})
	}
	conn.UnixConn().SetWriteDeadline(time.Now().Add(writeTimeout))
	return conn.WriteFrame(body, files...) == nil
}

// dispatch decodes one request and runs its handler. It owns files: those a handler does
// not keep are closed. rfiles are the descriptors of the response (api.ResponseFDs).
func (s *Server) dispatch(ctx context.Context, st *connState, body []byte, files []*os.File) (result any, rfiles []*os.File, err error) {
	result, rfiles, err = s.dispatch1(ctx, st, body, files)
	if err != nil {
		closeFiles(rfiles)
		rfiles = nil
	}
	return result, rfiles, err
}

func (s *Server) dispatch1(ctx context.Context, st *connState, body []byte, files []*os.File) (result any, rfiles []*os.File, err error) {
	uid := st.cred.UID
	call := "?"
	defer func() {
		code := "ok"
		if err != nil {
			code = string(api.AsError(err).Code)
		}
		s.log.Info("audit: call", "uid", uid, "pid", st.cred.PID, "call", call, "result", code)
	}()
	defer s.recoverHandler(&call, uid, &err)
	req, err := api.DecodeRequest(body)
	if err != nil {
		closeFiles(files)
		return nil, nil, err
	}
	call = string(req.Call)
	want, ok := api.CallFDs[req.Call]
	if _, handled := handlers[req.Call]; !ok || !handled {
		closeFiles(files)
		return nil, nil, fmt.Errorf("call %q: %w", req.Call, api.ErrUnknownCall)
	}
	if req.FDs != want || len(files) != want {
		closeFiles(files)
		return nil, nil, fmt.Errorf("call %q: declares %d and carries %d descriptors, want %d: %w", req.Call, req.FDs, len(files), want, api.ErrBadRequest)
	}
	if !st.hello && req.Call != api.CallHello {
		closeFiles(files)
		return nil, nil, fmt.Errorf("call %q before hello: %w", req.Call, api.ErrHelloRequired)
	}
	return handlers[req.Call](s, ctx, st, req, files)
}

// handler answers one call for the peer of st: its result and the descriptors to send,
// or an error. files are the descriptors the request carried (exactly api.CallFDs of the
// call); the handler owns them.
type handler func(s *Server, ctx context.Context, st *connState, req *api.Request, files []*os.File) (any, []*os.File, error)

// handlers is the server's one table of calls: every api.Call has its row (a test checks
// it against api.CallFDs), and nothing is added elsewhere.
var handlers = map[api.Call]handler{
	api.CallHello:           (*Server).callHello,
	api.CallCreateSession:   (*Server).callCreateSession,
	api.CallStartVM:         (*Server).vmCall,
	api.CallAttach:          (*Server).vmCall,
	api.CallStopVM:          (*Server).vmCall,
	api.CallWaitVM:          (*Server).waitVMCall,
	api.CallEgressLog:       (*Server).vmCall,
	api.CallRefreshedLogins: (*Server).vmCall,
	api.CallListSessions:    (*Server).callListSessions,
	api.CallDestroySession:  (*Server).callDestroySession,
	api.CallResolvePolicy:   (*Server).callResolvePolicy,
	api.CallDoctor:          (*Server).callDoctor,
	api.CallListImages:      (*Server).callListImages,
	api.CallBuildImage:      (*Server).callBuildImage,
}

func (s *Server) callHello(_ context.Context, st *connState, req *api.Request, _ []*os.File) (any, []*os.File, error) {
	r, err := s.hello(st, req)
	return r, nil, err
}

func (s *Server) callCreateSession(_ context.Context, st *connState, req *api.Request, files []*os.File) (any, []*os.File, error) {
	r, err := s.createSession(st, req, files[0])
	return r, nil, err
}

func (s *Server) callListSessions(_ context.Context, st *connState, req *api.Request, _ []*os.File) (any, []*os.File, error) {
	var a api.ListSessionsArgs
	if err := api.DecodeArgs(req.Args, &a); err != nil {
		return nil, nil, err
	}
	return api.SessionList{Sessions: s.sessions.List(st.cred.UID)}, nil, nil
}

func (s *Server) callDestroySession(_ context.Context, st *connState, req *api.Request, _ []*os.File) (any, []*os.File, error) {
	var a api.SessionArgs
	if err := api.DecodeArgs(req.Args, &a); err != nil {
		return nil, nil, err
	}
	if !api.ValidSessionID(a.ID) {
		return nil, nil, fmt.Errorf("destroy session %q: malformed id: %w", a.ID, api.ErrBadRequest)
	}
	if err := s.sessions.Destroy(a.ID, st.cred.UID); err != nil {
		return nil, nil, err
	}
	s.lastBusy.Store(time.Now().UnixNano())
	s.log.Info("audit: session destroyed", "uid", st.cred.UID, "session", a.ID)
	return api.Empty{}, nil, nil
}

func (s *Server) callResolvePolicy(_ context.Context, _ *connState, req *api.Request, _ []*os.File) (any, []*os.File, error) {
	r, err := s.resolvePolicy(req)
	return r, nil, err
}

func (s *Server) callDoctor(_ context.Context, _ *connState, req *api.Request, _ []*os.File) (any, []*os.File, error) {
	var a api.DoctorArgs
	if err := api.DecodeArgs(req.Args, &a); err != nil {
		return nil, nil, err
	}
	checks := append(slices.Clone(s.doctor), s.health.Check())
	if s.firewall != nil {
		checks = append(checks, s.firewall())
	}
	return api.DoctorReport{Checks: checks}, nil, nil
}

func (s *Server) callListImages(_ context.Context, _ *connState, req *api.Request, _ []*os.File) (any, []*os.File, error) {
	r, err := s.listImages(req)
	return r, nil, err
}

func (s *Server) hello(st *connState, req *api.Request) (any, error) {
	var a api.HelloArgs
	if err := api.DecodeArgs(req.Args, &a); err != nil {
		return nil, err
	}
	if a.Version != api.Version {
		return nil, fmt.Errorf("client speaks protocol %d, helper %d: %w", a.Version, api.Version, api.ErrVersionMismatch)
	}
	st.hello = true
	caps := s.caps
	caps.Peer = st.cred.Peer
	s.vmCaps(&caps)
	if s.egress != nil {
		caps.Policy = egress.PolicyDigest(s.cfg.Egress.PolicyPath)
	}
	// Secret bindings: a session with a network hands them to its egress process, one
	// without drops them (checkSecrets); only an in-process proxy (tests of other
	// layers) cannot take them.
	caps.Secrets = s.egress == nil || s.egress.ProxyExe != ""
	caps.LoginWriteBack = caps.Secrets
	return caps, nil
}

// resolvePolicy answers the effective egress policy of the request's inputs, from the
// function whose result egress.Manager.Start enforces (egress.Manager.Resolve).
func (s *Server) resolvePolicy(req *api.Request) (any, error) {
	var a api.ResolvePolicyArgs
	if err := api.DecodeArgs(req.Args, &a); err != nil {
		return nil, err
	}
	if s.egress == nil {
		return nil, fmt.Errorf("resolve egress policy: this helper gives VMs no network: %w", api.ErrUnavailable)
	}
	eff, sysDigest, err := s.egress.Resolve(a)
	if err != nil {
		return nil, err
	}
	return policywire.Render(eff, sysDigest), nil
}

// createSession checks the share descriptor with fstat (a directory owned by the peer)
// and records the session. The share is kept open for the session's VM.
func (s *Server) createSession(st *connState, req *api.Request, share *os.File) (any, error) {
	var a api.CreateSessionArgs
	if err := api.DecodeArgs(req.Args, &a); err != nil {
		share.Close()
		return nil, err
	}
	if err := checkShare(share, st.cred.UID); err != nil {
		share.Close()
		return nil, err
	}
	sess, err := s.sessions.Create(st.cred.UID, st.cred.GID, share)
	if err != nil {
		share.Close()
		return nil, err
	}
	s.lastBusy.Store(time.Now().UnixNano())
	s.log.Info("audit: session created", "uid", st.cred.UID, "session", sess.ID, "tap", sess.Tap)
	return sess, nil
}

// checkShare requires the workspace share to be a directory owned by uid.
func checkShare(f *os.File, uid uint32) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("fstat share: %w: %w", api.ErrBadFD, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("share is not a directory (mode %#o): %w", st.Mode, api.ErrBadFD)
	}
	if st.Uid != uid {
		return fmt.Errorf("share directory is owned by uid %d, not by the caller (uid %d): %w", st.Uid, uid, api.ErrBadFD)
	}
	return nil
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
