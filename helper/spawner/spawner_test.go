package spawner

import (
	"errors"
	"slices"
	"strings"
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
// never a name outside the table) or a digest reference with a policy file, and an
// absolute clean state directory. BuildArgs passes a reference only after --ref.
func TestCheckBuild(t *testing.T) {
	recipes := []string{"codex", "test"}
	hex := strings.Repeat("0f", 32)
	ref := "127.0.0.1:5000/tool@sha256:" + hex
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
		{Request{Ref: ref, Policy: "/etc/brood/policy.toml", StateDir: "/s"}, true},
		{Request{Ref: ref, StateDir: "/s"}, false},                                                              // no policy file
		{Request{Ref: ref, Policy: "policy.toml", StateDir: "/s"}, false},                                       // relative policy
		{Request{Name: "test", Ref: ref, Policy: "/p", StateDir: "/s"}, false},                                  // both
		{Request{Ref: "127.0.0.1:5000/tool:v1", Policy: "/p", StateDir: "/s"}, false},                           // a tag
		{Request{Ref: "-o/x@sha256:" + hex, Policy: "/p", StateDir: "/s"}, false},                               // a flag
		{Request{Ref: "a/b c@sha256:" + hex, Policy: "/p", StateDir: "/s"}, false},                              // a space
		{Request{Ref: ref + "0", Policy: "/p", StateDir: "/s"}, false},                                          // 65 hex digits
		{Request{Ref: ref, Policy: "/p", StateDir: "s"}, false},                                                 // relative store
		{Request{Ref: "r/" + strings.Repeat("a", 500) + "@sha256:" + hex, Policy: "/p", StateDir: "/s"}, false}, // over 512 bytes
		{Request{Ref: "r/x@sha256:" + hex[:63], Policy: "/p", StateDir: "/s"}, false},                           // 63 hex digits
	} {
		err := CheckBuild(tc.req, recipes)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrSpawn)) {
			t.Errorf("CheckBuild(%+v) = %v, want ok=%v", tc.req, err, tc.ok)
		}
	}
}

func TestBuildArgs(t *testing.T) {
	if a := BuildArgs(Request{Name: "codex", StateDir: "/s"}); !slices.Equal(a, []string{"--state-dir", "/s", "codex"}) {
		t.Errorf("recipe: %q", a)
	}
	if a := BuildArgs(Request{Ref: "r@sha256:0", Policy: "/p", StateDir: "/s"}); !slices.Equal(a, []string{"--state-dir", "/s", "--policy", "/p", "--ref", "r@sha256:0"}) {
		t.Errorf("pull: %q", a)
	}
}
