package runner

import (
	"fmt"
	"log/slog"

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
// rules: every TCP bind and connect is denied; abstract unix sockets are scoped (signals
// are not: see confine).
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

// confine sets no_new_privs on every thread and applies Rules: strictly at the pinned ABI
// (landlockabi.Pinned), best effort below it (logged).
//
// The signal scope is left out: before Landlock ABI 8 (LANDLOCK_RESTRICT_SELF_TSYNC) a Go
// process restricts each OS thread separately, so every thread gets its own sibling
// domain, and a signal from one thread to a child forked by another (the runner killing
// the VMM on timeout or stop) fails with EPERM (measured on 6.18, ABI 7). The VMM runs as
// the same user as everything it could signal, so the scope would not protect much.
func confine(log *slog.Logger, cfg Config) error {
	if err := llsys.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	abi, _ := landlockabi.Kernel()
	llcfg := landlockabi.Config
	llcfg.Scoped &^= llsys.ScopeSignal
	if abi < landlockabi.Pinned {
		log.Warn("landlock: runner confinement DEGRADED", "kernel_abi", abi, "pinned_abi", landlockabi.Pinned)
		llcfg = llcfg.BestEffort()
	}
	if err := llcfg.Restrict(Rules(cfg.Accel, cfg.VMM)...); err != nil {
		return fmt.Errorf("landlock restrict runner: %w", err)
	}
	return nil
}
