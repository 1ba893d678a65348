package helper

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/testenv"
)

// scopeABI is the Landlock ABI with the signal and abstract-socket scopes (Linux 6.12).
const scopeABI = 6

// scopeSpec is what the scopes child is given: its directories, the pid of a process
// outside its domain and an abstract socket made outside it.
type scopeSpec struct {
	Runtime, State string
	Pid            int
	Abstract       string
}

// scopeAttempts signals s.Pid (signal 0) and itself, and connects to s.Abstract.
func scopeAttempts(s scopeSpec) map[string]string {
	res := func(err error) string {
		if err != nil {
			return err.Error()
		}
		return "ok"
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: s.Abstract})
		unix.Close(fd)
	}
	return map[string]string{
		"signal another process":  res(unix.Kill(s.Pid, 0)),
		"signal itself":           res(unix.Kill(os.Getpid(), 0)),
		"connect abstract socket": res(err),
	}
}

// childScopes confines itself as the daemon does (Confine) and prints scopeAttempts
// from before and after, as JSON.
func childScopes() int {
	var s scopeSpec
	if err := json.Unmarshal([]byte(os.Getenv("BROOD_TEST_SCOPES")), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	cfg := DefaultConfig()
	cfg.RuntimeDir, cfg.StateDir = s.Runtime, s.State
	before := scopeAttempts(s)
	if _, err := Confine(&cfg, discardLog()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	json.NewEncoder(os.Stdout).Encode([2]map[string]string{before, scopeAttempts(s)})
	return 0
}

// TestDaemonScopes confines a re-executed child with the daemon's Confine and checks,
// from inside, that it can no longer signal a process outside its domain (the test
// process, which is root like it: the daemon therefore asks the spawner to stop runners)
// nor connect to an abstract unix socket made outside it (Landlock's scopes, ABI 6), while
// it still signals itself; before Confine both work. With an abstract NOTIFY_SOCKET the
// abstract-socket scope is left out (sd_notify must reach systemd) and the signal scope
// stays.
func TestDaemonScopes(t *testing.T) {
	requireRoot(t)
	if abi, _ := landlockABI(); abi < PinnedABI {
		testenv.Skip(t, fmt.Sprintf("kernel Landlock ABI %d < pinned ABI %d (scopes need %d)", abi, PinnedABI, scopeABI))
	}
	name := fmt.Sprintf("@brood-daemon-scope-%d", os.Getpid())
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for c, err := l.Accept(); err == nil; c, err = l.Accept() {
			c.Close()
		}
	}()
	base := t.TempDir()
	s := scopeSpec{Runtime: base + "/run", State: base + "/state", Pid: os.Getpid(), Abstract: name}
	os.Mkdir(s.Runtime, 0o755)
	os.Mkdir(s.State, 0o755)
	eperm := unix.EPERM.Error()
	for _, c := range []struct {
		notify            string
		signal, connectTo string
	}{
		{"", eperm, eperm},
		{"@brood-test-notify-" + strconv.Itoa(os.Getpid()), eperm, "ok"},
	} {
		got := runScopesChild(t, s, c.notify)
		want := map[string][2]string{
			"signal another process":  {"ok", c.signal},
			"connect abstract socket": {"ok", c.connectTo},
			"signal itself":           {"ok", "ok"},
		}
		for what, w := range want {
			if g := [2]string{got[0][what], got[1][what]}; g != w {
				t.Errorf("NOTIFY_SOCKET=%q: %s before, after Confine = %q, want %q", c.notify, what, g, w)
			}
		}
	}
}

func runScopesChild(t *testing.T, s scopeSpec, notify string) [2]map[string]string {
	t.Helper()
	js, _ := json.Marshal(s)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=scopes", "BROOD_TEST_SCOPES="+string(js), "NOTIFY_SOCKET="+notify)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scopes child: %v\n%s", err, stderr.String())
	}
	var r [2]map[string]string
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("scopes child output %q: %v", out, err)
	}
	return r
}
