package frontend

import (
	"strings"
	"testing"
)

// vmSide are the VM packages only the helper's runner and the guest may link: the
// frontend talks to VMs through helper/api and SSH, never by running a VMM itself.
var vmSide = []string{
	"brood.dev/brood/sandbox/qemu",
	"brood.dev/brood/sandbox/guest",
}

func linksAny(deps, pkgs []string) []string {
	var found []string
	for _, d := range deps {
		for _, p := range pkgs {
			if d == p || strings.HasPrefix(d, p+"/") {
				found = append(found, d)
			}
		}
	}
	return found
}

// TestFrontendLinksNoVMM proves cmd/brood does not link the QEMU backend or the guest's
// PID 1 code, and that the same check finds the backend in cmd/broodd-helper (whose
// runner starts QEMU) and the guest code in cmd/brood-guest.
func TestFrontendLinksNoVMM(t *testing.T) {
	if bad := linksAny(goListDeps(t, "brood.dev/brood/cmd/brood"), vmSide); len(bad) > 0 {
		t.Errorf("cmd/brood links VM-side code: %v", bad)
	}
	if got := linksAny(goListDeps(t, "brood.dev/brood/cmd/broodd-helper"), vmSide[:1]); len(got) == 0 {
		t.Errorf("check did not find sandbox/qemu in cmd/broodd-helper")
	}
	if got := linksAny(goListDeps(t, "brood.dev/brood/cmd/brood-guest"), vmSide[1:]); len(got) == 0 {
		t.Errorf("check did not find sandbox/guest in cmd/brood-guest")
	}
}
