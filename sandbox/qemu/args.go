package qemu

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"brood.dev/brood/sandbox"
)

// Binary is the QEMU system emulator brood runs on x86-64 hosts.
const Binary = "qemu-system-x86_64"

// Sandbox is QEMU's own seccomp filter: deny obsolete syscalls, setuid/setgid and
// friends, fork/exec, and scheduler/cgroup changes (qemu-options.hx, "-sandbox").
const Sandbox = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"

// TapFD is the descriptor number the tap has in QEMU: the first of exec.Cmd.ExtraFiles.
const TapFD = 3

// Boot holds the per-boot values that are not part of the Spec: the accelerator the
// probe chose, the host TSC frequency and the wall clock handed to the guest.
type Boot struct {
	Accel sandbox.Accel
	// TSCkHz is the host TSC frequency in kHz, passed as tsc_early_khz under TCG
	// (0 omits it): ~3% of microvm TCG boots otherwise hang in TSC calibration because
	// microvm has no HPET or ACPI PM timer to calibrate against.
	TSCkHz int
	// Now is the host clock; the guest sets its clock from brood.time (microvm has
	// an RTC, but it only has second resolution and the guest reads it as UTC).
	Now time.Time
}

// Cmdline returns the kernel command line words for spec: brood's fixed words, then
// spec.Cmdline.
//
//   - console=ttyS0: the serial console is the VM's console log.
//   - under TCG: tsc_early_khz (see Boot.TSCkHz) and tsc=reliable.
//   - reboot=t panic=-1: a panic reboots at once, and -no-reboot turns that into QEMU exiting.
//   - brood.time=SECONDS.NANOS: the guest's initial wall clock.
func Cmdline(spec sandbox.Spec, b Boot) []string {
	w := []string{"console=ttyS0", "reboot=t", "panic=-1"}
	if b.Accel == sandbox.AccelTCG && b.TSCkHz > 0 {
		// tsc=reliable: under TCG the guest TSC is the host's; what drifts on a busy
		// host is the timer interrupt the clocksource watchdog compares it with, and the
		// watchdog would then drop to the 4 ms jiffies clock.
		w = append(w, "tsc_early_khz="+strconv.Itoa(b.TSCkHz), "tsc=reliable")
	}
	if !b.Now.IsZero() {
		w = append(w, fmt.Sprintf("brood.time=%d.%09d", b.Now.Unix(), b.Now.Nanosecond()))
	}
	return append(w, spec.Cmdline...)
}

// Args returns QEMU's argv (without argv[0]) for spec on a microvm machine. The spec
// must have been validated. Devices are virtio-mmio, found by the guest through
// microvm's ACPI tables (the Debian kernels lack CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES):
//
//   - virtio-rng from /dev/urandom, so the guest's first SSH handshake does not wait
//     ~1 s for entropy (measured under TCG);
//   - virtio-serial with one port named sandbox.SSHPortName, backed by a listening unix
//     socket at spec.SSHSocket;
//   - the rootfs image as a read-only raw virtio-blk disk (/dev/vda);
//   - the share over virtio-9p (security_model=none: files are created with the VMM's
//     uid; mount tag sandbox.ShareTag);
//   - virtio-net on the tap passed as fd TapFD, only when spec.Tap is set. Without it
//     the VM has no network device at all.
func Args(spec sandbox.Spec, b Boot) []string {
	a := []string{
		"-M", "microvm",
		"-accel", string(b.Accel),
	}
	// The guest CPU: the host's under KVM. Under TCG, "max" (every feature TCG
	// emulates; QEMU 7.2 emulates AVX and AVX2) rather than the default qemu64, which
	// lacks AVX: Claude Code's x64 binary stops with SIGILL (status 132) without it.
	if b.Accel == sandbox.AccelKVM {
		a = append(a, "-cpu", "host")
	} else {
		a = append(a, "-cpu", "max")
	}
	a = append(a,
		"-smp", strconv.Itoa(spec.CPUs),
		"-m", strconv.Itoa(spec.MemoryMiB),
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-sandbox", Sandbox,
		"-serial", "stdio",
		"-kernel", spec.Kernel,
		"-initrd", spec.Initrd,
		"-append", strings.Join(Cmdline(spec, b), " "),
		"-object", "rng-random,id=rng0,filename=/dev/urandom",
		"-device", "virtio-rng-device,rng=rng0",
		"-device", "virtio-serial-device,id=vser0",
		"-chardev", "socket,id=ssh0,path="+spec.SSHSocket+",server=on,wait=off",
		"-device", "virtserialport,bus=vser0.0,chardev=ssh0,name="+sandbox.SSHPortName,
	)
	if spec.RootfsImage != "" {
		a = append(a,
			"-drive", "file="+spec.RootfsImage+",if=none,id=root,format=raw,readonly=on",
			"-device", "virtio-blk-device,drive=root")
	}
	if spec.ShareDir != "" {
		a = append(a,
			"-fsdev", "local,id=fs0,path="+spec.ShareDir+",security_model=none",
			"-device", "virtio-9p-device,fsdev=fs0,mount_tag="+sandbox.ShareTag)
	}
	if spec.Tap != nil {
		mac := spec.MAC
		if mac == "" {
			mac = sandbox.DefaultMAC
		}
		a = append(a,
			"-netdev", "tap,id=net0,fd="+strconv.Itoa(TapFD),
			"-device", "virtio-net-device,netdev=net0,mac="+mac)
	}
	return a
}

// TSCkHz parses the first "cpu MHz" line of /proc/cpuinfo content into kHz (under TCG
// the guest TSC runs at the host TSC's rate).
func TSCkHz(cpuinfo []byte) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != "cpu MHz" {
			continue
		}
		mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || mhz <= 0 {
			return 0, fmt.Errorf("parse cpu MHz %q: %w", strings.TrimSpace(v), ErrNoTSC)
		}
		return int(mhz*1000 + 0.5), nil
	}
	return 0, ErrNoTSC
}
