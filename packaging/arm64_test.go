package main

import (
	"debug/elf"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"
)

// TestArm64Packages builds the arm64 .deb and .rpm (cross-compiled, CGO_ENABLED=0) and
// checks what differs from amd64: the architecture fields, the QEMU dependency by its
// arm64 name, and that every binary is an AArch64 ELF file.
func TestArm64Packages(t *testing.T) {
	testenv.RequireCommand(t, "go")
	dir := t.TempDir()
	paths, err := run(options{Root: "..", Out: dir, Describe: testDescribe, Arches: []string{"arm64"}, Formats: []string{"deb", "rpm"}})
	if err != nil {
		t.Fatal(err)
	}
	deb, rpm := paths[0], paths[1]
	control := output(t, "dpkg-deb", "-I", deb, "control")
	for _, want := range []string{"Architecture: arm64\n", "Depends: qemu-system-arm, "} {
		if !strings.Contains(control, want) {
			t.Errorf("arm64 control lacks %q:\n%s", want, control)
		}
	}
	root := t.TempDir()
	output(t, "dpkg-deb", "-x", deb, root)
	for _, b := range binaries {
		f, err := elf.Open(filepath.Join(root, b.Dest))
		if err != nil {
			t.Fatalf("%s: %v", b.Dest, err)
		}
		if f.Machine != elf.EM_AARCH64 {
			t.Errorf("%s is for %v, want AArch64", b.Dest, f.Machine)
		}
		f.Close()
	}
	if got := output(t, "rpm", "-qp", "--qf", "%{ARCH}", rpm); got != "aarch64" {
		t.Errorf("rpm arch = %q, want aarch64", got)
	}
	if reqs := output(t, "rpm", "-qpR", rpm); !strings.Contains(reqs, "qemu-system-aarch64-core") {
		t.Errorf("arm64 rpm requires lack qemu-system-aarch64-core:\n%s", reqs)
	}
}
