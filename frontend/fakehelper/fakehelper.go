// Package fakehelper is an in-memory broodd-helper for tests of the frontend: it keeps
// sessions in memory and boots a fake "VM" whose guest is an SSH server on one end of a
// socket pair. It presents the host key StartVM reported (unless told otherwise), runs
// nothing (it answers every exec with "ran: CMD" and exit status 0), then hangs up like
// brood-guest powering off. It has two front doors: Dial, an in-memory
// helperclient.Client for tests of package frontend, and Serve, the helper
// protocol of package helper/api on a unix socket for tests of the command line.
//
// Privilege: none; it runs inside test binaries as the developer, on sockets and socket
// pairs the test made.
package fakehelper

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"brood.dev/brood/frontend/helperclient"
	"brood.dev/brood/frontend/sshclient"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/guestcfg"
)

// SessionID is the helper session id CreateSession returns.
const SessionID = "0000abcd"

// Helper is the fake helper. Set its exported fields before the first call; read what
// it saw through its methods.
type Helper struct {
	// StartErr is StartVM's answer when set.
	StartErr *api.Error
	// HostKey is the key StartVM reports (what brood pins); GuestKey the key the fake
	// guest presents (New sets both to one key).
	HostKey, GuestKey ssh.Signer
	// Caps is Hello's answer (Version is always api.Version).
	Caps api.Capabilities
	// DropAfter: after answering this call on a socket the fake closes the connection
	// (the real helper closing an idle connection); once. Serve only.
	DropAfter api.Call
	// DropWait: the first wait_vm on a socket is answered by closing the connection.
	// Serve only.
	DropWait bool
	// Lingers: the fake guest does not power off after the command; only StopVM ends it.
	Lingers bool
	// Sessions is ListSessions' answer; Images ListImages'.
	Sessions []api.Session
	Images   api.ImageList
	// Egress is WaitVM's summary of the DNS decisions; VMEgress StartVM's network.
	Egress   *api.EgressSummary
	VMEgress *api.EgressInfo
	// EgressLog is egress_log's file content (nil: the call fails with CodeNotFound).
	EgressLog []byte
	// Refreshed is refreshed_logins' answer when the session's StartVM asked for
	// write-back (SessionSecrets.WriteBack), an empty list otherwise; nil Refreshed: the
	// call is unknown, as to an older helper.
	Refreshed *api.RefreshedLogins
	// ImageFile and ImageDigest are StartVM's image file and digest (empty: not said).
	ImageFile, ImageDigest string
	// Doctor is the doctor call's answer.
	Doctor api.DoctorReport
	// Policy answers resolve_policy (nil: the call is unknown, as to an older helper).
	Policy *api.Policy
	// Builds are build_image's answers, in order (the last one repeats); BuildErr, when
	// set, answers every build_image instead. A done answer adds its image to
	// Caps.Images, as a real build adds it to the store. Serve only.
	Builds   []api.BuildStatus
	BuildErr *api.Error
	// Agent, when set, runs when the guest receives an exec, before it answers: with
	// the directory of the session's workspace share (the snapshot) and the command, it
	// changes the snapshot as an agent in /workspace would.
	Agent func(share, command string)
	// AgentUse, when set, runs when a session that asked for agent forwarding
	// (auth-agent-req@openssh.com) receives its exec: with an agent client over an
	// auth-agent@openssh.com channel the fake guest opens to brood (what a guest
	// command using SSH_AUTH_SOCK reaches); what it returns follows "ran: CMD".
	AgentUse func(a agent.ExtendedAgent) string
	// Output is what the fake guest writes after "ran: CMD", and ExitStatus the
	// command's exit status (default 0).
	Output     string
	ExitStatus uint32
	// SecretsCA is StartVM's session CA (VMInfo.SecretsCA) for a request that carried
	// secret bindings, as a helper whose Caps say Secrets answers.
	SecretsCA string

	mu        sync.Mutex
	calls     []string
	startArg  api.StartVMArgs
	env       []string            // env requests the guest received, "NAME=value"
	homeFiles []guestcfg.HomeFile // home-file requests the guest accepted
	trusted   [][]byte            // trust-CA requests the guest accepted
	gone      chan struct{}       // closed when the fake VM is gone (hung up or stopped)
	goneOnce  sync.Once
	outcome   api.VMOutcome
	policyArg api.ResolvePolicyArgs
	buildArgs []api.BuildImageArgs
	share     string // the workspace share of the last CreateSession, as a path
}

var _ helperclient.Helper = (*Helper)(nil)

// New returns a fake helper with a fresh host key, TCG acceleration and the qemu backend.
func New() (*Helper, error) {
	host, _, err := sshclient.NewKey()
	if err != nil {
		return nil, err
	}
	return &Helper{HostKey: host, GuestKey: host, gone: make(chan struct{}),
		Caps: api.Capabilities{Accel: sandbox.AccelTCG, Backends: []string{"qemu"}}}, nil
}

// Calls lists the calls the fake answered, in order, separated by spaces ("hello
// create_session start_vm ...").
func (h *Helper) Calls() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.calls, " ")
}

// BuildArgs lists the build_image requests the fake answered, in order.
func (h *Helper) BuildArgs() []api.BuildImageArgs {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]api.BuildImageArgs(nil), h.buildArgs...)
}

// buildImage answers one build_image request (Builds, BuildErr).
func (h *Helper) buildImage(a api.BuildImageArgs) (api.BuildStatus, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buildArgs = append(h.buildArgs, a)
	if h.BuildErr != nil {
		return api.BuildStatus{}, h.BuildErr
	}
	if len(h.Builds) == 0 {
		return api.BuildStatus{}, &api.Error{Code: api.CodeUnknownCall, Message: "build_image"}
	}
	st := h.Builds[0]
	if len(h.Builds) > 1 {
		h.Builds = h.Builds[1:]
	}
	if st.State == api.BuildDone && !slices.Contains(h.Caps.Images, a.Name) {
		h.Caps.Images = append(h.Caps.Images, a.Name)
	}
	return st, nil
}

// StartArgs is the last StartVM request.
func (h *Helper) StartArgs() api.StartVMArgs {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.startArg
}

// Env lists the environment variables the guest was sent, "NAME=value", in order.
func (h *Helper) Env() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.env...)
}

// HomeFiles returns the home files the fake guest was sent, in order.
func (h *Helper) HomeFiles() []guestcfg.HomeFile {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]guestcfg.HomeFile(nil), h.homeFiles...)
}

// TrustedCAs returns the CA certificates the fake guest was asked to trust, in order.
func (h *Helper) TrustedCAs() [][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]byte(nil), h.trusted...)
}

// Outcome is how the fake VM ended ("" while it runs).
func (h *Helper) Outcome() api.VMOutcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.outcome
}

// PolicyArgs is the last resolve_policy request.
func (h *Helper) PolicyArgs() api.ResolvePolicyArgs {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.policyArg
}

// Share returns the path of the workspace share of the last CreateSession ("" before
// one): the snapshot, or the workspace itself in direct mode.
func (h *Helper) Share() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.share
}

// createSession remembers the share's path (the fake reads and writes it by path, in
// the test's own process) and returns the one session id.
func (h *Helper) createSession(share *os.File) api.Session {
	if share != nil {
		p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", share.Fd()))
		if err == nil {
			h.mu.Lock()
			h.share = p
			h.mu.Unlock()
		}
	}
	return api.Session{ID: SessionID, State: api.SessionCreated}
}

func (h *Helper) record(call api.Call) {
	h.mu.Lock()
	h.calls = append(h.calls, string(call))
	h.mu.Unlock()
}

// end marks the fake VM gone with outcome (the first end wins).
func (h *Helper) end(outcome api.VMOutcome) {
	h.goneOnce.Do(func() {
		h.mu.Lock()
		h.outcome = outcome
		h.mu.Unlock()
		close(h.gone)
	})
}

func (h *Helper) hello() api.Capabilities {
	h.mu.Lock()
	defer h.mu.Unlock()
	caps := h.Caps
	caps.Version = api.Version
	return caps
}

func (h *Helper) startVM(a api.StartVMArgs) (api.VMInfo, error) {
	h.mu.Lock()
	h.startArg = a
	h.mu.Unlock()
	if h.StartErr != nil {
		return api.VMInfo{}, h.StartErr
	}
	key := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(h.HostKey.PublicKey())))
	info := api.VMInfo{HostKey: key, Accel: sandbox.AccelTCG, Backend: "qemu", Egress: h.VMEgress,
		ImageFile: h.ImageFile, ImageDigest: h.ImageDigest}
	if a.Secrets != nil {
		info.SecretsCA = h.SecretsCA
	}
	return info, nil
}

// attach returns the client end of a socket pair whose other end is the fake guest.
func (h *Helper) attach() (*os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, &api.Error{Code: api.CodeInternal, Message: err.Error()}
	}
	mine := os.NewFile(uintptr(fds[0]), "guest")
	theirs := os.NewFile(uintptr(fds[1]), "client")
	gc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		theirs.Close()
		return nil, &api.Error{Code: api.CodeInternal, Message: err.Error()}
	}
	go h.guest(gc)
	return theirs, nil
}

// refreshedLogins answers refreshed_logins (Helper.Refreshed).
func (h *Helper) refreshedLogins() (api.RefreshedLogins, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.Refreshed == nil {
		return api.RefreshedLogins{}, &api.Error{Code: api.CodeUnknownCall, Message: "unknown call"}
	}
	if h.startArg.Secrets == nil || !h.startArg.Secrets.WriteBack {
		return api.RefreshedLogins{Logins: []api.RefreshedLogin{}}, nil
	}
	return *h.Refreshed, nil
}

// egressLog returns a file holding h.EgressLog (unlinked, read-only), or CodeNotFound.
func (h *Helper) egressLog() (*os.File, error) {
	h.mu.Lock()
	b := h.EgressLog
	h.mu.Unlock()
	if b == nil {
		return nil, &api.Error{Code: api.CodeNotFound, Message: "no egress log"}
	}
	w, err := os.CreateTemp("", "fake-egress-log-")
	if err != nil {
		return nil, &api.Error{Code: api.CodeInternal, Message: err.Error()}
	}
	defer os.Remove(w.Name())
	defer w.Close()
	if _, err := w.Write(b); err != nil {
		return nil, &api.Error{Code: api.CodeInternal, Message: err.Error()}
	}
	f, err := os.Open(w.Name())
	if err != nil {
		return nil, &api.Error{Code: api.CodeInternal, Message: err.Error()}
	}
	return f, nil
}

// waitVM blocks until the fake VM is gone or ctx ends.
func (h *Helper) waitVM(ctx context.Context) (api.VMExit, error) {
	select {
	case <-h.gone:
	case <-ctx.Done():
		return api.VMExit{}, ctx.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return api.VMExit{Outcome: h.outcome, ConsoleTail: "[    0.000000] Linux version\r\n\x1b[31mred\n", Egress: h.Egress}, nil
}

func (h *Helper) resolvePolicy(a api.ResolvePolicyArgs) (api.Policy, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.policyArg = a
	if h.Policy == nil {
		return api.Policy{}, &api.Error{Code: api.CodeUnknownCall, Message: "unknown call"}
	}
	return *h.Policy, nil
}

// guest is the fake guest's SSH server: it authorizes the client key StartVM carried.
func (h *Helper) guest(c net.Conn) {
	h.mu.Lock()
	want, lingers := h.startArg.ClientKey, h.Lingers
	h.mu.Unlock()
	if !lingers {
		defer h.end(api.OutcomePoweroff)
	}
	defer c.Close()
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) != want {
			return nil, fmt.Errorf("key not authorized")
		}
		return nil, nil
	}}
	cfg.AddHostKey(h.GuestKey)
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		if h.session(sc, ch, creqs) {
			return // the guest powers off after the session
		}
	}
}

// session serves one SSH session channel: it records env requests and answers the
// first exec with "ran: CMD", then Output, and ExitStatus. It reports whether an exec ran.
func (h *Helper) session(conn ssh.Conn, ch ssh.Channel, reqs <-chan *ssh.Request) bool {
	forward := false
	for req := range reqs {
		if req.Type == "auth-agent-req@openssh.com" {
			forward = true
			req.Reply(true, nil)
			continue
		}
		if req.Type == "env" {
			var e struct{ Name, Value string }
			ssh.Unmarshal(req.Payload, &e)
			h.mu.Lock()
			h.env = append(h.env, e.Name+"="+e.Value)
			h.mu.Unlock()
		}
		if req.Type == guestcfg.HomeFileRequest {
			var f guestcfg.HomeFile
			ok := ssh.Unmarshal(req.Payload, &f) == nil && f.Check() == nil
			if ok {
				h.mu.Lock()
				h.homeFiles = append(h.homeFiles, f)
				h.mu.Unlock()
			}
			req.Reply(ok, nil)
			continue
		}
		if req.Type == guestcfg.TrustCARequest {
			var tc guestcfg.TrustCA
			ok := ssh.Unmarshal(req.Payload, &tc) == nil && tc.Check() == nil
			if ok {
				h.mu.Lock()
				h.trusted = append(h.trusted, tc.PEM)
				h.mu.Unlock()
			}
			req.Reply(ok, nil)
			continue
		}
		if req.Type != "exec" {
			req.Reply(req.Type == "env", nil)
			continue
		}
		var e struct{ Command string }
		ssh.Unmarshal(req.Payload, &e)
		h.mu.Lock()
		agent, share, output, status := h.Agent, h.share, h.Output, h.ExitStatus
		h.mu.Unlock()
		if agent != nil {
			agent(share, e.Command)
		}
		h.mu.Lock()
		use := h.AgentUse
		h.mu.Unlock()
		if forward && use != nil {
			output = useAgent(conn, use) + output
		}
		req.Reply(true, nil)
		fmt.Fprintf(ch, "ran: %s\n%s", e.Command, output)
		var st [4]byte
		binary.BigEndian.PutUint32(st[:], status)
		ch.SendRequest("exit-status", false, st[:])
		ch.Close()
		return true
	}
	return false
}

// useAgent runs use with an agent client over a new auth-agent@openssh.com channel of
// conn, as a guest command that connects to SSH_AUTH_SOCK would.
func useAgent(conn ssh.Conn, use func(agent.ExtendedAgent) string) string {
	ch, reqs, err := conn.OpenChannel("auth-agent@openssh.com", nil)
	if err != nil {
		return fmt.Sprintf("open agent channel: %v\n", err)
	}
	defer ch.Close()
	go ssh.DiscardRequests(reqs)
	return use(agent.NewClient(ch))
}
