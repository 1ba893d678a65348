package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"brood.dev/brood/internal/testenv"
)

// testDescribe is the version the test packages are built with.
const testDescribe = "v1.2.3-4-gabcdef1"

var (
	buildOnce  sync.Once
	buildDir   string
	builtPaths []string
	buildErr   error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// builtPackages builds the amd64 .deb and .rpm once per test binary (about a minute on a
// loaded 2-core machine: three go builds) and returns their paths (deb first).
func builtPackages(t *testing.T) (deb, rpm string) {
	t.Helper()
	testenv.RequireCommand(t, "go")
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "brood-packages-")
		if buildErr != nil {
			return
		}
		builtPaths, buildErr = run(options{Root: "..", Out: buildDir, Describe: testDescribe, Arches: []string{"amd64"}, Formats: []string{"deb", "rpm"}})
	})
	if buildErr != nil {
		t.Fatalf("build packages: %v", buildErr)
	}
	return builtPaths[0], builtPaths[1]
}

// wantFiles are files every package must hold, with their permissions ("-rwxr-xr-x").
var wantFiles = map[string]string{
	"/usr/bin/brood":                                  "-rwxr-xr-x",
	"/usr/sbin/broodd-helper":                         "-rwxr-xr-x",
	"/usr/libexec/brood/brood-guest":                  "-rwxr-xr-x",
	"/usr/lib/systemd/system/broodd-helper.socket":    "-rw-r--r--",
	"/usr/lib/systemd/system/broodd-helper.service":   "-rw-r--r--",
	"/etc/brood/helper.toml":                          "-rw-r--r--",
	"/etc/brood/policy.toml":                          "-rw-r--r--",
	"/usr/share/man/man1/brood.1.gz":                  "-rw-r--r--",
	"/usr/share/man/man1/brood-run.1.gz":              "-rw-r--r--",
	"/usr/share/man/man1/brood-doctor.1.gz":           "-rw-r--r--",
	"/usr/share/man/man8/broodd-helper.8.gz":          "-rw-r--r--",
	"/usr/share/bash-completion/completions/brood":    "-rw-r--r--",
	"/usr/share/fish/vendor_completions.d/brood.fish": "-rw-r--r--",
	"/usr/share/doc/brood/copyright":                  "-rw-r--r--",
	"/usr/share/doc/brood/packaging.md":               "-rw-r--r--",
}

var wantConffiles = []string{"/etc/brood/helper.toml", "/etc/brood/policy.toml"}

func output(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(testenv.RequireCommand(t, name), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// checkListing compares a listing of "PERMS OWNER/GROUP PATH" lines against wantFiles,
// and requires every file to be root-owned and no file group- or world-writable.
func checkListing(t *testing.T, lines []string) {
	t.Helper()
	seen := map[string]string{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		perms, owner, path := f[0], f[1], "/"+strings.Trim(strings.TrimPrefix(f[2], "."), "/")
		if owner != "root/root" {
			t.Errorf("%s is owned by %s, want root", path, owner)
		}
		if perms[5] == 'w' || perms[8] == 'w' {
			t.Errorf("%s is group- or world-writable (%s)", path, perms)
		}
		seen[path] = perms
	}
	for p, want := range wantFiles {
		if got, ok := seen[p]; !ok {
			t.Errorf("package lacks %s", p)
		} else if got != want {
			t.Errorf("%s has mode %s, want %s", p, got, want)
		}
	}
}

// TestDebPackage: the .deb's contents, modes, owners, conffiles and control fields
// (dpkg-deb -c/-I), its binaries' version and architecture, and lintian with no error.
func TestDebPackage(t *testing.T) {
	deb, _ := builtPackages(t)
	var lines []string
	for _, l := range strings.Split(output(t, "dpkg-deb", "-c", deb), "\n") {
		// drwxr-xr-x root/root 0 2026-01-01 00:00 ./etc/
		if f := strings.Fields(l); len(f) == 6 {
			lines = append(lines, f[0]+" "+f[1]+" "+f[5])
		}
	}
	checkListing(t, lines)
	conffiles := strings.Fields(output(t, "dpkg-deb", "-I", deb, "conffiles"))
	if !slices.Equal(conffiles, wantConffiles) {
		t.Errorf("conffiles = %v, want %v", conffiles, wantConffiles)
	}
	control := output(t, "dpkg-deb", "-I", deb, "control")
	for _, want := range []string{"Package: brood\n", "Version: 1.2.3+4.gabcdef1\n", "Architecture: amd64\n",
		"Depends: qemu-system-x86, nftables, erofs-utils, kmod, xz-utils\n", "Recommends: mmdebstrap\n"} {
		if !strings.Contains(control, want) {
			t.Errorf("control lacks %q:\n%s", want, control)
		}
	}
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		output(t, "dpkg-deb", "-I", deb, s)
	}
	root := t.TempDir()
	output(t, "dpkg-deb", "-x", deb, root)
	checkBinaries(t, root, elf.EM_X86_64)
	// --fail-on error: a warning is reported but passes; each override is explained in
	// packaging/files/lintian-overrides.
	output(t, "lintian", "--no-cfg", "--fail-on", "error", "--display-level", ">=warning", deb)
}

// TestRPMPackage: the .rpm's contents, modes, owners, %config(noreplace) files,
// dependencies and scripts (rpm -qp), and rpmlint with no error.
func TestRPMPackage(t *testing.T) {
	_, rpm := builtPackages(t)
	list := output(t, "rpm", "-qp", "--qf", "[%{FILEMODES:perms} %{FILEUSERNAME}/%{FILEGROUPNAME} %{FILENAMES}\n]", rpm)
	checkListing(t, strings.Split(list, "\n"))
	if got := strings.Fields(output(t, "rpm", "-qpc", rpm)); !slices.Equal(got, wantConffiles) {
		t.Errorf("rpm -qpc = %v, want %v", got, wantConffiles)
	}
	flags := output(t, "rpm", "-qp", "--qf", "[%{FILEFLAGS:fflags} %{FILENAMES}\n]", rpm)
	for _, c := range wantConffiles {
		if !regexp.MustCompile(`(?m)^c\S*n\S* ` + regexp.QuoteMeta(c) + `$`).MatchString(flags) {
			t.Errorf("%s is not %%config(noreplace):\n%s", c, flags)
		}
	}
	reqs := output(t, "rpm", "-qpR", rpm)
	for _, want := range []string{"qemu-system-x86-core", "nftables", "erofs-utils"} {
		if !strings.Contains(reqs, want) {
			t.Errorf("rpm requires lack %s:\n%s", want, reqs)
		}
	}
	scripts := output(t, "rpm", "-qp", "--scripts", rpm)
	for _, want := range []string{"postinstall scriptlet", "preuninstall scriptlet", "postuninstall scriptlet"} {
		if !strings.Contains(scripts, want) {
			t.Errorf("rpm lacks its %s", want)
		}
	}
	if !strings.Contains(list, " "+selinuxModule+"\n") {
		t.Errorf("the rpm lacks the SELinux module %s", selinuxModule)
	}
	if v := output(t, "rpm", "-qp", "--qf", "%{VERSION}-%{RELEASE} %{ARCH}", rpm); v != "1.2.3+4.gabcdef1-1 x86_64" {
		t.Errorf("rpm version and arch = %q", v)
	}
	// rpmlint exits non-zero on any error; the filters are explained in rpmlint.toml.
	output(t, "rpmlint", "-c", "files/rpmlint.toml", rpm)
}

// checkBinaries runs the unpacked brood and broodd-helper with --version (the version
// linked in) and checks that all three are ELF for machine.
func checkBinaries(t *testing.T, root string, machine elf.Machine) {
	t.Helper()
	for _, b := range binaries {
		f, err := elf.Open(filepath.Join(root, b.Dest))
		if err != nil {
			t.Fatalf("%s: %v", b.Dest, err)
		}
		if f.Machine != machine {
			t.Errorf("%s is for %v, want %v", b.Dest, f.Machine, machine)
		}
		f.Close()
	}
	if got := output(t, filepath.Join(root, "usr/bin/brood"), "--version"); got != "brood version "+testDescribe+"\n" {
		t.Errorf("brood --version = %q", got)
	}
	if got := output(t, filepath.Join(root, "usr/sbin/broodd-helper"), "--version"); got != "broodd-helper "+testDescribe+"\n" {
		t.Errorf("broodd-helper --version = %q", got)
	}
}
