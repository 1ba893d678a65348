//go:build linux

package helper

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/internal/testenv"
)

// The owner of a runner or an egress process (the session user) must not be able to
// ptrace it or take its descriptors at any moment after its execve, in particular before
// its own prctl(PR_SET_DUMPABLE, 0). These tests start the process as uid 4242 the way
// the spawner and the daemon do (a root parent setting the credentials) and attack it from
// another uid-4242 process.

// attackUID is the session owner the attacks run as.
const attackUID = 4242

// childHold is the re-executed test binary that stands for a runner before its prctl: it
// makes no prctl at all, reports "ready" on stdout and waits until stdin closes.
func childHold() int {
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// stealResult is what one attack on a process got: "ok" or the error, per attempt.
type stealResult map[string]string

// steal attacks pid as the calling user: list and open its descriptors, read its exe
// link and executable, take its descriptor 0 with pidfd_getfd, PTRACE_ATTACH (detaching
// again when it worked).
func steal(pid int) stealResult {
	res := func(err error) string {
		if err != nil {
			return err.Error()
		}
		return "ok"
	}
	r := stealResult{}
	_, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	r["list fds"] = res(err)
	f, err := os.Open(fmt.Sprintf("/proc/%d/fd/0", pid))
	if err == nil {
		f.Close()
	}
	r["open fd"] = res(err)
	_, err = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	r["readlink exe"] = res(err)
	f, err = os.Open(fmt.Sprintf("/proc/%d/exe", pid))
	if err == nil {
		f.Close()
	}
	r["open exe"] = res(err)
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err == nil {
		var fd int
		fd, err = unix.PidfdGetfd(pidfd, 0, 0)
		if err == nil {
			unix.Close(fd)
		}
		unix.Close(pidfd)
	}
	r["pidfd_getfd"] = res(err)
	r["ptrace attach"] = res(ptraceAttachDetach(pid))
	return r
}

// ptraceAttachDetach attaches to pid with PTRACE_SEIZE (no stop) and detaches at once.
func ptraceAttachDetach(pid int) error {
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, 0, 0, 0); e != 0 {
		return e
	}
	unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(pid), 0, 0, 0, 0)
	return nil
}

// childSteal attacks the pid in BROOD_TEST_PID once and prints the stealResult as JSON.
func childSteal() int {
	pid, err := strconv.Atoi(os.Getenv("BROOD_TEST_PID"))
	if err != nil {
		return 3
	}
	json.NewEncoder(os.Stdout).Encode(steal(pid))
	return 0
}

// asUser sets cmd to run as the attack uid and gid with no groups.
func asUser(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: attackUID, Gid: attackUID, Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
	}
}

// startHeld starts bin as the attack user in the hold mode, as the spawner starts a
// runner (root parent, credentials set for the execve), and returns once it runs.
func startHeld(t *testing.T, bin string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{childEnv + "=hold"}
	cmd.Dir = "/"
	asUser(cmd)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	if l, err := bufio.NewReader(out).ReadString('\n'); l != "ready\n" {
		t.Fatalf("held child: %q, %v", l, err)
	}
	return cmd, in
}

// attack runs the steal child as the attack user against pid.
func attack(t *testing.T, pid int) stealResult {
	t.Helper()
	cmd := exec.Command(publicTestBinary(t))
	cmd.Env = []string{childEnv + "=steal", "BROOD_TEST_PID=" + strconv.Itoa(pid)}
	cmd.Dir = "/"
	asUser(cmd)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("attacker: %v\n%s", err, stderr.String())
	}
	var r stealResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("attacker output %q: %v", out, err)
	}
	return r
}

// TestSelfCopyNotDumpable: a process executed as the session owner from SelfCopy's
// execute-only copy is non-dumpable from its execve on, before any prctl of its own (the
// held child makes none): its owner can neither list, open or pidfd_getfd its descriptors,
// nor read its exe link or executable, nor ptrace it. The control: the same program from
// a readable copy gives the owner all of that, so the attack works when the window is open.
func TestSelfCopyNotDumpable(t *testing.T) {
	testenv.RequireRoot(t)
	self, err := SelfCopy(publicTempDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(self); err != nil || fi.Mode().Perm() != 0o711 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("SelfCopy %s: %v, %v (want root-owned, mode 0711)", self, fi.Mode(), err)
	}
	held, _ := startHeld(t, self)
	for what, got := range attack(t, held.Process.Pid) {
		if got == "ok" {
			t.Errorf("owner attacking a process run from the execute-only copy: %s succeeded", what)
		}
	}
	open, _ := startHeld(t, publicTestBinary(t))
	got := attack(t, open.Process.Pid)
	// ("open fd" is left out: the held child's descriptor 0 is a pipe of root's.)
	for _, what := range []string{"list fds", "readlink exe", "pidfd_getfd", "ptrace attach"} {
		if got[what] != "ok" {
			t.Errorf("control (readable binary): %s: %s, want ok (the attack must work on a dumpable process)", what, got[what])
		}
	}
}

// raceAttempts is how many attacks the racing attacker makes on a started runner before
// it reports.
const raceAttempts = 300

// childRace is the owner racing the spawner: from before the spawn request (it prints
// "looping" after its first pass) it scans /proc in a tight loop for processes of its uid
// run from the executable in BROOD_TEST_EXE (the spawner's child before its execve, the
// runner after it) and attacks each at once, until it has attacked a `vm-run` process
// raceAttempts times; then it prints how many attacks it made on each kind and which of
// them succeeded, as JSON.
func childRace() int {
	exe := os.Getenv("BROOD_TEST_EXE")
	r := raceResult{Succeeded: map[string]int{}}
	for first := true; r.RunnerAttacks < raceAttempts; first = false {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			argv := strings.Split(string(cl), "\x00")
			if err != nil || len(argv) < 2 || argv[0] != exe || !ownedBy(pid, attackUID) {
				continue
			}
			if argv[1] == spawner.RunnerSubcommand {
				r.RunnerAttacks++
			} else {
				r.OtherAttacks++
			}
			for what, got := range steal(pid) {
				if got == "ok" {
					r.Succeeded[what]++
				}
			}
		}
		if first {
			fmt.Println("looping")
		}
	}
	json.NewEncoder(os.Stdout).Encode(r)
	return 0
}

// raceResult is what the racing attacker reports.
type raceResult struct {
	RunnerAttacks int            // attacks on a process already executing `vm-run`
	OtherAttacks  int            // attacks on the spawner's child before its execve
	Succeeded     map[string]int // attempts that worked, by kind (want none)
}

// ownedBy reports whether pid's real uid is uid (/proc/<pid>/status is world-readable).
func ownedBy(pid, uid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	return err == nil && bytes.Contains(b, []byte(fmt.Sprintf("\nUid:\t%d\t", uid)))
}

// TestRunnerRaceNotDumpable: the owner races the real spawner starting a real runner from
// the helper's execute-only copy: an attacker of the runner's uid scans and attacks in a
// tight loop from before the spawn request until it has attacked the running runner
// raceAttempts times (the runner waits for its config meanwhile). Every attempt (list,
// open and pidfd_getfd its descriptors, its exe link and file, PTRACE_SEIZE) fails.
func TestRunnerRaceNotDumpable(t *testing.T) {
	testenv.RequireRoot(t)
	self, err := SelfCopy(publicTempDir(t))
	if err != nil {
		t.Fatal(err)
	}
	sp, err := spawner.Start(self)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	att := exec.Command(publicTestBinary(t))
	att.Env = []string{childEnv + "=race", "BROOD_TEST_EXE=" + self}
	att.Dir = "/"
	asUser(att)
	out, err := att.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := att.Start(); err != nil {
		t.Fatal(err)
	}
	defer att.Process.Kill()
	rd := bufio.NewReader(out)
	if l, err := rd.ReadString('\n'); l != "looping\n" {
		t.Fatalf("attacker: %q, %v", l, err)
	}
	files, ctl := runnerFiles(t)
	pid, pidfd, err := sp.Spawn(spawner.Request{UID: attackUID, GID: attackUID}, files)
	closeTestFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	defer pidfd.Close()
	var r raceResult
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		t.Fatalf("attacker report: %v", err)
	}
	ctl.Close() // the runner ends: no config
	att.Wait()
	t.Logf("runner pid %d: %d attacks while it ran, %d on the spawner's child before its execve", pid, r.RunnerAttacks, r.OtherAttacks)
	if len(r.Succeeded) != 0 {
		t.Errorf("the owner got at the runner: %v", r.Succeeded)
	}
}

// runnerFiles returns a spawn request's descriptors (a stderr sink, then the runner's
// 3..8 with the right types: a control socket, two directories, three regular files) and
// the test's end of the control socket.
func runnerFiles(t *testing.T) ([]*os.File, *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctl := os.NewFile(uintptr(fds[0]), "ctl")
	t.Cleanup(func() { ctl.Close() })
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	files := []*os.File{devnull, os.NewFile(uintptr(fds[1]), "ctl-runner")}
	dir := t.TempDir()
	files = append(files, testenv.RunnerFiles(t, dir, dir, dir)...)
	return files, ctl
}

func closeTestFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// dumpableChild runs the re-executed test binary's mode for these tests.
func dumpableChild(mode string) int {
	switch mode {
	case "hold":
		return childHold()
	case "steal":
		return childSteal()
	default:
		return childRace()
	}
}
