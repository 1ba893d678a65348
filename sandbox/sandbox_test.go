package sandbox

import (
	"errors"
	"testing"
	"time"
)

func TestSpecValidate(t *testing.T) {
	ok := NewSpec("/k/vmlinux", "/k/initrd", "/run/x/ssh.sock", "/snap")
	if err := ok.Validate(); err != nil {
		t.Fatalf("default spec: %v", err)
	}
	tests := []struct {
		name string
		mod  func(*Spec)
	}{
		{"zero cpus", func(s *Spec) { s.CPUs = 0 }},
		{"tiny memory", func(s *Spec) { s.MemoryMiB = 64 }},
		{"no kernel", func(s *Spec) { s.Kernel = "" }},
		{"relative initrd", func(s *Spec) { s.Initrd = "initrd" }},
		{"comma in share", func(s *Spec) { s.ShareDir = "/a,b" }},
		{"unclean image", func(s *Spec) { s.RootfsImage = "/a/../b" }},
		{"no ssh socket", func(s *Spec) { s.SSHSocket = "" }},
		{"no timeout", func(s *Spec) { s.Timeout = 0 }},
		{"negative timeout", func(s *Spec) { s.Timeout = -time.Second }},
		{"bad accel", func(s *Spec) { s.Accel = "xen" }},
		{"blank in cmdline", func(s *Spec) { s.Cmdline = []string{"a b"} }},
	}
	for _, tt := range tests {
		s := ok
		tt.mod(&s)
		if err := s.Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: Validate = %v, want ErrInvalidSpec", tt.name, err)
		}
	}
}
