package helper

import (
	"strings"
	"testing"
)

// TestActivationCheck: doctor's "activation" check names the mode the helper got its
// socket in, and never fails (both modes are supported).
func TestActivationCheck(t *testing.T) {
	for _, tc := range []struct {
		listen, want string
	}{
		{"", "socket activation ("},
		{"/run/brood/helper.sock", "--listen /run/brood/helper.sock (no socket activation"},
	} {
		c := activationCheck(tc.listen)
		if c.Name != "activation" || !c.OK || c.Warn || !strings.HasPrefix(c.Detail, tc.want) {
			t.Errorf("activationCheck(%q) = %+v, want an ok check starting %q", tc.listen, c, tc.want)
		}
	}
}

// TestMainVersionFlag: `broodd-helper --version` exits 0 without serving.
func TestMainVersionFlag(t *testing.T) {
	if code := Main([]string{"--version"}); code != 0 {
		t.Errorf("broodd-helper --version exited %d, want 0", code)
	}
}
