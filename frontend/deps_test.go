package frontend

import (
	"os/exec"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"
)

// privileged are import-path prefixes that only the helper may link (docs/ARCHITECTURE.md,
// "Processes and trust boundaries": the frontend holds no privilege and never links
// helper, nftables, netlink or Landlock code).
var privileged = []string{
	"brood.dev/brood/helper",
	"github.com/google/nftables",
	"github.com/vishvananda/netlink",
	"github.com/vishvananda/netns",
	"github.com/mdlayher/netlink",
	"github.com/landlock-lsm/go-landlock",
}

// builders are the packages that write the artifact store (fetch kernels, build
// initramfs files and images, pull and unpack OCI images: sandbox/oci and
// go-containerregistry's registry client): they run only in the privileged binary (the
// unpacker as an unprivileged child of it). brood maps references with sandbox/ociref.
var builders = []string{
	"brood.dev/brood/sandbox/assets",
	"brood.dev/brood/sandbox/image",
	"brood.dev/brood/sandbox/initramfs",
	"brood.dev/brood/sandbox/kernel",
	"brood.dev/brood/sandbox/oci",
	"github.com/google/go-containerregistry/pkg/v1/remote",
}

// allowedShared are the exceptions: the wire protocol both sides import.
var allowedShared = []string{"brood.dev/brood/helper/api"}

func goListDeps(t *testing.T, pkg string) []string {
	t.Helper()
	goBin := testenv.RequireCommand(t, "go")
	out, err := exec.Command(goBin, "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// privilegedDeps returns the deps that match a privileged prefix or a builder and are
// not allowed.
func privilegedDeps(deps []string) map[string]bool {
	found := map[string]bool{}
	for _, d := range deps {
		allowed := false
		for _, a := range allowedShared {
			if d == a || strings.HasPrefix(d, a+"/") {
				allowed = true
			}
		}
		for _, p := range append(privileged[:len(privileged):len(privileged)], builders...) {
			if !allowed && (d == p || strings.HasPrefix(d, p+"/")) {
				found[p] = true
			}
		}
	}
	return found
}

// TestFrontendLinksNoPrivilegedCode proves the privilege split with go list -deps: no
// privileged package and no artifact builder.
func TestFrontendLinksNoPrivilegedCode(t *testing.T) {
	deps := goListDeps(t, "brood.dev/brood/cmd/brood")
	if bad := privilegedDeps(deps); len(bad) > 0 {
		t.Errorf("cmd/brood links privileged code: %v", bad)
	}
	// The client side must be there, or the check above proves nothing about the helper.
	if !strings.Contains(" "+strings.Join(deps, " ")+" ", " brood.dev/brood/helper/api ") {
		t.Errorf("cmd/brood does not link brood.dev/brood/helper/api (doctor's client)")
	}
}

// TestDepsCheckCanFail runs the same check on cmd/broodd-helper, which must link every
// privileged package: if the list or the matching were wrong, this would fail.
func TestDepsCheckCanFail(t *testing.T) {
	bad := privilegedDeps(goListDeps(t, "brood.dev/brood/cmd/broodd-helper"))
	for _, p := range append([]string{"brood.dev/brood/helper", "github.com/google/nftables", "github.com/vishvananda/netlink",
		"github.com/mdlayher/netlink", "github.com/landlock-lsm/go-landlock"}, builders...) {
		if !bad[p] {
			t.Errorf("check did not flag %s in cmd/broodd-helper", p)
		}
	}
}

// libraryPackages are the session workflow and its helper client: a library that the
// command line drives, so they must link no privileged code and no command line.
var libraryPackages = []string{
	"brood.dev/brood/frontend",
	"brood.dev/brood/frontend/helperclient",
	"brood.dev/brood/frontend/fakehelper",
}

// TestWorkflowLinksNoCLIOrPrivilegedCode: the workflow packages link neither privileged
// code nor cobra/pflag, and cmd/brood links the workflow (so the check of cmd/brood above
// covers it too).
func TestWorkflowLinksNoCLIOrPrivilegedCode(t *testing.T) {
	for _, pkg := range libraryPackages {
		deps := goListDeps(t, pkg)
		if bad := privilegedDeps(deps); len(bad) > 0 {
			t.Errorf("%s links privileged code: %v", pkg, bad)
		}
		for _, d := range deps {
			if strings.HasPrefix(d, "github.com/spf13/") {
				t.Errorf("%s links the command-line library %s", pkg, d)
			}
		}
	}
	deps := " " + strings.Join(goListDeps(t, "brood.dev/brood/cmd/brood"), " ") + " "
	for _, pkg := range libraryPackages[:2] {
		if !strings.Contains(deps, " "+pkg+" ") {
			t.Errorf("cmd/brood does not link %s", pkg)
		}
	}
}
