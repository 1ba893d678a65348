package helper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/qemu"
)

// attachTimeout bounds how long a runner waits for the VMM's SSH socket to accept.
const attachTimeout = 30 * time.Second

// runnerMain is `broodd-helper vm-run`: one VM runner, started by the helper with the
// session owner's uid/gid and descriptors 3..8 (runnerFD*). It logs to stderr (a pipe
// the helper reads) and reports to the helper on the control socket only.
func runnerMain(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if len(args) != 0 {
		log.Error("vm-run takes no arguments", "args", args)
		return 2
	}
	if err := runRunner(log); err != nil {
		log.Error("vm-run failed", "err", err)
		return 1
	}
	return 0
}

// runRunner is the runner's linear sequence: not dumpable → check descriptors → read the
// config → no_new_privs + Landlock → start the VMM → serve requests until it is gone.
func runRunner(log *slog.Logger) error {
	// 1. Not dumpable: the user whose uid this is cannot ptrace the runner or open its
	// /proc/<pid>/fd. (Exec resets dumpability: QEMU is dumpable again.)
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return os.NewSyscallError("prctl(PR_SET_DUMPABLE)", err)
	}
	// 2. Descriptors: exactly 0..8 are expected; anything above is made close-on-exec so
	// the VMM never inherits it.
	if err := unix.CloseRange(runnerFDControl+runnerFDCount, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return os.NewSyscallError("close_range", err)
	}
	for fd, typ := range map[int]uint32{
		runnerFDControl: unix.S_IFSOCK, runnerFDShare: unix.S_IFDIR, runnerFDRunDir: unix.S_IFDIR,
		runnerFDKernel: unix.S_IFREG, runnerFDInitrd: unix.S_IFREG, runnerFDImage: unix.S_IFREG,
	} {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("runner descriptor %d: %w", fd, os.NewSyscallError("fstat", err))
		}
		if st.Mode&unix.S_IFMT != typ {
			return fmt.Errorf("runner descriptor %d has type %#o, want %#o: %w", fd, st.Mode&unix.S_IFMT, typ, ErrRunner)
		}
	}
	cf := os.NewFile(runnerFDControl, "control")
	nc, err := net.FileConn(cf) // a close-on-exec duplicate
	cf.Close()
	if err != nil {
		return fmt.Errorf("runner control socket: %w", err)
	}
	ctrl := &runnerCtrl{conn: api.NewConn(nc.(*net.UnixConn))}
	defer ctrl.conn.Close()

	// 3. The config.
	body, files, err := ctrl.conn.ReadFrame()
	if err != nil {
		closeFiles(files)
		return fmt.Errorf("read runner config: %w", err)
	}
	var cfg runnerConfig
	if err := api.DecodeArgs(body, &cfg); err != nil {
		closeFiles(files)
		return fmt.Errorf("runner config: %w", err)
	}
	// The tap, when the VM has a network: exactly one character device (/dev/net/tun).
	var tap *os.File
	if cfg.Tap {
		if len(files) != 1 || checkCharDevice(files[0]) != nil {
			closeFiles(files)
			return fmt.Errorf("runner config: tap descriptor missing or not a character device: %w", ErrRunner)
		}
		tap = files[0]
		defer tap.Close()
	} else {
		closeFiles(files)
	}
	vm, err := startRunnerVM(log, cfg, tap)
	if err != nil {
		ctrl.send(runnerEvent{Event: evError, Detail: err.Error()})
		return err
	}
	// QEMU's pidfd lets the helper know for sure when the VMM is gone (and kill it
	// without trusting a pid). The backend may already have reaped a QEMU that died at
	// once: then there is nothing to wait for.
	if qfd, err := unix.PidfdOpen(vm.Pid(), 0); err == nil {
		qf := os.NewFile(uintptr(qfd), "vmm-pidfd")
		ctrl.send(runnerEvent{Event: evStarted, Pid: vm.Pid()}, qf)
		qf.Close()
	} else {
		ctrl.send(runnerEvent{Event: evStarted, Pid: vm.Pid()})
	}
	log.Info("VMM started", "session", cfg.Session, "pid", vm.Pid(), "accel", cfg.Accel)

	// 4. Requests until the helper hangs up (then the VM is stopped: its owner is gone).
	var stopped sync.Once
	stop := func() { stopped.Do(func() { vm.Stop() }) }
	var stopRequested bool
	var mu sync.Mutex
	go func() {
		for {
			body, files, err := ctrl.conn.ReadFrame()
			closeFiles(files)
			if err != nil {
				mu.Lock()
				stopRequested = true
				mu.Unlock()
				stop()
				return
			}
			var req runnerRequest
			if err := api.DecodeArgs(body, &req); err != nil {
				log.Warn("bad runner request", "err", err)
				continue
			}
			switch req.Op {
			case opAttach:
				ctrl.attach()
			case opStop:
				mu.Lock()
				stopRequested = true
				mu.Unlock()
				stop()
			}
		}
	}()

	// 5. The VMM is gone: report how it ended.
	werr := vm.Wait(context.Background())
	ev := runnerEvent{Event: evExit, ConsoleTail: tail(vm.ConsoleLog(), consoleTailMax)}
	mu.Lock()
	byStop := stopRequested
	mu.Unlock()
	switch {
	case werr == nil && byStop:
		ev.Outcome = api.OutcomeStopped
	case werr == nil:
		ev.Outcome = api.OutcomePoweroff
	case errors.Is(werr, sandbox.ErrTimeout):
		ev.Outcome, ev.Detail = api.OutcomeTimeout, werr.Error()
	default:
		ev.Outcome, ev.Detail = api.OutcomeFailed, werr.Error()
	}
	unix.Unlinkat(runnerFDRunDir, sshSocketName, 0)
	ctrl.send(ev)
	log.Info("VMM exited", "session", cfg.Session, "outcome", ev.Outcome, "detail", ev.Detail)
	return nil
}

// startRunnerVM confines the runner and starts the VMM for cfg.
func startRunnerVM(log *slog.Logger, cfg runnerConfig, tap *os.File) (sandbox.VM, error) {
	if err := confineRunner(log, cfg); err != nil {
		return nil, err
	}
	spec := sandbox.Spec{
		CPUs:        cfg.CPUs,
		MemoryMiB:   cfg.MemoryMiB,
		Kernel:      fdPath(runnerFDKernel),
		Initrd:      fdPath(runnerFDInitrd),
		RootfsImage: fdPath(runnerFDImage),
		ShareDir:    fdPath(runnerFDShare),
		SSHSocket:   fdPath(runnerFDRunDir) + "/" + sshSocketName,
		Timeout:     time.Duration(cfg.TimeoutSec) * time.Second,
		Accel:       cfg.Accel,
		Tap:         tap,
	}
	b := &qemu.Backend{Path: cfg.QEMU}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vm, err := b.Start(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("start VMM for session %s: %w", cfg.Session, err)
	}
	return vm, nil
}

// fdPath is the path through which a process reopens its own descriptor fd (the Spec
// convention for runners, sandbox.go). QEMU inherits descriptors 4..8, so the same path
// names the same file in QEMU.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// runnerSystemRO are the system paths the runner and QEMU read and execute: the QEMU
// binary, its libraries and firmware (qboot.rom under /usr/share/qemu), the dynamic
// linker cache, and /proc (the /proc/self/fd paths, /proc/cpuinfo for the TSC rate).
var runnerSystemRO = []string{"/usr", "/lib", "/lib64", "/bin", "/sbin"}

// RunnerRules is the runner's Landlock ruleset: read/execute of runnerSystemRO and /proc,
// read of the boot artifacts, read-write of the share and the run directory, /dev/null
// and /dev/urandom (QEMU's virtio-rng), and /dev/kvm only under KVM. No network rules:
// every TCP bind and connect is denied; abstract unix sockets are scoped (signals are
// not: see confineRunner).
func RunnerRules(accel sandbox.Accel, qemuPath string) []landlock.Rule {
	r := []landlock.Rule{
		landlock.RODirs(runnerSystemRO...).IgnoreIfMissing(),
		landlock.ROFiles(qemuPath), // the execute-only copy (ExecOnlyCopy) lives in the runtime dir
		landlock.ROFiles("/etc/ld.so.cache").IgnoreIfMissing(),
		landlock.RODirs("/proc"),
		landlock.RWFiles("/dev/null"),
		landlock.ROFiles("/dev/urandom"),
		landlock.ROFiles(fdPath(runnerFDKernel), fdPath(runnerFDInitrd), fdPath(runnerFDImage)),
		landlock.RWDirs(fdPath(runnerFDShare)).WithRefer(),
		landlock.RWDirs(fdPath(runnerFDRunDir)),
	}
	if accel == sandbox.AccelKVM {
		r = append(r, landlock.RWFiles("/dev/kvm").WithIoctlDev())
	}
	return r
}

// confineRunner sets no_new_privs on every thread and applies RunnerRules: strictly at
// the pinned ABI, best effort below it (logged).
//
// The signal scope is left out: before Landlock ABI 8 (LANDLOCK_RESTRICT_SELF_TSYNC) a Go
// process restricts each OS thread separately, so every thread gets its own sibling
// domain, and a signal from one thread to a child forked by another (the runner killing
// QEMU on timeout or stop) fails with EPERM (measured on 6.18, ABI 7). QEMU runs as the
// same user as everything it could signal, so the scope would not protect much.
func confineRunner(log *slog.Logger, cfg runnerConfig) error {
	if err := llsys.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	abi, _ := landlockABI()
	llcfg := pinnedConfig
	llcfg.Scoped &^= llsys.ScopeSignal
	if abi < PinnedABI {
		log.Warn("landlock: runner confinement DEGRADED", "kernel_abi", abi, "pinned_abi", PinnedABI)
		llcfg = llcfg.BestEffort()
	}
	if err := llcfg.Restrict(RunnerRules(cfg.Accel, cfg.QEMU)...); err != nil {
		return fmt.Errorf("landlock restrict runner: %w", err)
	}
	return nil
}

// runnerCtrl is the runner's end of the control socket; writes are serialized.
type runnerCtrl struct {
	mu   sync.Mutex
	conn *api.Conn
}

func (c *runnerCtrl) send(ev runnerEvent, files ...*os.File) {
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn.WriteFrame(b, files...)
}

// attach connects to the VMM's SSH socket (retrying until QEMU has created it) and sends
// the connected descriptor to the helper.
func (c *runnerCtrl) attach() {
	path := fdPath(runnerFDRunDir) + "/" + sshSocketName
	deadline := time.Now().Add(attachTimeout)
	for {
		uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err == nil {
			f, ferr := uc.File()
			uc.Close()
			if ferr != nil {
				c.send(runnerEvent{Event: evAttached, Detail: ferr.Error()})
				return
			}
			c.send(runnerEvent{Event: evAttached}, f)
			f.Close()
			return
		}
		if time.Now().After(deadline) {
			c.send(runnerEvent{Event: evAttached, Detail: fmt.Sprintf("connect to the VMM's SSH socket: %v", err)})
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tail returns the last n bytes of b as a string.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// checkCharDevice reports whether f is a character device (the tap's /dev/net/tun queue).
func checkCharDevice(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return os.NewSyscallError("fstat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return fmt.Errorf("descriptor has type %#o, want a character device: %w", st.Mode&unix.S_IFMT, ErrRunner)
	}
	return nil
}
