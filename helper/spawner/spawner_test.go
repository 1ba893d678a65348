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
