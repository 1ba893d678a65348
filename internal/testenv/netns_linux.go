package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
)

// NewNetns creates a named network namespace "brood<role><6 hex>" with lo up (ip netns
// add; the test must run as root and have ip, see RequireRoot and RequireCommand) and
// deletes it when t ends. It returns the name.
func NewNetns(t testing.TB, role string) string {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	name := "broodeg" + role + hex.EncodeToString(b)
	IP(t, "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	IP(t, "-n", name, "link", "set", "lo", "up")
	return name
}

// IP runs ip(8) with args and fails t on an error.
func IP(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// InNetns runs fn on a thread switched into the named network namespace; sockets fn
// creates stay there. It returns fn's error, or the error of entering or leaving.
func InNetns(name string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	ns, err := netns.GetFromName(name)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer ns.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		return err // the thread stays locked and dies with the goroutine
	}
	runtime.UnlockOSThread()
	return ferr
}
