//go:build linux

package helper

import (
	"errors"
	"os"
	"slices"
	"testing"

	"brood.dev/brood/internal/testenv"

	"golang.org/x/sys/unix"
)

// TestPeerCred: on a socketpair the peer is this process (its uid, gid, pid and
// supplementary groups); a closed connection's credentials are ErrNoCredentials.
func TestPeerCred(t *testing.T) {
	a, _ := testenv.UnixPair(t, unix.SOCK_STREAM)
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
