package runner

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/landlockabi"
	"brood.dev/brood/sandbox"
)

// systemRO are the system paths the runner and the VMM read and execute: the VMM binary,
// its libraries and firmware (qboot.rom under /usr/share/qemu), the dynamic linker cache,
// and /proc (the /proc/self/fd paths, /proc/cpuinfo for the TSC rate).
var systemRO = []string{"/usr", "/lib", "/lib64", "/bin", "/sbin"}

// Rules is the runner's Landlock ruleset: read/execute of systemRO and /proc, read of the
// VMM binary vmm and the boot artifacts, read-write of the share and the run directory,
// /dev/null and /dev/urandom (QEMU's virtio-rng), and /dev/kvm only under KVM. No network
// rules: every TCP bind and connect is denied; abstract unix sockets and signals are
// scoped (the VMM gets a narrower scope of its own: vmmScopes).
func Rules(accel sandbox.Accel, vmm string) []landlock.Rule {
	r := []landlock.Rule{
		landlock.RODirs(systemRO...).IgnoreIfMissing(),
		landlock.ROFiles(vmm), // the execute-only copy lives in the daemon's runtime dir
		landlock.ROFiles("/etc/ld.so.cache").IgnoreIfMissing(),
		landlock.RODirs("/proc"),
		landlock.RWFiles("/dev/null"),
		landlock.ROFiles("/dev/urandom"),
		landlock.ROFiles(fdPath(FDKernel), fdPath(FDInitrd), fdPath(FDImage)),
		landlock.RWDirs(fdPath(FDShare)).WithRefer(),
		landlock.RWDirs(fdPath(FDRunDir)),
	}
	if accel == sandbox.AccelKVM {
		r = append(r, landlock.RWFiles("/dev/kvm").WithIoctlDev())
	}
	return r
}

// kernelABI reports the kernel's Landlock ABI (a variable so tests can simulate old
// kernels).
var kernelABI = landlockabi.Kernel

// scopeABI is the first Landlock ABI with IPC scoping (LANDLOCK_SCOPE_SIGNAL and
// LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, Linux 6.12; include/uapi/linux/landlock.h).
const scopeABI = 6

// vmmScopes are the Landlock scopes of the VMM's own domain (vmmThreadConfine): it may
// signal no process outside itself (not its runner, not any other process of its uid) and
// connect or send to no abstract unix socket outside itself.
const vmmScopes = llsys.ScopeSignal | llsys.ScopeAbstractUnixSocket

// landlockMode decides the runner's Landlock configuration for a kernel with Landlock
// ABI abi (0: none): the pinned one (landlockabi.Config, with the signal and abstract
// socket scopes) at or above landlockabi.Pinned; below it, with require (the system
// policy's require_landlock) an error, without it the explicit best-effort mode
// (degraded true).
func landlockMode(abi int, require bool) (cfg landlock.Config, degraded bool, err error) {
	cfg = landlockabi.Config
	if abi >= landlockabi.Pinned {
		return cfg, false, nil
	}
	if require {
		return cfg, true, fmt.Errorf("confine runner: kernel Landlock ABI %d is below the pinned ABI %d and require_landlock is set: %w",
			abi, landlockabi.Pinned, ErrRunner)
	}
	return cfg.BestEffort(), true, nil
}

// confine sets no_new_privs on every thread, applies Rules (strictly at the pinned ABI,
// best effort below it when cfg.RequireLandlock is false, logged; refused when it is
// true) and RunnerPolicy on every thread. The ABI is checked before anything is changed.
//
// Signals: before Landlock ABI 8 (LANDLOCK_RESTRICT_SELF_TSYNC) a Go process restricts
// each OS thread separately, so every thread gets its own sibling domain, and with the
// signal scope a signal from one thread to a child forked by another fails with EPERM
// (measured on 6.18, ABI 7). The qemu backend therefore signals the VMM from the thread
// that forked it, whose domain is the VMM's parent; the VMM gets the scope in a domain of
// its own (vmmThreadConfine).
func confine(log *slog.Logger, cfg Config) error {
	abi, _ := kernelABI()
	llcfg, degraded, err := landlockMode(abi, cfg.RequireLandlock)
	if err != nil {
		return err
	}
	if err := llsys.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if degraded {
		log.Warn("landlock: runner confinement DEGRADED", "kernel_abi", abi, "pinned_abi", landlockabi.Pinned)
	}
	if err := llcfg.Restrict(Rules(cfg.Accel, cfg.VMM)...); err != nil {
		return fmt.Errorf("landlock restrict runner: %w", err)
	}
	if err := loadPolicy(RunnerPolicy(), true); err != nil {
		return fmt.Errorf("confine runner: %w", err)
	}
	return nil
}

// vmmThreadConfine returns the qemu.Backend.ConfineVMM of a runner on a kernel with
// Landlock ABI abi: it restricts the calling OS thread only (the thread that forks the
// VMM, which inherits what the thread has) with VMMPolicy and a Landlock domain of its
// own with vmmScopes (no access rights: Rules, inherited, already limit the filesystem).
// Below scopeABI the scopes are skipped (logged), or with require refused.
func vmmThreadConfine(log *slog.Logger, abi int, require bool) func() error {
	return func() error {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return os.NewSyscallError("prctl(PR_SET_NO_NEW_PRIVS)", err)
		}
		if err := loadPolicy(VMMPolicy(), false); err != nil {
			return fmt.Errorf("confine VMM: %w", err)
		}
		switch {
		case abi >= scopeABI:
			return restrictThreadScopes(vmmScopes)
		case require:
			return fmt.Errorf("confine VMM: kernel Landlock ABI %d has no IPC scopes (ABI %d) and require_landlock is set: %w", abi, scopeABI, ErrRunner)
		}
		log.Warn("landlock: VMM signal and abstract-socket scopes DEGRADED (unavailable)", "kernel_abi", abi)
		return nil
	}
}

// restrictThreadScopes enforces a Landlock domain with only the scopes on the calling
// thread (landlock_create_ruleset(2) and landlock_restrict_self(2) without the all-threads
// dance go-landlock does).
func restrictThreadScopes(scopes uint64) error {
	fd, err := llsys.LandlockCreateRuleset(&llsys.RulesetAttr{Scoped: scopes}, 0)
	if err != nil {
		return fmt.Errorf("confine VMM: %w", os.NewSyscallError("landlock_create_ruleset", err))
	}
	defer unix.Close(fd)
	if err := llsys.LandlockRestrictSelf(fd, 0); err != nil {
		return fmt.Errorf("confine VMM: %w", os.NewSyscallError("landlock_restrict_self", err))
	}
	return nil
}
