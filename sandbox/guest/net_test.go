package guest

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/testenv"
)

// TestLinkUp sets lo up in a network namespace of the test's own: a new netns starts
// with lo down.
func TestLinkUp(t *testing.T) {
	testenv.RequireRoot(t)
	errc := make(chan error, 1)
	flags := make(chan [2]uint16, 1)
	go func() {
		// The thread stays in the new netns and is discarded: it is never unlocked.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		before, err := loFlags()
		if err != nil {
			errc <- err
			return
		}
		if err := linkUp("lo"); err != nil {
			errc <- err
			return
		}
		after, err := loFlags()
		flags <- [2]uint16{before, after}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	f := <-flags
	if f[0]&unix.IFF_UP != 0 || f[1]&unix.IFF_UP == 0 || f[1]&unix.IFF_LOOPBACK == 0 {
		t.Errorf("lo flags before %#x, after %#x: want down, then up", f[0], f[1])
	}
	if err := linkUp("nosuch0"); err == nil {
		t.Error("linkUp(nosuch0) succeeded")
	}
}

func loFlags() (uint16, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	ifr, err := ifFlags(fd, "lo")
	if err != nil {
		return 0, err
	}
	return ifr.Uint16(), nil
}
