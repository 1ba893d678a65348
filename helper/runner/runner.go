package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/qemu"
)

// backends are the VM backends a runner can drive, by sandbox.Backend.Name; each builds
// the backend for the VMM binary at vmm, which must run confineVMM on the thread that
// forks the VMM (vmmThreadConfine). A second backend is a new package and one row.
var backends = map[string]func(vmm string, confineVMM func() error) sandbox.Backend{
	"qemu": func(vmm string, confineVMM func() error) sandbox.Backend {
		return &qemu.Backend{Path: vmm, ConfineVMM: confineVMM}
	},
}

// startTimeout bounds the backend's Start (exec of the VMM and its first checks).
const startTimeout = 30 * time.Second

// Main is `broodd-helper vm-run`: one VM runner, started by the spawner with the session
// owner's uid/gid and descriptors 3..8 (FD*). It logs to stderr (a pipe the daemon reads)
// and reports to the daemon on the control socket only. It returns the exit code: 0 once
// the VM's end is reported, 1 on failure, 2 on arguments.
func Main(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if len(args) != 0 {
		log.Error("vm-run takes no arguments", "args", args)
		return 2
	}
	if err := run(log); err != nil {
		log.Error("vm-run failed", "err", err)
		return 1
	}
	return 0
}

// run is the runner's linear sequence, one function per step.
func run(log *slog.Logger) error {
	// 1. Not dumpable: the user whose uid this is cannot ptrace the runner or open its
	// /proc/<pid>/fd. (Exec resets dumpability: the VMM is kept non-dumpable by running
	// from an execute-only copy.)
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return os.NewSyscallError("prctl(PR_SET_DUMPABLE)", err)
	}
	// 2. Descriptors: exactly 0..8, each of its type; the control socket.
	c, err := openControl()
	if err != nil {
		return err
	}
	defer c.conn.Close()
	// 3. The config, and the tap when the VM has a network.
	cfg, tap, err := c.readConfig()
	if err != nil {
		return err
	}
	if tap != nil {
		defer tap.Close()
	}
	// 4. Confine, start the VMM, report it started.
	vm, err := startVM(log, cfg, tap)
	if err != nil {
		c.send(Event{Event: EvError, Detail: err.Error()})
		return err
	}
	c.reportStarted(vm)
	log.Info("VMM started", "session", cfg.Session, "pid", vm.Pid(), "accel", cfg.Accel, "backend", cfg.Backend)
	// 5. Requests until the daemon hangs up (then the VM is stopped: its owner is gone).
	var stopRequested atomic.Bool
	go c.serve(log, vm, &stopRequested)
	// 6. The VMM is gone: report how it ended.
	ev := exitEvent(vm.Wait(context.Background()), stopRequested.Load(), vm.ConsoleLog())
	unix.Unlinkat(FDRunDir, SSHSocketName, 0)
	c.send(ev)
	log.Info("VMM exited", "session", cfg.Session, "outcome", ev.Outcome, "detail", ev.Detail)
	return nil
}

// descriptorTypes are the file types of the runner's descriptors 3..8.
var descriptorTypes = map[int]uint32{
	FDControl: unix.S_IFSOCK, FDShare: unix.S_IFDIR, FDRunDir: unix.S_IFDIR,
	FDKernel: unix.S_IFREG, FDInitrd: unix.S_IFREG, FDImage: unix.S_IFREG,
}

// openControl makes every descriptor above 8 close-on-exec (the VMM never inherits
// one), checks the type of each of 3..8 (errors wrap ErrRunner) and returns the control
// channel on descriptor 3.
func openControl() (*control, error) {
	if err := unix.CloseRange(FDControl+FDCount, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("close_range", err)
	}
	for fd, typ := range descriptorTypes {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, fmt.Errorf("runner descriptor %d: %w", fd, os.NewSyscallError("fstat", err))
		}
		if st.Mode&unix.S_IFMT != typ {
			return nil, fmt.Errorf("runner descriptor %d has type %#o, want %#o: %w", fd, st.Mode&unix.S_IFMT, typ, ErrRunner)
		}
	}
	cf := os.NewFile(FDControl, "control")
	nc, err := net.FileConn(cf) // a close-on-exec duplicate
	cf.Close()
	if err != nil {
		return nil, fmt.Errorf("runner control socket: %w", err)
	}
	return &control{conn: api.NewConn(nc.(*net.UnixConn))}, nil
}

// startVM confines the runner and starts the VMM for cfg through its backend.
func startVM(log *slog.Logger, cfg Config, tap *os.File) (sandbox.VM, error) {
	newBackend, ok := backends[cfg.Backend]
	if !ok {
		return nil, fmt.Errorf("start VMM for session %s: unknown backend %q: %w", cfg.Session, cfg.Backend, ErrRunner)
	}
	if err := confine(log, cfg); err != nil {
		return nil, err
	}
	abi, _ := kernelABI()
	confineVMM := vmmThreadConfine(log, abi, cfg.RequireLandlock)
	spec := sandbox.Spec{
		CPUs:        cfg.CPUs,
		MemoryMiB:   cfg.MemoryMiB,
		Kernel:      fdPath(FDKernel),
		Initrd:      fdPath(FDInitrd),
		RootfsImage: fdPath(FDImage),
		ShareDir:    fdPath(FDShare),
		SSHSocket:   fdPath(FDRunDir) + "/" + SSHSocketName,
		Timeout:     time.Duration(cfg.TimeoutSec) * time.Second,
		Accel:       cfg.Accel,
		Tap:         tap,
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	vm, err := newBackend(cfg.VMM, confineVMM).Start(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("start VMM for session %s: %w", cfg.Session, err)
	}
	return vm, nil
}

// exitEvent is the exit Event of a VM whose Wait returned werr; byStop tells whether the
// daemon asked for the stop (or hung up).
func exitEvent(werr error, byStop bool, console []byte) Event {
	ev := Event{Event: EvExit, ConsoleTail: tail(console, ConsoleTailMax)}
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
	return ev
}

// fdPath is the path through which a process reopens its own descriptor fd (the Spec
// convention for runners, sandbox.go). The VMM inherits descriptors 4..8, so the same
// path names the same file in the VMM.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

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

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// stopOnce stops vm once, whoever asks first.
type stopOnce struct {
	once sync.Once
	vm   sandbox.VM
}

func (s *stopOnce) stop() { s.once.Do(func() { s.vm.Stop() }) }
