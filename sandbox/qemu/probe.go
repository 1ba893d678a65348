package qemu

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/hostexec"
	"brood.dev/brood/sandbox"
)

// KVM ioctls (include/uapi/linux/kvm.h: KVMIO = 0xAE).
const (
	kvmGetAPIVersion = 0xAE00 // _IO(KVMIO, 0x00)
	kvmCreateVM      = 0xAE01 // _IO(KVMIO, 0x01)
	kvmAPIVersion    = 12     // KVM_API_VERSION, stable since Linux 2.6.22
)

// KVMHost is what the probe saw of the host's KVM, the input of ChooseAccel.
type KVMHost struct {
	// Modules holds which of kvm_intel, kvm_amd and kvm_pvm are loaded
	// (/sys/module/NAME exists).
	Modules map[string]bool
	// OpenErr is the error of opening /dev/kvm read-write (nil when it opened).
	OpenErr error
	// APIVersion is KVM_GET_API_VERSION's answer (0 when not asked).
	APIVersion int
	// CreateVMErr is the error of KVM_CREATE_VM (nil when a VM could be created).
	CreateVMErr error
}

// tcgWarning is printed loudly whenever a VM boots under TCG.
const tcgWarning = "WARNING: KVM is not usable, the VM runs under TCG emulation (about 10x slower CPU)"

// ChooseAccel decides between KVM and TCG from what the probe saw, and says why. It
// chooses KVM only when a VM can be created and the host runs a full (VMX/SVM) KVM: a
// host whose only KVM is kvm_pvm (Linux's Pagetable-based Virtual Machine, as on the
// project's cloud machines) runs only PVM-enabled guest kernels, and a stock Debian kernel
// dies before its first printk with "KVM internal error ... emulation failure" on lock
// cmpxchg16b.
func ChooseAccel(h KVMHost) (sandbox.Accel, string) {
	switch {
	case h.OpenErr != nil:
		return sandbox.AccelTCG, fmt.Sprintf("KVM unusable: open /dev/kvm: %v", h.OpenErr)
	case h.APIVersion != kvmAPIVersion:
		return sandbox.AccelTCG, fmt.Sprintf("KVM unusable: /dev/kvm API version %d, want %d", h.APIVersion, kvmAPIVersion)
	case h.CreateVMErr != nil:
		return sandbox.AccelTCG, fmt.Sprintf("KVM unusable: KVM_CREATE_VM: %v", h.CreateVMErr)
	case h.Modules["kvm_intel"] || h.Modules["kvm_amd"]:
		mod := "kvm_intel"
		if h.Modules["kvm_amd"] {
			mod = "kvm_amd"
		}
		return sandbox.AccelKVM, fmt.Sprintf("KVM usable: /dev/kvm creates VMs and %s is loaded", mod)
	case h.Modules["kvm_pvm"]:
		return sandbox.AccelTCG, "KVM unusable: the host's KVM is kvm_pvm (no kvm_intel/kvm_amd), which runs only PVM guest kernels; a stock kernel fails with an emulation error"
	default:
		return sandbox.AccelTCG, "KVM unusable: /dev/kvm creates VMs but neither kvm_intel nor kvm_amd is loaded"
	}
}

// ProbeKVM looks at the host's KVM: loaded modules, /dev/kvm, and whether
// KVM_CREATE_VM works (the VM is closed at once).
func ProbeKVM() KVMHost {
	h := KVMHost{Modules: map[string]bool{}}
	for _, m := range []string{"kvm_intel", "kvm_amd", "kvm_pvm"} {
		if _, err := os.Stat("/sys/module/" + m); err == nil {
			h.Modules[m] = true
		}
	}
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		h.OpenErr = &os.PathError{Op: "open", Path: "/dev/kvm", Err: err}
		return h
	}
	defer unix.Close(fd)
	v, err := unix.IoctlRetInt(fd, kvmGetAPIVersion)
	if err != nil {
		h.CreateVMErr = os.NewSyscallError("ioctl KVM_GET_API_VERSION", err)
		return h
	}
	h.APIVersion = v
	vm, err := unix.IoctlRetInt(fd, kvmCreateVM)
	if err != nil {
		h.CreateVMErr = os.NewSyscallError("ioctl KVM_CREATE_VM", err)
		return h
	}
	unix.Close(vm)
	return h
}

// Probe finds qemu-system-x86_64, asks its version and chooses the accelerator. The
// result is remembered: Start uses it when the Spec names no accelerator.
func (b *Backend) Probe(ctx context.Context) (sandbox.Capabilities, error) {
	path, err := b.binary()
	if err != nil {
		return sandbox.Capabilities{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd, err := hostexec.CommandPath(ctx, Binary, path, "-version")
	if err != nil {
		return sandbox.Capabilities{}, fmt.Errorf("run %s -version: %w: %w", path, err, sandbox.ErrUnavailable)
	}
	out, err := cmd.Output()
	if err != nil {
		return sandbox.Capabilities{}, fmt.Errorf("run %s -version: %w: %w", path, err, sandbox.ErrUnavailable)
	}
	version, _, _ := strings.Cut(string(out), "\n")
	accel, reason := ChooseAccel(b.probeKVM())
	c := sandbox.Capabilities{Backend: b.Name(), Version: strings.TrimSpace(version), Accel: accel, Reason: reason}
	if accel == sandbox.AccelTCG {
		c.Warning = tcgWarning + ": " + reason
	}
	b.mu.Lock()
	b.caps = &c
	b.mu.Unlock()
	return c, nil
}

// binary returns the QEMU path: Backend.Path, or Binary on $PATH.
func (b *Backend) binary() (string, error) {
	if b.Path != "" {
		return b.Path, nil
	}
	p, err := hostexec.LookPath(Binary)
	if err != nil {
		return "", fmt.Errorf("find %s: %w: %w", Binary, err, sandbox.ErrUnavailable)
	}
	return p, nil
}

func (b *Backend) probeKVM() KVMHost {
	if b.ProbeKVM != nil {
		return b.ProbeKVM()
	}
	return ProbeKVM()
}
