package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// versionVar is the variable the version is linked into (internal/version.Version).
const versionVar = "brood.dev/brood/internal/version.Version"

// binary is one program in the package: its main package and where it is installed.
type binary struct {
	Pkg  string // main package, relative to the module root
	Name string // file name
	Dest string // absolute path in the package
}

// binaries are the three programs, in the layout of docs/packaging.md: the frontend on
// users' PATH, the helper in /usr/sbin (the administrator runs `broodd-helper image build`;
// the units start it from there), and the guest PID 1 where sandbox/assets.GuestPaths
// looks first.
var binaries = []binary{
	{"./cmd/brood", "brood", "/usr/bin/brood"},
	{"./cmd/broodd-helper", "broodd-helper", "/usr/sbin/broodd-helper"},
	{"./cmd/brood-guest", "brood-guest", "/usr/libexec/brood/brood-guest"},
}

// buildBinaries builds every binary for linux/goarch into dir with describe linked in as
// the version. All are built with CGO_ENABLED=0 (static, cross-compiled without a C
// toolchain), -trimpath and stripped (-s -w).
func buildBinaries(root, dir, goarch, describe string) error {
	for _, b := range binaries {
		out := filepath.Join(dir, b.Name)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -X "+versionVar+"="+describe, "-o", out, b.Pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s for linux/%s: %w\n%s", b.Pkg, goarch, err, strings.TrimSpace(string(msg)))
		}
	}
	return nil
}
