package spawner

import (
	"errors"
	"testing"
)

// TestCheck: the spawner never starts a runner as root and adds no group but kvm.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		req Request
		ok  bool
	}{
		{Request{UID: 4242, GID: 4242}, true},
		{Request{UID: 4242, GID: 4242, Groups: []uint32{108}}, true},
		{Request{UID: 0, GID: 4242}, false},
		{Request{UID: 4242, GID: 0}, false},
		{Request{UID: 4242, GID: 4242, Groups: []uint32{0}}, false},
		{Request{UID: 4242, GID: 4242, Groups: []uint32{108, 108}}, false},
	} {
		err := Check(tc.req, 108)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrSpawn)) {
			t.Errorf("Check(%+v) = %v, want ok=%v", tc.req, err, tc.ok)
		}
	}
	if err := Check(Request{UID: 4242, GID: 4242, Groups: []uint32{108}}, -1); err == nil {
		t.Errorf("a group accepted on a host without kvm group")
	}
}

// TestCheckBuild: a build request names one of the compiled-in recipes (never a path,
// never a name outside the table) and an absolute clean state directory.
func TestCheckBuild(t *testing.T) {
	recipes := []string{"codex", "test"}
	for _, tc := range []struct {
		req Request
		ok  bool
	}{
		{Request{Name: "test", StateDir: "/var/lib/brood"}, true},
		{Request{Name: "codex", StateDir: "/tmp/s"}, true},
		{Request{Name: "gemini", StateDir: "/var/lib/brood"}, false},  // not in the table
		{Request{Name: "../test", StateDir: "/var/lib/brood"}, false}, // a path
		{Request{Name: "", StateDir: "/var/lib/brood"}, false},        // empty
		{Request{Name: "test", StateDir: "var/lib/brood"}, false},     // relative
		{Request{Name: "test", StateDir: "/var/lib/../brood"}, false}, // not clean
		{Request{Name: "test", StateDir: ""}, false},                  // missing
	} {
		err := CheckBuild(tc.req, recipes)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrSpawn)) {
			t.Errorf("CheckBuild(%+v) = %v, want ok=%v", tc.req, err, tc.ok)
		}
	}
}
