// Package sandbox defines how brood runs a disposable microVM: the VM Spec value, the
// Backend interface that turns a Spec into a running VM, and the capabilities a backend
// reports from Probe (accelerator and why).
//
// Subpackages hold the pieces: qemu (the QEMU microvm backend), kernel (the Debian guest
// kernel, fetched and unpacked once per version), initramfs (brood-guest plus the few
// modules it needs), image (read-only rootfs images) and guest (brood-guest, PID 1 in the
// VM).
//
// A Spec names host paths only. A runner that received file descriptors instead (the
// helper's `vm-run`) passes "/proc/self/fd/N" paths for them; the tap is always passed as
// an open *os.File.
//
// Privilege: none; interfaces and values, linked into brood and broodd-helper.
package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Accel is the CPU virtualization a backend uses for a VM.
type Accel string

// Accelerators.
const (
	AccelKVM Accel = "kvm" // Linux KVM: hardware virtualization
	AccelTCG Accel = "tcg" // QEMU's portable instruction translator (10-20x slower CPU)
	AccelHVF Accel = "hvf" // macOS Hypervisor.framework
)

// Capabilities is what Backend.Probe found on this host.
type Capabilities struct {
	Backend string // backend name, e.g. "qemu"
	Version string // VMM version line, e.g. "QEMU emulator version 7.2.19"
	Accel   Accel  // the accelerator Start will use
	// Reason explains the accelerator choice in one sentence for `brood doctor`, e.g.
	// why KVM was not usable. Never empty.
	Reason string
	// Warning is non-empty when the choice degrades the session (TCG): callers print it
	// loudly before booting.
	Warning string
}

// Backend starts VMs. Implementations: qemu.Backend (and later krun).
type Backend interface {
	// Name is the backend's short name ("qemu").
	Name() string
	// Probe inspects the host and reports the capabilities Start will use. It returns
	// an error wrapping ErrUnavailable when the backend cannot run at all.
	Probe(ctx context.Context) (Capabilities, error)
	// Start validates spec and boots the VM. The VM runs until the guest powers off,
	// Stop is called, or spec.Timeout passes. ctx bounds only the start itself.
	Start(ctx context.Context, spec Spec) (VM, error)
}

// VM is one running microVM.
type VM interface {
	// Wait blocks until the VMM process is gone. It returns nil when the guest powered
	// off cleanly, an error wrapping ErrTimeout when Spec.Timeout passed or ctx ended
	// (the VMM is killed first), ErrVMFailed on any other abnormal exit. Wait may be
	// called more than once and from several goroutines.
	Wait(ctx context.Context) error
	// Stop kills the VMM (graceful signal, then SIGKILL after a grace period) and waits
	// for it. Stopping a VM that already exited is not an error.
	Stop() error
	// ConsoleLog returns the guest's serial console output so far (the last
	// ConsoleLogMax bytes).
	ConsoleLog() []byte
	// Pid is the VMM's process id, for logs and tests only.
	Pid() int
}

// ConsoleLogMax is how many bytes of serial console output a VM keeps (the tail).
const ConsoleLogMax = 1 << 20

// Spec describes one VM. Build it with NewSpec and the With... helpers or as a literal,
// then Validate; backends build their command line from it with pure functions.
type Spec struct {
	CPUs      int    // vCPUs, 1..MaxCPUs
	MemoryMiB int    // guest RAM in MiB, MinMemoryMiB..MaxMemoryMiB
	Kernel    string // uncompressed (PVH) vmlinux or bzImage path
	Initrd    string // initramfs path (brood-guest is /init)
	// Cmdline holds the kernel command line words. Backends add their own words
	// (console, time, tsc_early_khz) to a copy.
	Cmdline []string
	// RootfsImage is the read-only root filesystem image (erofs, see package image); attached as a
	// read-only virtio-blk disk, the guest sees it as /dev/vda. Empty means no disk.
	RootfsImage string
	// ShareDir is the host directory the guest mounts read-write at /workspace over
	// 9p (the snapshot S, never the workspace W). Empty means no share.
	ShareDir string
	// SSHSocket is the host unix socket path the VMM listens on for the guest's SSH
	// channel (virtio-serial port SSHPortName). Required.
	SSHSocket string
	// Tap is an open tap device (IFF_TAP|IFF_NO_PI|IFF_VNET_HDR) for the guest's eth0.
	// nil means the VM has no network device at all.
	Tap *os.File
	// MAC is the guest NIC's MAC address when Tap is set; empty means DefaultMAC.
	MAC string
	// Timeout bounds the VM's whole life; after it the VMM is killed and Wait returns
	// ErrTimeout. Required (> 0): a hung guest must never hang brood.
	Timeout time.Duration
	// Accel overrides the probed accelerator when non-empty.
	Accel Accel
}

// Limits and defaults of a Spec.
const (
	DefaultCPUs      = 2
	MaxCPUs          = 64
	DefaultMemoryMiB = 1024
	MinMemoryMiB     = 128 // the Debian kernel plus brood-guest need ~100 MiB
	MaxMemoryMiB     = 256 << 10
	DefaultTimeout   = 8 * time.Hour
	// DefaultMAC is the guest NIC's MAC in QEMU's locally administered 52:54:00 range.
	DefaultMAC = "52:54:00:62:72:64"
	// ShareTag is the 9p mount tag of the workspace share.
	ShareTag = "workspace"
	// SSHPortName is the virtio-serial port name the guest's SSH server listens on.
	SSHPortName = "brood.ssh"
)

// NewSpec returns a Spec with default CPUs, memory and timeout for the given kernel,
// initramfs, SSH socket path and share.
func NewSpec(kernel, initrd, sshSocket, shareDir string) Spec {
	return Spec{
		CPUs:      DefaultCPUs,
		MemoryMiB: DefaultMemoryMiB,
		Kernel:    kernel,
		Initrd:    initrd,
		SSHSocket: sshSocket,
		ShareDir:  shareDir,
		Timeout:   DefaultTimeout,
	}
}

// specCheck is one validation rule of a Spec.
type specCheck func(Spec) error

var specChecks = []specCheck{
	func(s Spec) error {
		if s.CPUs < 1 || s.CPUs > MaxCPUs {
			return fmt.Errorf("cpus %d not in 1..%d", s.CPUs, MaxCPUs)
		}
		return nil
	},
	func(s Spec) error {
		if s.MemoryMiB < MinMemoryMiB || s.MemoryMiB > MaxMemoryMiB {
			return fmt.Errorf("memory %d MiB not in %d..%d", s.MemoryMiB, MinMemoryMiB, MaxMemoryMiB)
		}
		return nil
	},
	func(s Spec) error { return absPath("kernel", s.Kernel, true) },
	func(s Spec) error { return absPath("initrd", s.Initrd, true) },
	func(s Spec) error { return absPath("rootfs image", s.RootfsImage, false) },
	func(s Spec) error { return absPath("share dir", s.ShareDir, false) },
	func(s Spec) error { return absPath("ssh socket", s.SSHSocket, true) },
	func(s Spec) error {
		if s.Timeout <= 0 {
			return fmt.Errorf("timeout %v must be positive", s.Timeout)
		}
		return nil
	},
	func(s Spec) error {
		switch s.Accel {
		case "", AccelKVM, AccelTCG, AccelHVF:
			return nil
		}
		return fmt.Errorf("unknown accel %q", s.Accel)
	},
	func(s Spec) error {
		for _, w := range s.Cmdline {
			if w == "" || strings.ContainsAny(w, " \t\n\"") {
				return fmt.Errorf("kernel cmdline word %q is empty or has blanks or quotes", w)
			}
		}
		return nil
	},
}

// absPath checks that p is absolute, clean and free of the ',' that QEMU option
// parsing would split on.
func absPath(what, p string, required bool) error {
	if p == "" {
		if required {
			return fmt.Errorf("%s path is required", what)
		}
		return nil
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("%s path %q is not absolute and clean", what, p)
	}
	if strings.ContainsAny(p, ",\n") {
		return fmt.Errorf("%s path %q contains ',' or a newline", what, p)
	}
	return nil
}

// Validate checks every rule and returns the first violation wrapped in ErrInvalidSpec.
func (s Spec) Validate() error {
	for _, c := range specChecks {
		if err := c(s); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
		}
	}
	return nil
}
