package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"
)

// TestSELinuxModule compiles selinux/brood.{te,fc,if} into brood.pp with the reference
// policy's development Makefile (selinux-policy-dev) and unpacks it again
// (semodule_unpackage): the module carries the file contexts of the helper, its
// configuration, state and run directories and the VMM copies.
func TestSELinuxModule(t *testing.T) {
	testenv.RequireFile(t, selinuxMakefile, "selinux-policy-dev builds the module")
	testenv.RequireCommand(t, "make")
	unpackage := testenv.RequireCommand(t, "semodule_unpackage")
	dir := t.TempDir()
	pp, err := buildSELinux("..", filepath.Join(dir, "build"))
	if err != nil {
		t.Fatal(err)
	}
	mod, fc := filepath.Join(dir, "brood.mod"), filepath.Join(dir, "brood.fc")
	if out, err := exec.Command(unpackage, pp, mod, fc).CombinedOutput(); err != nil {
		t.Fatalf("semodule_unpackage: %v\n%s", err, out)
	}
	data, err := os.ReadFile(fc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/usr/sbin/broodd-helper", "broodd_helper_exec_t", "/etc/brood(/.*)?", "/var/lib/brood(/.*)?",
		"/run/brood(/.*)?", "brood_vmm_exec_t"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("the module's file contexts lack %q:\n%s", want, data)
		}
	}
	if st, err := os.Stat(mod); err != nil || st.Size() == 0 {
		t.Errorf("the module's policy is empty: %v", err)
	}
}

// TestSELinuxModuleRejectsErrors proves the build can fail: a rule naming an undefined
// type does not compile.
func TestSELinuxModuleRejectsErrors(t *testing.T) {
	testenv.RequireFile(t, selinuxMakefile, "selinux-policy-dev builds the module")
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "selinux"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{"te", "fc", "if"} {
		data, err := os.ReadFile("../selinux/brood." + ext)
		if err != nil {
			t.Fatal(err)
		}
		if ext == "te" {
			data = append(data, "allow broodd_helper_t no_such_type_t:file read;\n"...)
		}
		if err := os.WriteFile(filepath.Join(root, "selinux/brood."+ext), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := buildSELinux(root, filepath.Join(root, "build")); err == nil {
		t.Error("a module with an undefined type compiled")
	}
}
