// Package qemu is brood's QEMU backend: qemu-system-x86_64 -M microvm with virtio-mmio
// devices, QEMU's own seccomp sandbox, KVM when the host can really run a stock guest
// kernel and TCG otherwise (with a loud warning).
//
// The command line is a value built by Args from a sandbox.Spec; Start runs it with the
// tap (if any) as fd 3, the serial console captured as the VM's console log, and the
// whole VM bounded by Spec.Timeout.
//
// Privilege: none of its own; it runs in the VM runner (the session owner's uid,
// no_new_privs, Landlock) and needs the kvm group only for KVM.
package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"brood.dev/brood/internal/hostexec"
	"brood.dev/brood/sandbox"
)

// DefaultStopGrace is how long Stop waits after SIGTERM before SIGKILL.
const DefaultStopGrace = 2 * time.Second

// Backend is the QEMU sandbox.Backend. The zero value is ready to use.
type Backend struct {
	// Path is the QEMU binary; empty means qemu-system-x86_64 on $PATH.
	Path string
	// ProbeKVM replaces the host KVM probe (tests); nil means ProbeKVM.
	ProbeKVM func() KVMHost
	// StopGrace is how long Stop waits for QEMU after SIGTERM; 0 means DefaultStopGrace.
	StopGrace time.Duration
	// Now replaces time.Now for the guest's initial clock (tests); nil means time.Now.
	Now func() time.Time
	// Warn receives the TCG warning (Capabilities.Warning) once, at the first Start
	// that uses TCG; nil means os.Stderr.
	Warn io.Writer
	// ConfineVMM, when set, runs on the OS thread that forks QEMU, right before the fork:
	// what it restricts on that thread alone (a seccomp filter, a Landlock domain) QEMU
	// inherits and no other thread of the caller has. The thread is locked to its
	// goroutine and ends when QEMU has been reaped (it is QEMU's parent for Pdeathsig). An
	// error fails Start before QEMU is forked.
	ConfineVMM func() error

	mu     sync.Mutex
	caps   *sandbox.Capabilities
	warned bool
}

var _ sandbox.Backend = (*Backend)(nil)

// Name returns "qemu".
func (b *Backend) Name() string { return "qemu" }

// Start validates spec, probes the host once (unless spec.Accel is set) and starts QEMU.
// It returns when the process has started; the SSH socket appears shortly after (dial
// it with retries). A stale socket file at spec.SSHSocket is removed first.
func (b *Backend) Start(ctx context.Context, spec sandbox.Spec) (sandbox.VM, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	path, err := b.binary()
	if err != nil {
		return nil, err
	}
	boot := Boot{Accel: spec.Accel, Now: time.Now()}
	if b.Now != nil {
		boot.Now = b.Now()
	}
	if boot.Accel == "" {
		b.mu.Lock()
		caps := b.caps
		b.mu.Unlock()
		if caps == nil {
			c, err := b.Probe(ctx)
			if err != nil {
				return nil, err
			}
			caps = &c
		}
		boot.Accel = caps.Accel
		b.warnOnce(caps.Warning)
	}
	if boot.Accel == sandbox.AccelTCG {
		if info, err := os.ReadFile("/proc/cpuinfo"); err == nil {
			boot.TSCkHz, _ = TSCkHz(info) // without it the boot only risks the rare calibration hang
		}
	}
	if fi, err := os.Lstat(spec.SSHSocket); err == nil && fi.Mode().Type() == fs.ModeSocket {
		if err := os.Remove(spec.SSHSocket); err != nil {
			return nil, fmt.Errorf("remove stale ssh socket: %w", err)
		}
	}
	cmd, err := hostexec.CommandPath(context.Background(), Binary, path, Args(spec, boot)...)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	vm := &vm{cmd: cmd, done: make(chan struct{}), sigc: make(chan syscall.Signal), stopGrace: b.StopGrace}
	if vm.stopGrace == 0 {
		vm.stopGrace = DefaultStopGrace
	}
	cmd.Stdout = &vm.console
	cmd.Stderr = &vm.console
	// Console copying must not outlive QEMU (a leaked descendant could hold the pipe).
	cmd.WaitDelay = time.Second
	if spec.Tap != nil {
		cmd.ExtraFiles = []*os.File{spec.Tap}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,            // Stop signals QEMU alone, never brood's process group
		Pdeathsig: syscall.SIGKILL, // the VM dies with its runner
	}
	if err := startOnThread(cmd, b.ConfineVMM, vm.done, vm.sigc); err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	vm.timer = time.AfterFunc(spec.Timeout, func() { vm.kill(errTimeoutAfter(spec.Timeout)) })
	go vm.reap()
	return vm, nil
}

// startOnThread starts cmd from a new OS thread that first runs confine (if set). The
// goroutine keeps the thread locked and alive until done is closed (QEMU reaped: the
// forking thread's exit would send QEMU its Pdeathsig), sends QEMU's process group every
// signal that arrives on sigc meanwhile, and then returns still locked, so the Go runtime
// ends the thread rather than reuse its restrictions for other goroutines.
//
// Why signals go through the thread: a caller confined with a Landlock signal scope may
// signal only processes in its thread's domain or below, and QEMU's domain is below the
// forking thread's (each thread of a Go process may have a domain of its own). The thread
// is never the process's main thread: that thread's credentials stand for the whole
// process when another process signals or inspects it by its pid, so a goroutine that
// lands there keeps it occupied (until done) and tries again from another.
func startOnThread(cmd *hostexec.Cmd, confine func() error, done <-chan struct{}, sigc <-chan syscall.Signal) error {
	errc := make(chan error, 1)
	failed := make(chan struct{})
	var try func()
	try = func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if syscall.Gettid() == os.Getpid() {
			go try()
			select {
			case <-done:
			case <-failed:
			}
			return
		}
		var err error
		if confine != nil {
			err = confine()
		}
		if err == nil {
			err = cmd.Start()
		}
		errc <- err
		if err != nil {
			close(failed)
			return
		}
		for {
			select {
			case sig := <-sigc:
				_ = syscall.Kill(-cmd.Process.Pid, sig) // an error means it is already gone
			case <-done:
				return
			}
		}
	}
	go try()
	return <-errc
}

// warnOnce writes w (if any) to b.Warn the first time.
func (b *Backend) warnOnce(w string) {
	if w == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.warned {
		return
	}
	b.warned = true
	out := b.Warn
	if out == nil {
		out = os.Stderr
	}
	fmt.Fprintln(out, "brood:", w)
}

func errTimeoutAfter(d time.Duration) error {
	return fmt.Errorf("%w after %v", sandbox.ErrTimeout, d)
}

// vm is one QEMU process.
type vm struct {
	cmd       *hostexec.Cmd
	console   ringBuffer
	stopGrace time.Duration
	timer     *time.Timer
	done      chan struct{}       // closed when the process is reaped
	sigc      chan syscall.Signal // to the thread that forked QEMU (startOnThread)

	mu      sync.Mutex
	killErr error // why the VM was killed: timeout, context, or errStopped
	exitErr error // the result of Wait, set before done is closed
}

// kernelPanic is what the guest kernel prints on the console when it panics
// (kernel/panic.c).
var kernelPanic = []byte("Kernel panic - not syncing")

// errStopped marks a VM killed by Stop: Wait then returns nil.
var errStopped = errors.New("stopped")

func (v *vm) Pid() int { return v.cmd.Process.Pid }

func (v *vm) ConsoleLog() []byte { return v.console.Bytes() }

// reap waits for QEMU and records how it ended.
func (v *vm) reap() {
	err := v.cmd.Wait()
	v.timer.Stop()
	v.mu.Lock()
	switch {
	case v.killErr == errStopped:
		v.exitErr = nil
	case v.killErr != nil:
		v.exitErr = v.killErr
	case err != nil:
		v.exitErr = fmt.Errorf("qemu pid %d: %w: %w", v.cmd.Process.Pid, sandbox.ErrVMFailed, err)
	case bytes.Contains(v.console.Bytes(), kernelPanic):
		// panic=-1 reboots at once and -no-reboot turns that into a clean QEMU exit:
		// only the console tells a panic from a power-off.
		v.exitErr = fmt.Errorf("qemu pid %d: %w: guest kernel panicked", v.cmd.Process.Pid, sandbox.ErrVMFailed)
	}
	v.mu.Unlock()
	close(v.done)
}

// kill records why and SIGKILLs QEMU (the first reason wins).
func (v *vm) kill(why error) {
	v.mu.Lock()
	if v.killErr == nil {
		v.killErr = why
	}
	v.mu.Unlock()
	v.signal(syscall.SIGKILL)
}

// signal signals QEMU's process group (QEMU runs as a group leader, Setpgid), from the
// thread that forked it (startOnThread): nothing it might have started survives it.
// Once QEMU is reaped there is nothing to signal.
func (v *vm) signal(sig syscall.Signal) {
	select {
	case v.sigc <- sig:
	case <-v.done:
	}
}

func (v *vm) Wait(ctx context.Context) error {
	select {
	case <-v.done:
	case <-ctx.Done():
		v.kill(fmt.Errorf("%w: %w", sandbox.ErrTimeout, ctx.Err()))
		<-v.done
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.exitErr
}

func (v *vm) Stop() error {
	select {
	case <-v.done:
		return nil
	default:
	}
	v.mu.Lock()
	if v.killErr == nil {
		v.killErr = errStopped
	}
	v.mu.Unlock()
	v.signal(syscall.SIGTERM)
	select {
	case <-v.done:
	case <-time.After(v.stopGrace):
		v.signal(syscall.SIGKILL)
		<-v.done
	}
	return nil
}

// ringBuffer keeps the last sandbox.ConsoleLogMax bytes written to it.
type ringBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (r *ringBuffer) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, p...)
	if over := len(r.buf) - sandbox.ConsoleLogMax; over > 0 {
		r.buf = append(r.buf[:0], r.buf[over:]...)
	}
	return len(p), nil
}

func (r *ringBuffer) Bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte(nil), r.buf...)
}
