package spawner

import (
	"errors"
	"slices"
	"syscall"
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

// TestRunnerAttr: a runner is cloned into new user and network namespaces whose id maps
// hold exactly its uid, gid and groups, each mapped to itself, with setgroups allowed (so
// the child drops root's groups), as its own process group, killed with the spawner.
func TestRunnerAttr(t *testing.T) {
	a := runnerAttr(4242, 4343, []uint32{108})
	if a.Cloneflags != syscall.CLONE_NEWUSER|syscall.CLONE_NEWNET || !a.Setpgid || a.Pdeathsig != syscall.SIGKILL || !a.GidMappingsEnableSetgroups {
		t.Errorf("runnerAttr = %+v", a)
	}
	if c := a.Credential; c.Uid != 4242 || c.Gid != 4343 || !slices.Equal(c.Groups, []uint32{108}) {
		t.Errorf("credential %+v", c)
	}
	if want := []syscall.SysProcIDMap{{ContainerID: 4242, HostID: 4242, Size: 1}}; !slices.Equal(a.UidMappings, want) {
		t.Errorf("uid map %v, want %v", a.UidMappings, want)
	}
	if want := []syscall.SysProcIDMap{{ContainerID: 4343, HostID: 4343, Size: 1}, {ContainerID: 108, HostID: 108, Size: 1}}; !slices.Equal(a.GidMappings, want) {
		t.Errorf("gid map %v, want %v", a.GidMappings, want)
	}
	if g := runnerAttr(4242, 4242, []uint32{}).GidMappings; len(g) != 1 || g[0].HostID != 4242 {
		t.Errorf("gid map without groups: %v", g)
	}
}
