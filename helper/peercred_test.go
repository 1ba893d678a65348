//go:build linux

package helper

import (
	"errors"
	"net"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPeerCred: on a socketpair the peer is this process (its uid, gid, pid and
// supplementary groups); a closed connection's credentials are ErrNoCredentials.
func TestPeerCred(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "peer")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	a, b := conn(fds[0]), conn(fds[1])
	defer b.Close()
	c, err := PeerCred(a)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	got := make([]int, len(c.Groups))
	for i, g := range c.Groups {
		got[i] = int(g)
	}
	slices.Sort(got)
	slices.Sort(groups)
	if int(c.UID) != os.Getuid() || int(c.GID) != os.Getgid() || int(c.PID) != os.Getpid() || !slices.Equal(got, groups) {
		t.Errorf("PeerCred = %+v, want uid %d gid %d pid %d groups %v", c, os.Getuid(), os.Getgid(), os.Getpid(), groups)
	}
	a.Close()
	if _, err := PeerCred(a); !errors.Is(err, ErrNoCredentials) {
		t.Errorf("PeerCred of a closed connection = %v, want ErrNoCredentials", err)
	}
}
