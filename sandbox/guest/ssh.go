package guest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"brood.dev/brood/sandbox/guestcfg"
)

// findPort returns the /dev node of the virtio-serial port called name. Without udev
// there is no /dev/virtio-ports/<name>: the name is in /sys/class/virtio-ports/*/name.
func findPort(name string, wait time.Duration) (string, error) {
	for end := time.Now().Add(wait); ; time.Sleep(5 * time.Millisecond) {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err == nil && strings.TrimSpace(string(b)) == name {
				dev := "/dev/" + filepath.Base(filepath.Dir(n))
				if waitFor(dev, time.Second) {
					return dev, nil
				}
			}
		}
		if time.Now().After(end) {
			return "", fmt.Errorf("port %q: %w", name, ErrNoPort)
		}
	}
}

// portConn is the virtio-serial port as a net.Conn. The port is opened O_NONBLOCK and
// wrapped in exactly one os.File, so reads go through Go's netpoller: a blocking read
// on a 1-vCPU guest costs ~7 ms per round trip, and a second os.File for the same fd
// would close it under the first.
type portConn struct{ f *os.File }

func (c portConn) Read(b []byte) (int, error)         { return c.f.Read(b) }
func (c portConn) Close() error                       { return nil } // the port outlives connections
func (c portConn) LocalAddr() net.Addr                { return portAddr(c.f.Name()) }
func (c portConn) RemoteAddr() net.Addr               { return portAddr("host") }
func (c portConn) SetDeadline(t time.Time) error      { return c.f.SetDeadline(t) }
func (c portConn) SetReadDeadline(t time.Time) error  { return c.f.SetReadDeadline(t) }
func (c portConn) SetWriteDeadline(t time.Time) error { return c.f.SetWriteDeadline(t) }

// Write writes b, waiting with poll(2) while the port is full. It fails once the host
// side is gone: the port then reports EAGAIN forever (virtio_console's
// will_write_block is true without a host connection) and the netpoller, being
// edge-triggered, would wait forever.
func (c portConn) Write(b []byte) (int, error) {
	rc, err := c.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	n := 0
	var werr error
	cerr := rc.Control(func(fd uintptr) {
		for n < len(b) {
			m, err := unix.Write(int(fd), b[n:])
			if m > 0 {
				n += m
			}
			switch {
			case err == nil || err == unix.EINTR:
				continue
			case err != unix.EAGAIN:
				werr = &os.PathError{Op: "write", Path: c.f.Name(), Err: err}
				return
			}
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			if _, err := unix.Poll(p, 100); err != nil && err != unix.EINTR {
				werr = os.NewSyscallError("poll", err)
				return
			}
			if p[0].Revents&unix.POLLOUT == 0 && p[0].Revents&unix.POLLHUP != 0 {
				werr = ErrHostGone
				return
			}
		}
	})
	if cerr != nil {
		return n, cerr
	}
	return n, werr
}

type portAddr string

func (a portAddr) Network() string { return "virtio-serial" }
func (a portAddr) String() string  { return string(a) }

// waitHost blocks until the host side of the port is connected and has sent data:
// with no host client the port reports POLLHUP and read returns 0 at once.
func waitHost(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var perr error
	cerr := rc.Control(func(fd uintptr) {
		for {
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			_, err := unix.Poll(p, 1000)
			switch {
			case err == unix.EINTR:
			case err != nil:
				perr = os.NewSyscallError("poll", err)
				return
			case p[0].Revents&unix.POLLHUP != 0:
				time.Sleep(10 * time.Millisecond)
			case p[0].Revents&unix.POLLIN != 0:
				return
			}
		}
	})
	if cerr != nil {
		return cerr
	}
	return perr
}

// openPort finds and opens the SSH virtio-serial port. It must run before the switch
// root moves /sys and /dev; the open file stays valid after it.
func openPort() (*os.File, error) {
	dev, err := findPort(sshPortName, 5*time.Second)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dev, Err: err}
	}
	return os.NewFile(uintptr(fd), dev), nil
}

// serveSSH serves the session's one SSH connection on the port f and returns when it
// ends, or with an error when its handshake fails (wrong client key, or the client
// refused the host key). The handshake does not wait for the root filesystem;
// session channels do (g.ready).
func (g *guest) serveSSH(f *os.File) error {
	signer, err := ssh.ParsePrivateKey(g.cfg.HostKey)
	if err != nil {
		return fmt.Errorf("parse host key: %w", err)
	}
	authorized, _, _, _, err := ssh.ParseAuthorizedKey([]byte(g.cfg.AuthorizedKey))
	if err != nil {
		return fmt.Errorf("parse authorized key: %w", err)
	}
	want := authorized.Marshal()
	cfg := &ssh.ServerConfig{
		Config: ssh.Config{Ciphers: guestcfg.Ciphers},
		PublicKeyCallback: func(md ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if md.User() != g.cfg.User || !bytes.Equal(key.Marshal(), want) {
				return nil, fmt.Errorf("user %q key %s not authorized", md.User(), ssh.FingerprintSHA256(key))
			}
			return &ssh.Permissions{}, nil
		},
	}
	cfg.AddHostKey(signer)

	dev := f.Name()
	g.debugf("ssh: waiting on %s", dev)
	if err := waitHost(f); err != nil {
		return fmt.Errorf("wait for host on %s: %w", dev, err)
	}
	// One connection per session. A failed handshake ends the session too: the port
	// is a byte stream without connection boundaries (QEMU may hand a reconnecting
	// client's bytes to the guest before the old client's hangup is visible), so a
	// second handshake on it could not start reliably.
	conn, chans, reqs, err := ssh.NewServerConn(portConn{f}, cfg)
	if err != nil {
		return fmt.Errorf("ssh handshake: %w", err)
	}
	g.debugf("ssh: %s connected", conn.User())
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "only session channels")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go g.session(conn, ch, creqs)
	}
	// The connection is gone: nobody can see further output, so commands still
	// running (or background processes holding a session open) do not delay the
	// power-off; shutdown kills them.
	g.debugf("ssh: connection closed")
	return nil
}

// session state collected from requests before exec/shell.
type session struct {
	conn  ssh.Conn // the connection the session's channel belongs to
	agent bool     // auth-agent-req@openssh.com accepted: the command gets SSH_AUTH_SOCK
	env   []string
	pty   bool
	term  string
	ws    pty.Winsize
	ptmx  *os.File
	proc  *os.Process
	mu    sync.Mutex
}

// Wire payloads (RFC 4254 section 6).
type ptyReq struct {
	Term             string
	Cols, Rows, W, H uint32
	Modes            string
}
type winch struct{ Cols, Rows, W, H uint32 }
type envReq struct{ Name, Value string }
type execReq struct{ Command string }
type signalReq struct{ Signal string }

var signals = map[string]syscall.Signal{
	"INT": unix.SIGINT, "TERM": unix.SIGTERM, "KILL": unix.SIGKILL, "HUP": unix.SIGHUP,
	"QUIT": unix.SIGQUIT, "USR1": unix.SIGUSR1, "USR2": unix.SIGUSR2,
}

// session serves one "session" channel: pty-req, env, window-change, signal, then
// exec or shell runs exactly one command and reports its exit status. It returns when
// the client closes the channel (after the command's exit status was sent, if one
// started) or when the command's exit status was sent; a command that cannot start
// is reported on the channel's stderr with exit status 127.
func (g *guest) session(conn ssh.Conn, ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	g.debugf("session: channel open")
	<-g.ready // requests queue in the channel meanwhile
	s := &session{conn: conn}
	started := false
	var done chan struct{}
	for {
		req, ok := nextRequest(reqs, done)
		if !ok {
			return
		}
		okReply := false
		switch req.Type {
		case "exec", "shell":
			if started {
				break
			}
			argv, valid := commandArgv(req)
			if !valid {
				break
			}
			started = true
			done = make(chan struct{})
			if err := g.run(ch, s, argv, done); err != nil {
				g.startFailed(ch, req, err)
				return
			}
			okReply = true
		case guestcfg.HomeFileRequest: // homefile.go; only before the command starts
			if okReply = !started; okReply {
				if err := g.homeFile(req.Payload); err != nil {
					g.logf("session: %v", err)
					okReply = false
				}
			}
		case guestcfg.TrustCARequest: // trust.go; only before the command starts
			if okReply = !started; okReply {
				if err := g.trustCA(req.Payload); err != nil {
					g.logf("session: %v", err)
					okReply = false
				}
			}
		default:
			okReply = s.setting(req, started)
		}
		if req.WantReply {
			req.Reply(okReply, nil)
		}
	}
}

// nextRequest waits for the session's next request. Before the command started (done is
// nil) it waits on reqs alone; afterwards it also watches done, which the command's exit
// closes. ok is false when the session is over: done closed, or reqs closed (then it first
// waits for done, if the command started, so the exit status still goes out).
func nextRequest(reqs <-chan *ssh.Request, done chan struct{}) (req *ssh.Request, ok bool) {
	if done == nil {
		req, ok = <-reqs
		return req, ok
	}
	select {
	case req, ok = <-reqs:
	case <-done:
		return nil, false
	}
	if !ok {
		<-done
	}
	return req, ok
}

// commandArgv returns the argv of an "exec" request (/bin/sh -c COMMAND) or of a "shell"
// request (a login shell, /bin/sh -l). ok is false when an exec payload does not decode.
func commandArgv(req *ssh.Request) (argv []string, ok bool) {
	if req.Type != "exec" {
		return []string{"/bin/sh", "-l"}, true
	}
	var e execReq
	if ssh.Unmarshal(req.Payload, &e) != nil {
		return nil, false
	}
	return []string{"/bin/sh", "-c", e.Command}, true
}

// startFailed reports a command that could not start: to the guest log, as a line on the
// channel's stderr, as a failed reply to req (when the client wants one) and as exit
// status 127 (the shell's "command not found").
func (g *guest) startFailed(ch ssh.Channel, req *ssh.Request, err error) {
	g.logf("session: %v", err)
	fmt.Fprintf(ch.Stderr(), "brood-guest: %v\n", err)
	if req.WantReply {
		req.Reply(false, nil)
	}
	sendStatus(ch, 127)
}

// setting applies one of the requests that configure the session rather than start its
// command: pty-req and env (accepted only before the command started), window-change and
// signal (which act on the running command's tty and process group). It returns the
// reply to send: true for an accepted pty-req or env, false otherwise (window-change and
// signal want no reply; unknown request types are refused).
func (s *session) setting(req *ssh.Request, started bool) bool {
	switch req.Type {
	case "pty-req":
		var p ptyReq
		if !started && ssh.Unmarshal(req.Payload, &p) == nil {
			s.pty, s.term = true, p.Term
			s.ws = pty.Winsize{Cols: uint16(p.Cols), Rows: uint16(p.Rows)}
			return true
		}
	case "window-change":
		var w winch
		if ssh.Unmarshal(req.Payload, &w) == nil {
			s.mu.Lock()
			s.ws = pty.Winsize{Cols: uint16(w.Cols), Rows: uint16(w.Rows)}
			if s.ptmx != nil {
				_ = pty.Setsize(s.ptmx, &s.ws)
			}
			s.mu.Unlock()
		}
	case agentRequest: // agentfwd.go
		if !started {
			s.agent = true
			return true
		}
	case "env":
		var e envReq
		if !started && ssh.Unmarshal(req.Payload, &e) == nil && validEnvName(e.Name) {
			s.env = append(s.env, e.Name+"="+e.Value)
			return true
		}
	case "signal":
		var sr signalReq
		if ssh.Unmarshal(req.Payload, &sr) == nil {
			s.mu.Lock()
			if sig, ok := signals[sr.Signal]; ok && s.proc != nil {
				_ = syscall.Kill(-s.proc.Pid, sig) // the whole session (setsid)
			}
			s.mu.Unlock()
		}
	}
	return false
}

// validEnvName accepts POSIX-ish variable names.
func validEnvName(n string) bool {
	if n == "" || strings.ContainsAny(n, "=\x00") {
		return false
	}
	return true
}

// env returns the agent's environment: a fixed base plus what the client sent. Nothing
// comes from brood-guest's own environment.
func (g *guest) env(s *session) []string {
	home := homeDir(g.cfg)
	e := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + home, "USER=" + g.cfg.User, "LOGNAME=" + g.cfg.User, "SHELL=/bin/sh",
	}
	if s.pty {
		e = append(e, "TERM="+s.term)
	}
	return append(e, s.env...)
}

// run starts argv for the session as the agent user, wires its stdio to ch (through a
// PTY when one was requested), and closes done after the exit status was sent. It
// returns the error of opening the PTY or pipes, or of starting the command; then done
// is never closed.
func (g *guest) run(ch ssh.Channel, s *session, argv []string, done chan struct{}) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = g.env(s)
	if s.agent {
		sock, err := g.agentSocket(s, done) // agentfwd.go
		if err != nil {
			return err
		}
		cmd.Env = append(cmd.Env, "SSH_AUTH_SOCK="+sock)
	}
	cmd.Dir = Workspace
	if _, err := os.Stat(Workspace); err != nil {
		cmd.Dir = "/"
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(g.cfg.UID), Gid: uint32(g.cfg.GID), Groups: []uint32{}},
		Setsid:     true,
	}
	copies := &sync.WaitGroup{}
	var closeAfter []*os.File
	var err error
	if s.pty {
		closeAfter, err = g.wirePTY(cmd, ch, s, copies)
	} else {
		closeAfter, err = wirePipes(cmd, ch, copies)
	}
	if err != nil {
		return err
	}
	t0 := time.Now()
	exited, err := g.reaper.start(cmd)
	g.debugf("session: started %q in %v", argv, time.Since(t0).Round(time.Microsecond))
	for _, f := range closeAfter {
		f.Close()
	}
	if err != nil {
		if s.ptmx != nil {
			s.ptmx.Close()
		}
		return err
	}
	s.mu.Lock()
	s.proc = cmd.Process
	s.mu.Unlock()
	go g.finish(ch, s, cmd, argv, t0, exited, copies, done)
	return nil
}

// wirePTY opens a PTY for the session: its tty (owned by the agent user, sized to the
// client's last window size) becomes cmd's stdin, stdout, stderr and controlling
// terminal, and two goroutines copy ch into the PTY master and the master back into ch
// (the second counted in copies). It returns the tty, which the caller closes once cmd
// started, or the error of opening the PTY.
func (g *guest) wirePTY(cmd *exec.Cmd, ch ssh.Channel, s *session, copies *sync.WaitGroup) ([]*os.File, error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("open pty: %w", err)
	}
	_ = tty.Chown(g.cfg.UID, g.cfg.GID)
	s.mu.Lock()
	_ = pty.Setsize(ptmx, &s.ws)
	s.ptmx = ptmx
	s.mu.Unlock()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr.Setctty = true
	cmd.SysProcAttr.Ctty = 0
	go func() { _, _ = io.Copy(ptmx, ch) }()
	copies.Add(1)
	go func() { defer copies.Done(); _, _ = io.Copy(ch, ptmx) }() // ends with EIO when the tty is gone
	return []*os.File{tty}, nil
}

// wirePipes gives cmd three pipes: ch's data feeds stdin, stdout goes to ch's data and
// stderr to ch's extended (stderr) data, each copied by a goroutine (the two output
// copies counted in copies). It returns the command's ends of the pipes, which the
// caller closes once cmd started, or the error of creating a pipe.
func wirePipes(cmd *exec.Cmd, ch ssh.Channel, copies *sync.WaitGroup) ([]*os.File, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	go func() { _, _ = io.Copy(inW, ch); inW.Close() }()
	copies.Add(2)
	go func() { defer copies.Done(); _, _ = io.Copy(ch, outR); outR.Close() }()
	go func() { defer copies.Done(); _, _ = io.Copy(ch.Stderr(), errR); errR.Close() }()
	return []*os.File{inR, outW, errW}, nil
}

// finish waits for cmd's wait status on exited, lets the output copies drain (through a
// PTY at most one second, so a background child holding the tty open cannot hold the
// session), closes the channel for writing and sends the exit status: the command's
// exit code, or 128+N for a command killed by signal N (the shell's convention). It
// closes done last.
func (g *guest) finish(ch ssh.Channel, s *session, cmd *exec.Cmd, argv []string, t0 time.Time,
	exited <-chan unix.WaitStatus, copies *sync.WaitGroup, done chan struct{}) {
	defer close(done)
	ws := <-exited
	g.debugf("session: %q exited after %v", argv, time.Since(t0).Round(time.Microsecond))
	cmd.Process.Release()
	if s.ptmx != nil {
		// Drain what the command wrote before it exited; a background child that
		// keeps the tty open must not hold the session.
		waitTimeout(copies, time.Second)
		s.ptmx.Close()
	} else {
		copies.Wait()
	}
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	ch.CloseWrite()
	sendStatus(ch, code)
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	c := make(chan struct{})
	go func() { wg.Wait(); close(c) }()
	select {
	case <-c:
	case <-time.After(d):
	}
}

// sendStatus sends the "exit-status" request (RFC 4254 6.10).
func sendStatus(ch ssh.Channel, code int) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(code))
	if _, err := ch.SendRequest("exit-status", false, b[:]); err != nil && !errors.Is(err, io.EOF) {
		return
	}
}
