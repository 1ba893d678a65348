package netpolicy

import "testing"

// TestForbidDirect: forbid_direct in the system policy reaches the effective policy
// (brood policy show prints it; the helper refuses direct sessions).
func TestForbidDirect(t *testing.T) {
	for _, forbid := range []bool{false, true} {
		src := "forbid_direct = false\n"
		if forbid {
			src = "forbid_direct = true\n"
		}
		sp, err := ParseSystemPolicy([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if sp.ForbidDirect != forbid {
			t.Fatalf("%q: ForbidDirect = %v", src, sp.ForbidDirect)
		}
		eff, err := Resolve(Inputs{System: sp})
		if err != nil {
			t.Fatal(err)
		}
		if eff.DirectForbidden != forbid {
			t.Fatalf("%q: DirectForbidden = %v", src, eff.DirectForbidden)
		}
	}
	if _, err := ParseSystemPolicy([]byte("forbid_direct = \"yes\"\n")); err == nil {
		t.Fatal("a string forbid_direct parsed")
	}
}
