package egress

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
)

// raceNetnsEnv carries the bed's netns names to the re-executed scenario.
const raceNetnsEnv = "BROOD_EGRESS_RACE_NETNS"

// raceAttempts is how many attacks the racing owner makes on a started egress process.
const raceAttempts = 300

// sessionUID is the uid the scenarios start egress processes as.
const sessionUID = 1000

// raceReport is what the racing owner reports.
type raceReport struct {
	ProxyAttacks int            // attacks on a process executing egress-proxy
	Succeeded    map[string]int // attempts that worked, by kind (want none)
}

// raceMain (args: a uid) is the session owner racing the daemon: from before the session
// starts (it prints "looping" after its first pass) it scans /proc in a tight loop for
// processes of the uid executing ProxySubcommand and attacks each at once (ownerAttacks),
// until it has made raceAttempts attacks; then it prints a raceReport as JSON.
func raceMain(args []string) int {
	uid, _ := strconv.Atoi(args[0])
	r := raceReport{Succeeded: map[string]int{}}
	for first := true; r.ProxyAttacks < raceAttempts; first = false {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			argv := strings.Split(string(cl), "\x00")
			if err != nil || len(argv) < 2 || argv[1] != ProxySubcommand || !uidIs(pid, uid) {
				continue
			}
			r.ProxyAttacks++
			for what, ok := range ownerAttacks(pid) {
				if ok {
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

// ownerAttacks makes the attacks of a same-uid process on pid and reports which worked:
// open its memory, list its descriptors, take its control socket (descriptor 3) with
// pidfd_getfd, PTRACE_SEIZE it (detaching again).
func ownerAttacks(pid int) map[string]bool {
	r := map[string]bool{}
	if f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid)); err == nil {
		f.Close()
		r["open /proc/PID/mem"] = true
	}
	if _, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		r["list fds"] = true
	}
	if pidfd, err := unix.PidfdOpen(pid, 0); err == nil {
		if fd, err := unix.PidfdGetfd(pidfd, procFDCtl, 0); err == nil {
			unix.Close(fd)
			r["pidfd_getfd"] = true
		}
		unix.Close(pidfd)
	}
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, 0, 0, 0); e == 0 {
		unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(pid), 0, 0, 0, 0)
		r["ptrace"] = true
	}
	return r
}

// uidIs reports whether pid's real uid is uid (/proc/PID/status is world-readable).
func uidIs(pid, uid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	return err == nil && bytes.Contains(b, []byte(fmt.Sprintf("\nUid:\t%d\t", uid)))
}

// TestEgressRaceNotDumpable: the session owner races the daemon's start of a session's
// egress process (with secret bindings) from an execute-only binary, as the daemon runs
// it (helper.SelfCopy: root-owned, mode 0711): an attacker of the session's uid scans
// and attacks in a tight loop from before the start until it has attacked the running
// process raceAttempts times. None of its attempts (open /proc/PID/mem, list the
// descriptors, pidfd_getfd the control socket, PTRACE_SEIZE) works: the kernel makes the
// process non-dumpable at its execve, before its own prctl.
func TestEgressRaceNotDumpable(t *testing.T) {
	if v := os.Getenv(raceNetnsEnv); v != "" {
		raceScenario(t, strings.Split(v, ","))
		return
	}
	runInHost(t, "TestEgressRaceNotDumpable", raceNetnsEnv, newEgressBed(t), unitCaps)
}

func raceScenario(t *testing.T, names []string) {
	e, _ := secretsManager(t, names)
	e.ProxyExe = executeOnlyCopy(t, e.ProxyExe)
	att := exec.Command(publicTestBinary(t), raceChild, strconv.Itoa(sessionUID))
	asProbeUID(att, sessionUID)
	att.Dir = "/"
	out, err := att.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := att.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { att.Process.Kill(); att.Wait() }()
	rd := bufio.NewReader(out)
	if l, err := rd.ReadString('\n'); l != "looping\n" {
		t.Fatalf("attacker: %q, %v", l, err)
	}
	bindings := []api.SecretBinding{{Name: "$API_KEY", Placeholder: phAPI, Value: canaryAPI, Hosts: []string{"api.bound.test"}}}
	s, err := e.Start(api.StartVMArgs{ID: "race0001", Egress: "locked", Agent: "shell", Secrets: &api.SessionSecrets{Bindings: bindings}}, sessionUID, sessionUID)
	if err != nil {
		t.Fatal(err)
	}
	var r raceReport
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		t.Fatalf("attacker report: %v", err)
	}
	t.Logf("egress process %d: %d attacks from its start on", s.proc.cmd.Process.Pid, r.ProxyAttacks)
	if len(r.Succeeded) != 0 {
		t.Errorf("the owner got at the egress process: %v", r.Succeeded)
	}
	if _, err := e.Stop("race0001"); err != nil {
		t.Error(err)
	}
}

// executeOnlyCopy copies the binary at src to a root-owned file of mode 0711 in a new
// directory everyone may search, as helper.SelfCopy does, and returns its path.
func executeOnlyCopy(t *testing.T, src string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "brood-egress-xo-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	p := filepath.Join(dir, "broodd-helper")
	if err := os.WriteFile(p, data, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o711); err != nil {
		t.Fatal(err)
	}
	return p
}
