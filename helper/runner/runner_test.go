package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/landlockabi"
	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox"
)

// childEnv selects what a re-executed test binary does instead of running tests.
const childEnv = "BROOD_RUNNER_TEST_CHILD"

func TestMain(m *testing.M) {
	// The test binary as broodd-helper's spawner and runner, and as the fake VMM (the
	// qemu backend execs it with a QEMU command line): probe_test.go.
	if len(os.Args) > 1 && os.Getenv(childEnv) == "" {
		switch os.Args[1] {
		case spawner.Subcommand:
			os.Exit(spawner.Main(os.Args[2:], nil)) // no build requests here
		case spawner.RunnerSubcommand:
			os.Exit(Main(os.Args[2:]))
		case "-M":
			os.Exit(vmmProbe())
		}
	}
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "sleep":
		io.Copy(io.Discard, os.Stdin) // until the test closes stdin
		os.Exit(0)
	case "landlock":
		os.Exit(childRunnerLandlock())
	case "unshare":
		// clone(2) of /bin/true with the namespace flags in BROOD_TEST_FLAGS; prints "ok"
		// or the errno.
		flags, _ := strconv.Atoi(os.Getenv("BROOD_TEST_FLAGS"))
		c := exec.Command("/bin/true")
		c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: uintptr(flags)}
		err := c.Run()
		var errno syscall.Errno
		if errors.As(err, &errno) {
			err = errno
		}
		fmt.Println(errString(err))
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "unknown %s=%q\n", childEnv, os.Getenv(childEnv))
		os.Exit(3)
	}
}

// TestDescriptorLayout: the spawner hands a runner its stderr and exactly descriptors
// 3..8, the layout the runner checks.
func TestDescriptorLayout(t *testing.T) {
	if spawner.RunnerFiles != 1+FDCount || len(descriptorTypes) != FDCount || FDImage != FDControl+FDCount-1 {
		t.Errorf("spawner passes %d files, runner expects stderr + %d descriptors (%d typed)", spawner.RunnerFiles, FDCount, len(descriptorTypes))
	}
}

// TestExitEvent: how the VMM's end maps to the outcome the daemon reports.
func TestExitEvent(t *testing.T) {
	for _, tc := range []struct {
		werr   error
		byStop bool
		want   api.VMOutcome
	}{
		{nil, false, api.OutcomePoweroff},
		{nil, true, api.OutcomeStopped},
		{fmt.Errorf("after 1s: %w", sandbox.ErrTimeout), false, api.OutcomeTimeout},
		{fmt.Errorf("exit 1: %w", sandbox.ErrVMFailed), true, api.OutcomeFailed},
	} {
		ev := exitEvent(tc.werr, tc.byStop, []byte("console"))
		if ev.Event != EvExit || ev.Outcome != tc.want || ev.ConsoleTail != "console" || (tc.werr != nil) != (ev.Detail != "") {
			t.Errorf("exitEvent(%v, %v) = %+v, want outcome %s", tc.werr, tc.byStop, ev, tc.want)
		}
	}
	long := make([]byte, ConsoleTailMax+10)
	long[len(long)-1] = 'z'
	if ev := exitEvent(nil, false, long); len(ev.ConsoleTail) != ConsoleTailMax || ev.ConsoleTail[ConsoleTailMax-1] != 'z' {
		t.Errorf("console tail of %d bytes: %d bytes", len(long), len(ev.ConsoleTail))
	}
}

// testSocketpair returns the two ends of a Unix stream socketpair.
func testSocketpair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b"), nil
}

// startSleeper starts bin (this test binary) as the "sleep" child with attr (nil: as the
// test's own user) and returns its pid; it ends when t does (its stdin is closed).
func startSleeper(t *testing.T, bin string, attr *syscall.SysProcAttr) int {
	t.Helper()
	c := exec.Command(bin)
	c.Env = []string{childEnv + "=sleep"}
	c.SysProcAttr = attr
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); c.Wait() })
	return c.Process.Pid
}

// runnerLLSpec is the input of the runner-confinement child.
type runnerLLSpec struct {
	Outside string // a directory the runner must not reach (stands for $HOME)
	Other   int    // a process outside the runner's domain (stands for the developer's)
}

// runnerLLProbes are the accesses the runner-confinement test checks.
func runnerLLProbes(s runnerLLSpec) map[string]string {
	res := func(err error) string {
		if err != nil {
			return err.Error()
		}
		return "ok"
	}
	r := map[string]string{}
	r["write share"] = res(os.WriteFile(fdPath(FDShare)+"/new", []byte("x"), 0o644))
	r["rename in share"] = res(os.Rename(fdPath(FDShare)+"/new", fdPath(FDShare)+"/sub/moved"))
	l, err := net.Listen("unix", fdPath(FDRunDir)+"/s.sock")
	if err == nil {
		l.Close()
	}
	r["socket in run dir"] = res(err)
	_, err = os.ReadFile(fdPath(FDKernel))
	r["read kernel"] = res(err)
	f, err := os.OpenFile(fdPath(FDImage), os.O_WRONLY, 0)
	if err == nil {
		f.Close()
	}
	r["write image"] = res(err)
	_, err = os.ReadFile(filepath.Join(s.Outside, "secret"))
	r["read outside"] = res(err)
	r["write outside"] = res(os.WriteFile(filepath.Join(s.Outside, "x"), []byte("x"), 0o600))
	r["exec /bin/true"] = res(exec.Command("/bin/true").Run())
	d := net.Dialer{Timeout: time.Second}
	d.SetMultipathTCP(false)
	c, err := d.Dial("tcp4", "127.0.0.1:9")
	if err == nil {
		c.Close()
	}
	r["tcp connect"] = res(err)
	r["signal other process"] = res(unix.Kill(s.Other, 0))
	r["connect outside socket"] = res(unixConnect(&unix.SockaddrUnix{Name: filepath.Join(s.Outside, "agent.sock")}))
	return r
}

func childRunnerLandlock() int {
	var s runnerLLSpec
	if err := json.Unmarshal([]byte(os.Getenv("BROOD_TEST_LL")), &s); err != nil {
		return 3
	}
	if err := confine(slog.New(slog.NewTextHandler(os.Stderr, nil)), Config{Accel: sandbox.AccelTCG, VMM: "/bin/true"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	json.NewEncoder(os.Stdout).Encode(runnerLLProbes(s))
	return 0
}

// TestRunnerLandlock confines a re-executed child with the runner's ruleset on the
// runner's descriptor layout: the share and run dir stay writable, the artifacts
// readable only, everything else (a directory standing for $HOME, TCP, signals to a
// process outside its domain) is denied; connecting to a pathname unix socket outside its
// rules still works (Landlock ABI 7 has no right for it: the runner keeps connect, the
// VMM's seccomp filter refuses it).
func TestRunnerLandlock(t *testing.T) {
	if abi, _ := llsys.LandlockGetABIVersion(); abi < landlockabi.Pinned {
		testenv.Skip(t, fmt.Sprintf("Landlock ABI %d < %d", abi, landlockabi.Pinned))
	}
	base := t.TempDir()
	dirs := map[string]string{}
	for _, d := range []string{"share", "share/sub", "run", "outside"} {
		dirs[d] = filepath.Join(base, d)
		if err := os.Mkdir(dirs[d], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dirs["outside"], "secret"), []byte("s"), 0o644)
	// A listening pathname socket outside the rules (stands for ssh-agent): Landlock ABI 7
	// cannot refuse connecting to it; only the VMM's seccomp filter does.
	agent, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dirs["outside"], "agent.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	var files []*os.File
	a, b, err := testSocketpair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	files = append(files, b)
	files = append(files, testenv.RunnerFiles(t, dirs["share"], dirs["run"], base)...)
	defer closeFiles(files)
	other := startSleeper(t, os.Args[0], nil)
	js, _ := json.Marshal(runnerLLSpec{Outside: dirs["outside"], Other: other})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=landlock", "BROOD_TEST_LL="+string(js))
	cmd.ExtraFiles = files
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, stderr.String())
	}
	var got map[string]string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	for probe, want := range map[string]string{
		"write share": "ok", "rename in share": "ok", "socket in run dir": "ok", "read kernel": "ok",
		"exec /bin/true": "ok", "write image": "permission denied", "read outside": "permission denied",
		"write outside": "permission denied", "tcp connect": "address family not supported",
		"signal other process": "operation not permitted", "connect outside socket": "ok",
	} {
		if !strings.Contains(got[probe], want) {
			t.Errorf("%s: %q, want %q", probe, got[probe], want)
		}
	}
}
