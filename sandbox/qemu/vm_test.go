package qemu

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"brood.dev/brood/sandbox"
)

// fakeQEMU writes a shell script standing in for qemu-system-x86_64: it answers
// -version and otherwise runs body.
func fakeQEMU(t *testing.T, body string) *Backend {
	t.Helper()
	p := filepath.Join(t.TempDir(), "qemu")
	script := "#!/bin/sh\n[ \"$1\" = -version ] && { echo 'QEMU emulator version 0 (fake)'; exit 0; }\n" + body + "\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Backend{
		Path:      p,
		ProbeKVM:  func() KVMHost { return KVMHost{Modules: map[string]bool{"kvm_pvm": true}, APIVersion: 12} },
		StopGrace: 500 * time.Millisecond,
		Warn:      &bytes.Buffer{},
	}
}

func fakeSpec(t *testing.T, timeout time.Duration) sandbox.Spec {
	s := sandbox.NewSpec("/k/vmlinux", "/k/initrd", filepath.Join(t.TempDir(), "ssh.sock"), "")
	s.Timeout = timeout
	return s
}

func TestVMLifecycle(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		timeout time.Duration
		stop    bool
		want    error  // nil: clean
		msg     string // in the error
	}{
		{"power off", "echo booted; exit 0", time.Minute, false, nil, ""},
		{"qemu error", "echo 'qemu: bad option' >&2; exit 1", time.Minute, false, sandbox.ErrVMFailed, "exit status 1"},
		{"guest panic", "echo '[ 1.0] Kernel panic - not syncing: No working init found.'; exit 0", time.Minute, false, sandbox.ErrVMFailed, "panicked"},
		{"hang", "exec sleep 60", 300 * time.Millisecond, false, sandbox.ErrTimeout, "after 300ms"},
		{"stopped", "exec sleep 60", time.Minute, true, nil, ""},
		{"stop ignores TERM", "trap '' TERM; sleep 60; sleep 60", time.Minute, true, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := fakeQEMU(t, tt.body)
			vm, err := b.Start(t.Context(), fakeSpec(t, tt.timeout))
			if err != nil {
				t.Fatal(err)
			}
			pid := vm.Pid()
			if tt.stop {
				time.Sleep(100 * time.Millisecond)
				if err := vm.Stop(); err != nil {
					t.Fatalf("Stop: %v", err)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err = vm.Wait(ctx)
			if tt.want == nil && err != nil || tt.want != nil && (!errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg)) {
				t.Errorf("Wait = %v, want %v containing %q", err, tt.want, tt.msg)
			}
			if err2 := vm.Wait(ctx); (err2 == nil) != (err == nil) {
				t.Errorf("second Wait = %v, first %v", err2, err)
			}
			if e := syscall.Kill(pid, 0); !errors.Is(e, syscall.ESRCH) {
				t.Errorf("VMM pid %d still exists after Wait", pid)
			}
		})
	}
}

func TestWaitContextKills(t *testing.T) {
	b := fakeQEMU(t, "exec sleep 60")
	vm, err := b.Start(t.Context(), fakeSpec(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := vm.Wait(ctx); !errors.Is(err, sandbox.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait(expiring ctx) = %v, want ErrTimeout wrapping DeadlineExceeded", err)
	}
}

func TestTCGWarningOnce(t *testing.T) {
	b := fakeQEMU(t, "exit 0")
	for range 2 {
		vm, err := b.Start(t.Context(), fakeSpec(t, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		vm.Wait(t.Context())
	}
	got := b.Warn.(*bytes.Buffer).String()
	if strings.Count(got, "WARNING") != 1 || !strings.Contains(got, "kvm_pvm") {
		t.Errorf("warnings = %q, want one TCG warning naming kvm_pvm", got)
	}
	if vm, err := b.Start(t.Context(), sandbox.Spec{}); err == nil || !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("Start(zero spec) = %v, %v; want ErrInvalidSpec", vm, err)
	}
}
