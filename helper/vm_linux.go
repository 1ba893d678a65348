package helper

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/guestcfg"
	"brood.dev/brood/sandbox/initramfs"
)

// Timing of the runner protocol.
const (
	// runnerStartTimeout bounds the runner's start: exec, confinement, QEMU exec.
	runnerStartTimeout = 30 * time.Second
	// runnerStopGrace is how long stop waits for the runner after asking it to stop
	// before it kills the runner and QEMU.
	runnerStopGrace = 10 * time.Second
	// runnerTimeoutSlack is how long past the VM's timeout the helper waits for the
	// runner's own timeout handling before killing it.
	runnerTimeoutSlack = 15 * time.Second
)

// vmHandle is the helper's side of one running VM: the runner process and its control
// socket.
type vmHandle struct {
	id      string
	log     *slog.Logger
	pid     int      // the runner's pid
	spawner *Spawner // the runner's parent, which kills it on request
	conn    *api.Conn
	runDir  string

	attachMu sync.Mutex        // one attach at a time (answers are not tagged)
	writeMu  sync.Mutex        // one request frame at a time
	attached chan attachResult // answers to opAttach
	started  chan runnerEvent  // the first event: started or error
	done     chan struct{}     // closed when the runner is reaped and exit is set
	exit     api.VMExit        // how the VM ended, valid after done
	vmmPid   int               // QEMU's pid (logs, tests)
	onExit   func(api.VMExit)  // updates the session table
	egress   *Egress           // non-nil: the session's network is removed when the VM ends

	pidMu       sync.Mutex
	runnerPidfd *os.File // closed (nil) once the runner is gone
	vmmPidfd    *os.File // QEMU's pidfd from the runner; nil until started, or once gone
}

type attachResult struct {
	f   *os.File
	err error
}

// startVM prepares and boots the VM of session s for the owner: artifacts, host key,
// session initramfs, run directory, runner. It returns the VM info for the client.
// onExit runs once the VM is gone (before waiters are released).
func (srv *Server) startVM(s *session, a api.StartVMArgs, onExit func(api.VMExit)) (*vmHandle, api.VMInfo, error) {
	h := srv.vmHost
	if h == nil || h.QEMU == "" {
		return nil, api.VMInfo{}, fmt.Errorf("start VM: no VM backend on this host: %w", api.ErrUnavailable)
	}
	clientKey, err := parseClientKey(a.ClientKey)
	if err != nil {
		return nil, api.VMInfo{}, err
	}
	cpus, mem, timeout, err := vmLimits(a, hostLimits())
	if err != nil {
		return nil, api.VMInfo{}, err
	}
	arts, err := openArtifacts(srv.cfg, a.Image)
	if err != nil {
		if errors.Is(err, ErrUnsafeArtifact) {
			srv.log.Error("refusing unsafe VM artifact", "session", s.ID, "err", err)
			err = fmt.Errorf("%w: %w", api.ErrUnavailable, err)
		}
		return nil, api.VMInfo{}, err
	}
	defer arts.Close()
	hostKeyPEM, hostPub, err := newHostKey()
	if err != nil {
		return nil, api.VMInfo{}, err
	}
	gcfg := guestcfg.Config{HostKey: hostKeyPEM, AuthorizedKey: clientKey, UID: int(s.Owner), GID: int(s.gid)}
	// The network, when asked for: policy first (refusals create nothing), then tap, nft
	// and DNS proxy. Without a profile the VM has no network device at all.
	eg, err := srv.startEgress(s, a)
	if err != nil {
		return nil, api.VMInfo{}, err
	}
	egressKept := false
	defer func() {
		if eg != nil && !egressKept {
			srv.egress.Stop(s.ID)
		}
	}()
	if eg != nil {
		gcfg.Net = &guestcfg.Net{Address: netip.PrefixFrom(eg.addrs.Guest4, 30), Gateway: eg.addrs.Host4,
			DNS: []netip.Addr{eg.addrs.Host4}}
		if eg.v6 {
			gcfg.Net.Address6, gcfg.Net.Gateway6 = netip.PrefixFrom(eg.addrs.Guest6, 126), eg.addrs.Host6
			gcfg.Net.DNS = append(gcfg.Net.DNS, eg.addrs.Host6)
		}
	}
	if gcfg, err = gcfg.Normalize(); err != nil {
		return nil, api.VMInfo{}, fmt.Errorf("guest config of session %s: %w", s.ID, err)
	}

	runDir, dirf, err := makeRunDir(srv.cfg.RuntimeDir, s.ID)
	if err != nil {
		return nil, api.VMInfo{}, err
	}
	defer dirf.Close()
	ok := false
	defer func() {
		if !ok {
			removeRunDir(runDir)
		}
	}()
	initrd, err := writeSessionInitrd(arts.Initrd, dirf, runDir, gcfg, s.Owner, s.gid)
	if err != nil {
		return nil, api.VMInfo{}, err
	}
	defer initrd.Close()
	// The run directory is the owner's from here on: QEMU creates its SSH socket in it.
	if err := unix.Fchown(int(dirf.Fd()), int(s.Owner), int(s.gid)); err != nil {
		return nil, api.VMInfo{}, &os.PathError{Op: "chown", Path: runDir, Err: err}
	}

	if srv.spawner == nil {
		return nil, api.VMInfo{}, fmt.Errorf("start VM: no runner spawner: %w", api.ErrUnavailable)
	}
	groups := []uint32{}
	if h.Accel == sandbox.AccelKVM && h.KVMGID >= 0 {
		groups = append(groups, uint32(h.KVMGID))
	}
	hs, rs, err := socketpair()
	if err != nil {
		return nil, api.VMInfo{}, err
	}
	defer rs.Close()
	logR, logW, err := os.Pipe()
	if err != nil {
		hs.Close()
		return nil, api.VMInfo{}, fmt.Errorf("runner log pipe: %w", err)
	}
	defer logW.Close()
	vh := &vmHandle{
		id: s.ID, log: srv.log.With("session", s.ID), conn: api.NewConn(hs), runDir: runDir, spawner: srv.spawner,
		attached: make(chan attachResult, 1), started: make(chan runnerEvent, 1), done: make(chan struct{}),
		onExit: onExit,
	}
	if eg != nil {
		vh.egress = srv.egress
	}
	pid, pidfd, err := srv.spawner.Spawn(spawnRequest{UID: s.Owner, GID: s.gid, Groups: groups},
		[]*os.File{logW, rs, s.share, dirf, arts.Kernel, initrd, arts.Image})
	if err != nil {
		hs.Close()
		logR.Close()
		return nil, api.VMInfo{}, fmt.Errorf("start VM of session %s: %w", s.ID, err)
	}
	vh.pid, vh.runnerPidfd = pid, pidfd
	rs.Close()
	logW.Close()
	go vh.logLines(logR)
	rcfg := runnerConfig{
		Session: s.ID, QEMU: h.QEMU, Accel: h.Accel, CPUs: cpus, MemoryMiB: mem, TimeoutSec: int(timeout / time.Second),
	}
	var cfgFiles []*os.File
	if eg != nil && eg.TapFile() != nil {
		rcfg.Tap, cfgFiles = true, []*os.File{eg.TapFile()}
	}
	cfgMsg, _ := json.Marshal(rcfg)
	go vh.readEvents(timeout) // from here on it owns the control socket and the pidfds
	if err := vh.conn.WriteFrame(cfgMsg, cfgFiles...); err != nil {
		vh.kill()
		<-vh.done
		return nil, api.VMInfo{}, fmt.Errorf("send runner config: %w: %w", ErrRunner, err)
	}
	select {
	case ev := <-vh.started:
		if ev.Event != evStarted {
			<-vh.done
			return nil, api.VMInfo{}, fmt.Errorf("start VM of session %s: %w: %s", s.ID, ErrRunner, ev.Detail)
		}
		vh.vmmPid = ev.Pid
	case <-time.After(runnerStartTimeout):
		vh.kill()
		<-vh.done
		return nil, api.VMInfo{}, fmt.Errorf("start VM of session %s: runner silent for %v: %w", s.ID, runnerStartTimeout, ErrRunner)
	}
	ok, egressKept = true, true
	if eg != nil {
		eg.closeTapFile() // the runner (and QEMU) hold it now
	}
	vh.log.Info("audit: VM started", "uid", s.Owner, "runner", vh.pid, "vmm", vh.vmmPid,
		"accel", h.Accel, "cpus", cpus, "memory_mib", mem, "timeout", timeout, "image", a.Image, "kernel", arts.Release)
	info := api.VMInfo{
		HostKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostPub))),
		Accel:   h.Accel, Warning: h.Warning, Backend: "qemu",
	}
	if eg != nil {
		ei := eg.info
		info.Egress = &ei
	}
	return vh, info, nil
}

// readEvents reads runner events until the control socket closes, then reaps the runner
// and records how the VM ended. timeout is the VM's lifetime: the runner enforces it;
// the helper kills a runner that overstays it by runnerTimeoutSlack.
func (v *vmHandle) readEvents(timeout time.Duration) {
	backstop := time.AfterFunc(timeout+runnerTimeoutSlack, func() {
		v.log.Warn("runner overstayed the VM timeout, killing it")
		v.kill()
	})
	defer backstop.Stop()
	exit := api.VMExit{Outcome: api.OutcomeFailed, Detail: "runner exited without reporting"}
	startedSent, startedOK := false, false
	for {
		body, files, err := v.conn.ReadFrame()
		if err != nil {
			closeFiles(files)
			break
		}
		var ev runnerEvent
		if err := json.Unmarshal(body, &ev); err != nil {
			closeFiles(files)
			v.log.Warn("bad runner event", "err", err)
			continue
		}
		switch ev.Event {
		case evStarted, evError:
			if ev.Event == evStarted && len(files) == 1 && v.vmmPidfd == nil {
				v.pidMu.Lock()
				v.vmmPidfd = files[0]
				v.pidMu.Unlock()
				files = nil
			}
			if !startedSent {
				startedSent, startedOK = true, ev.Event == evStarted
				v.started <- ev
			}
			closeFiles(files)
			if ev.Event == evError {
				exit.Detail = ev.Detail
			}
		case evAttached:
			r := attachResult{err: fmt.Errorf("attach session %s: %w: %s", v.id, ErrRunner, ev.Detail)}
			if len(files) == 1 && ev.Detail == "" {
				r = attachResult{f: files[0]}
				if err := checkStreamSocket(files[0]); err != nil {
					files[0].Close()
					r = attachResult{err: fmt.Errorf("attach session %s: %w", v.id, err)}
				}
			} else {
				closeFiles(files)
			}
			select {
			case v.attached <- r:
			default:
				if r.f != nil {
					r.f.Close()
				}
			}
		case evExit:
			closeFiles(files)
			exit = api.VMExit{Outcome: ev.Outcome, Detail: ev.Detail, ConsoleTail: ev.ConsoleTail}
		default:
			closeFiles(files)
		}
	}
	// EOF: the runner is exiting (QEMU never holds the control socket). Wait until the
	// runner and QEMU are really gone (their pidfds turn readable), killing what lingers.
	v.conn.Close()
	v.reapPidfd(&v.runnerPidfd, "runner")
	v.reapPidfd(&v.vmmPidfd, "VMM")
	if !startedSent {
		v.started <- runnerEvent{Event: evError, Detail: exit.Detail}
	}
	removeRunDir(v.runDir)
	if v.egress != nil {
		// The VM is gone: its network goes at once (proxy, chains, sets, conntrack, tap).
		sum, err := v.egress.Stop(v.id)
		if err != nil {
			v.log.Warn("egress teardown", "err", err)
		}
		exit.Egress = sum
	}
	v.exit = exit
	v.log.Info("audit: VM exited", "outcome", exit.Outcome, "detail", exit.Detail)
	if v.onExit != nil && startedOK { // a failed start leaves the session "created"
		v.onExit(exit)
	}
	close(v.done)
	select { // an attach still waiting gets an answer
	case v.attached <- attachResult{err: fmt.Errorf("attach session %s: the VM has exited: %w", v.id, api.ErrState)}:
	default:
	}
}

// logLines copies the runner's stderr into the helper's log.
func (v *vmHandle) logLines(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		v.log.Info("runner", "line", sc.Text())
	}
}

// request sends one request to the runner.
func (v *vmHandle) request(op runnerOp) error {
	v.writeMu.Lock()
	defer v.writeMu.Unlock()
	b, _ := json.Marshal(runnerRequest{Op: op})
	if err := v.conn.WriteFrame(b); err != nil {
		return fmt.Errorf("runner request %s: %w: %w", op, ErrRunner, err)
	}
	return nil
}

// attach asks the runner for a connected stream to the guest's SSH server.
func (v *vmHandle) attach(ctx context.Context) (*os.File, error) {
	v.attachMu.Lock()
	defer v.attachMu.Unlock()
	select {
	case <-v.done:
		return nil, fmt.Errorf("attach session %s: the VM has exited: %w", v.id, api.ErrState)
	default:
	}
	if err := v.request(opAttach); err != nil {
		return nil, err
	}
	select {
	case r := <-v.attached:
		return r.f, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("attach session %s: %w", v.id, ctx.Err())
	case <-time.After(attachTimeout + 5*time.Second):
		return nil, fmt.Errorf("attach session %s: runner did not answer: %w", v.id, ErrRunner)
	}
}

// stop asks the runner to stop the VM and waits until it is reaped; a runner that does
// not finish within runnerStopGrace is killed. Stopping an exited VM does nothing.
func (v *vmHandle) stop() {
	select {
	case <-v.done:
		return
	default:
	}
	if err := v.request(opStop); err != nil {
		v.kill()
	}
	select {
	case <-v.done:
	case <-time.After(runnerStopGrace):
		v.log.Warn("runner did not stop in time, killing it", "grace", runnerStopGrace)
		v.kill()
		<-v.done
	}
}

// kill has the spawner SIGKILL the runner (QEMU follows through its Pdeathsig). The
// helper cannot signal it itself: Landlock's signal scope confines it to its own domain.
func (v *vmHandle) kill() {
	if err := v.spawner.Kill(v.pid); err != nil {
		v.log.Error("kill runner", "pid", v.pid, "err", err)
	}
}

// reapGrace is how long a process may take to exit after its control socket closed (or
// after SIGKILL) before the helper kills it (or gives up waiting).
const reapGrace = 5 * time.Second

// reapPidfd waits until the process of *pf has exited (its pidfd polls readable),
// SIGKILLs it when it lingers past reapGrace, then closes the pidfd.
func (v *vmHandle) reapPidfd(pf **os.File, what string) {
	v.pidMu.Lock()
	f := *pf
	v.pidMu.Unlock()
	if f == nil {
		return
	}
	if !pidfdExited(f, reapGrace) {
		v.log.Warn("process still alive after its runner hung up, killing the runner", "process", what)
		v.kill()
		if !pidfdExited(f, reapGrace) {
			v.log.Error("process survives its runner's SIGKILL", "process", what)
		}
	}
	v.pidMu.Lock()
	*pf = nil
	v.pidMu.Unlock()
	f.Close()
}

// pidfdExited polls a pidfd for up to d and reports whether its process has exited.
func pidfdExited(f *os.File, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(time.Until(deadline)/time.Millisecond))
		if err == unix.EINTR {
			continue
		}
		if n > 0 {
			return true
		}
		if err != nil || time.Now().After(deadline) {
			return false
		}
	}
}

// wait blocks until the VM is gone or ctx ends.
func (v *vmHandle) wait(ctx context.Context) (api.VMExit, error) {
	select {
	case <-v.done:
		return v.exit, nil
	case <-ctx.Done():
		return api.VMExit{}, fmt.Errorf("wait for the VM of session %s: %w", v.id, ctx.Err())
	}
}

// parseClientKey checks that k is exactly one SSH public key in authorized_keys format
// without options and returns it normalized.
func parseClientKey(k string) (string, error) {
	pub, _, opts, rest, err := ssh.ParseAuthorizedKey([]byte(k))
	if err != nil {
		return "", fmt.Errorf("client key: %w: %w", api.ErrBadRequest, err)
	}
	if len(opts) > 0 || len(strings.TrimSpace(string(rest))) > 0 {
		return "", fmt.Errorf("client key: options or more than one key: %w", api.ErrBadRequest)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))), nil
}

// vmLimits applies the defaults, the sandbox.Spec limits and the host's limits to a's
// sizes. Sizes outside the sandbox limits wrap api.ErrBadRequest; sizes within them but
// above what the host has (host, from hostLimits) wrap api.ErrHostResources.
func vmLimits(a api.StartVMArgs, host hostResources) (cpus, memMiB int, timeout time.Duration, err error) {
	cpus, memMiB, timeout = a.CPUs, a.MemoryMiB, time.Duration(a.TimeoutSec)*time.Second
	if cpus == 0 {
		cpus = sandbox.DefaultCPUs
		if host.CPUs > 0 {
			cpus = min(cpus, host.CPUs)
		}
	}
	if memMiB == 0 {
		memMiB = sandbox.DefaultMemoryMiB
	}
	if a.TimeoutSec == 0 {
		timeout = sandbox.DefaultTimeout
	}
	switch {
	case cpus < 1 || cpus > sandbox.MaxCPUs:
		err = fmt.Errorf("cpus %d not in 1..%d: %w", cpus, sandbox.MaxCPUs, api.ErrBadRequest)
	case memMiB < sandbox.MinMemoryMiB || memMiB > sandbox.MaxMemoryMiB:
		err = fmt.Errorf("memory %d MiB not in %d..%d: %w", memMiB, sandbox.MinMemoryMiB, sandbox.MaxMemoryMiB, api.ErrBadRequest)
	case a.TimeoutSec < 0 || timeout > sandbox.DefaultTimeout:
		err = fmt.Errorf("timeout %d s not in 1..%d: %w", a.TimeoutSec, int(sandbox.DefaultTimeout/time.Second), api.ErrBadRequest)
	case host.CPUs > 0 && cpus > host.CPUs:
		err = fmt.Errorf("cpus %d: the host has %d: %w", cpus, host.CPUs, api.ErrHostResources)
	case host.MemoryMiB > 0 && memMiB > host.MemoryMiB:
		err = fmt.Errorf("memory %d MiB: the host has %d MiB: %w", memMiB, host.MemoryMiB, api.ErrHostResources)
	}
	return cpus, memMiB, timeout, err
}

// hostResources is what one VM may use at most on this host; 0 means unknown (no cap).
type hostResources struct {
	CPUs      int // runtime.NumCPU(): the CPUs this process may run on
	MemoryMiB int // physical memory in MiB (sysinfo(2) totalram × mem_unit)
}

// hostLimits reads the host's CPU count and physical memory. A VM with more vCPUs than
// host CPUs boots very slowly under TCG (each vCPU is a thread; a 64-vCPU guest took
// minutes on 2 cores), and more memory than the host has
// ends in the OOM killer.
func hostLimits() hostResources {
	h := hostResources{CPUs: runtime.NumCPU()}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		h.MemoryMiB = int(uint64(si.Totalram) * uint64(si.Unit) >> 20)
	}
	return h
}

// newHostKey generates the guest's per-session ed25519 SSH host key: the private key as
// OpenSSH PEM for the guest config, the public key for VMInfo.
func newHostKey() ([]byte, ssh.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate guest host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "brood guest host key")
	if err != nil {
		return nil, nil, fmt.Errorf("marshal guest host key: %w", err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("guest host public key: %w", err)
	}
	return pem.EncodeToMemory(block), sp, nil
}

// vmRunParent is the directory under the runtime dir holding per-session run dirs.
const vmRunParent = "vm"

// makeRunDir creates <runtimeDir>/vm/<id> (mode 0700, root until the caller hands it to
// the owner) and returns its path and an open descriptor.
func makeRunDir(runtimeDir, id string) (string, *os.File, error) {
	parent := filepath.Join(runtimeDir, vmRunParent)
	if err := EnsureDir(parent); err != nil {
		return "", nil, err
	}
	dir := filepath.Join(parent, id)
	removeRunDir(dir) // a leftover of a previous helper
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("create run dir: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		return "", nil, &os.PathError{Op: "open run dir", Path: dir, Err: err}
	}
	return dir, os.NewFile(uintptr(fd), dir), nil
}

// writeSessionInitrd writes the session initramfs (base + the guest config archive) into
// the run directory as root, hands it to the owner read-only (QEMU reopens it through
// /proc/self/fd, which checks the inode's permissions) and returns it opened.
func writeSessionInitrd(base, dirf *os.File, runDir string, gcfg guestcfg.Config, uid, gid uint32) (*os.File, error) {
	files, err := initramfs.SessionFiles(gcfg)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(runDir, "initrd")
	if err := initramfs.WithSession("/proc/self/fd/"+strconv.Itoa(int(base.Fd())), out, files); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(int(dirf.Fd()), "initrd", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: out, Err: err}
	}
	f := os.NewFile(uintptr(fd), out)
	// chmod while root still owns the file: the unit grants no CAP_FOWNER, so root cannot
	// change the mode of a file it has handed to the user.
	if err := unix.Fchmod(fd, 0o400); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "chmod", Path: out, Err: err}
	}
	if err := unix.Fchown(fd, int(uid), int(gid)); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "chown", Path: out, Err: err}
	}
	return f, nil
}

// removeRunDir removes a per-session run directory whatever its owner left in it: the
// directory (and any directory below, at most runDirDepth deep) is first given back to
// root through its descriptor (CAP_CHOWN; the helper has no CAP_DAC_OVERRIDE), and
// nothing is followed through a symlink. Errors are ignored: it is cleanup.
func removeRunDir(dir string) {
	pfd, err := unix.Open(filepath.Dir(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(pfd)
	removeAt(pfd, filepath.Base(dir), 0)
}

// runDirDepth bounds removeAt's recursion into a directory tree its owner made.
const runDirDepth = 8

func removeAt(parent int, name string, depth int) {
	if unix.Unlinkat(parent, name, 0) == nil {
		return
	}
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	_ = unix.Fchown(fd, 0, 0)
	_ = unix.Fchmod(fd, 0o700)
	if depth < runDirDepth {
		names, _ := f.Readdirnames(-1)
		for _, n := range names {
			removeAt(fd, n, depth+1)
		}
	}
	_ = unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
}

// socketpair returns the two ends of a Unix stream socketpair: the helper's as a
// *net.UnixConn, the runner's as an *os.File to pass with ExtraFiles.
func socketpair() (*net.UnixConn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	hf := os.NewFile(uintptr(fds[0]), "runner-control")
	defer hf.Close()
	nc, err := net.FileConn(hf)
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("runner control socket: %w", err)
	}
	return nc.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "runner-control"), nil
}

// checkStreamSocket requires f to be a connected Unix stream socket.
func checkStreamSocket(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return os.NewSyscallError("fstat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("runner returned a non-socket descriptor (mode %#o): %w", st.Mode, ErrRunner)
	}
	typ, err := unix.GetsockoptInt(int(f.Fd()), unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil || typ != unix.SOCK_STREAM {
		return fmt.Errorf("runner returned a socket of type %d: %w", typ, ErrRunner)
	}
	return nil
}

// lookupKVMGID returns the gid of group "kvm", or -1.
func lookupKVMGID() int {
	g, err := user.LookupGroup("kvm")
	if err != nil {
		return -1
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return -1
	}
	return gid
}

// CleanupRunDirs removes every per-session run directory under <runtimeDir>/vm (left by
// a crashed helper: at startup no session exists) and returns their names. A missing
// directory is not an error.
func CleanupRunDirs(runtimeDir string) ([]string, error) {
	parent := filepath.Join(runtimeDir, vmRunParent)
	pfd, err := unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, &os.PathError{Op: "open run dirs", Path: parent, Err: err}
	}
	f := os.NewFile(uintptr(pfd), parent)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list run dirs %s: %w", parent, err)
	}
	var removed []string
	for _, n := range names {
		removeAt(pfd, n, 0)
		removed = append(removed, n)
	}
	return removed, nil
}

// vmmDir is the directory under the runtime dir holding the execute-only VMM copy.
const vmmDir = "vmm"

// ExecOnlyCopy copies the VMM binary src (<prefix>/bin/NAME) to dir/bin/NAME with mode
// 0711 and returns the copy's path. Why: exec resets a process's dumpable flag, so QEMU
// would be ptrace-able by the user it runs as (and its /dev/kvm descriptor theirs to
// use) even though its runner is not; but the kernel keeps a process non-dumpable when
// it execs a file it cannot read (fs/exec.c, would_dump → BINPRM_FLAGS_ENFORCE_NONDUMP,
// with fs.suid_dumpable = 0). ELF binaries run without read permission.
//
// QEMU finds its modules and firmware relative to its executable (a relocatable build:
// ../lib/<triplet>/qemu, ../share/qemu), so dir gets symlinks lib, libexec and share to
// <prefix>'s (dir is created root-owned 0755, everything in it is replaced).
func ExecOnlyCopy(src, dir string) (string, error) {
	bin := filepath.Dir(src)
	if filepath.Base(bin) != "bin" {
		return "", fmt.Errorf("copy VMM %s: not in a <prefix>/bin directory", src)
	}
	prefix := filepath.Dir(bin)
	if err := EnsureDir(dir); err != nil {
		return "", err
	}
	if err := EnsureDir(filepath.Join(dir, "bin")); err != nil {
		return "", err
	}
	for _, d := range []string{"lib", "libexec", "share"} {
		link := filepath.Join(dir, d)
		os.Remove(link)
		if err := os.Symlink(filepath.Join(prefix, d), link); err != nil {
			return "", fmt.Errorf("copy VMM: %w", err)
		}
	}
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("copy VMM: %w", err)
	}
	defer in.Close()
	dst := filepath.Join(dir, "bin", filepath.Base(src))
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-vmm-")
	if err != nil {
		return "", fmt.Errorf("copy VMM: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return "", fmt.Errorf("copy VMM %s: %w", src, err)
	}
	if err := tmp.Chmod(0o711); err != nil {
		tmp.Close()
		return "", fmt.Errorf("copy VMM: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("copy VMM: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("copy VMM: %w", err)
	}
	return dst, nil
}
