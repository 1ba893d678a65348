package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"os"
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

// RerunInNetns re-executes the test binary in the named network namespace (ip netns exec)
// to run only the top-level test named test (-test.run ^test$ -test.v), with env
// ("NAME=value") added to this process's environment and prefix (a command and its
// arguments, e.g. setpriv's) run before the binary. It logs the child's output and fails
// t unless the child passed that test.
func RerunInNetns(t testing.TB, name, test string, env []string, prefix ...string) {
	t.Helper()
	args := append([]string{"netns", "exec", name}, prefix...)
	cmd := exec.Command("ip", append(args, os.Args[0], "-test.run", "^"+test+"$", "-test.v")...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("in netns %s:\n%s", name, out)
	if err != nil {
		t.Fatalf("scenario in netns %s: %v", name, err)
	}
	if !strings.Contains(string(out), "--- PASS: "+test) {
		t.Fatal("the scenario did not run")
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

// InNewNetns creates an unnamed network namespace and runs fn (when not nil) on a thread
// switched into it, then switches the thread back: what fn creates there (devices,
// sockets) stays there. It returns a handle of the namespace, closed when t ends (the
// namespace lives while a handle, or a device or socket in it, does). Failing to create
// or enter it, or fn's error, fails t; failing to switch back panics (the thread must not
// run anything else in the wrong namespace).
func InNewNetns(t testing.TB, fn func() error) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New() // this thread now lives in the new namespace
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("new netns: %v", err)
	}
	t.Cleanup(func() { ns.Close() })
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic("return to the test's netns: " + err.Error())
		}
		runtime.UnlockOSThread()
	}()
	if fn != nil {
		if err := fn(); err != nil {
			t.Fatal(err)
		}
	}
	return ns
}
