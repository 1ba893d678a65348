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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/landlockabi"
	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox"
)

// The confinement probe: the test binary stands for broodd-helper (the spawner and the
// runner run their real Main) and for QEMU (the runner's qemu backend execs it with a
// QEMU command line, which TestMain recognises by "-M"). The fake VMM attacks what a QEMU
// escape would attack and prints the results on its console (stdout), which the runner
// reports in its exit event.

// probeUID is the session owner of the probed runner.
const probeUID = 4242

// probeSpecName is the file in the share that tells the fake VMM its targets.
const probeSpecName = "probe.json"

// probeSpec are the fake VMM's targets, made by the test.
type probeSpec struct {
	Secret   string // a file of the same uid outside the share (stands for the developer's)
	Sibling  int    // a process of the same uid outside the session (stands for the developer's)
	Agent    string // a listening pathname unix socket of the same uid (stands for ssh-agent)
	Abstract string // a listening abstract unix socket name (without the leading NUL)
}

// vmmProbe is the fake VMM: it runs every attack and prints the results as one JSON line.
func vmmProbe() int {
	var s probeSpec
	b, err := os.ReadFile(fdPath(FDShare) + "/" + probeSpecName)
	if err != nil || json.Unmarshal(b, &s) != nil {
		fmt.Println("probe: no spec:", err)
		return 3
	}
	json.NewEncoder(os.Stdout).Encode(vmmAttacks(s))
	return 0
}

// errString is "ok" for nil, else the error's text.
func errString(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// vmmAttacks are the attacks of the fake VMM, by name.
func vmmAttacks(s probeSpec) map[string]string {
	r := map[string]string{}
	for name, fam := range map[string]int{"inet": unix.AF_INET, "inet6": unix.AF_INET6, "packet": unix.AF_PACKET,
		"netlink": unix.AF_NETLINK, "vsock": unix.AF_VSOCK} {
		r["socket "+name] = errString(trySocket(fam, unix.SOCK_DGRAM))
	}
	r["socket inet stream"] = errString(trySocket(unix.AF_INET, unix.SOCK_STREAM))
	r["udp send"] = errString(udpSend())
	r["unix stream"] = errString(trySocket(unix.AF_UNIX, unix.SOCK_STREAM))
	r["unix dgram"] = errString(trySocket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC))
	_, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	r["socketpair dgram"] = errString(err)
	_, err = os.ReadFile(s.Secret)
	r["read outside"] = errString(err)
	r["write outside"] = errString(os.WriteFile(s.Secret+".new", []byte("x"), 0o644))
	_, err = os.Stat(s.Agent)
	r["stat agent"] = errString(err)
	r["connect agent"] = errString(unixConnect(&unix.SockaddrUnix{Name: s.Agent}))
	r["connect abstract"] = errString(unixConnect(&unix.SockaddrUnix{Name: "@" + s.Abstract}))
	r["kill sibling"] = errString(unix.Kill(s.Sibling, 0))
	r["kill runner"] = errString(unix.Kill(os.Getppid(), 0))
	r["kill self"] = errString(unix.Kill(os.Getpid(), 0))
	r["ptrace sibling"] = errString(ptraceSeize(s.Sibling))
	_, err = unix.ProcessVMReadv(s.Sibling, []unix.Iovec{{Base: &make([]byte, 1)[0], Len: 1}}, []unix.RemoteIovec{{Base: 0x400000, Len: 1}}, 0)
	r["process_vm_readv sibling"] = errString(err)
	r["runner threads signalable"] = signalableThreads(os.Getppid())
	_, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 8, uintptr(unsafe.Pointer(&[120]byte{})), 0)
	r["io_uring_setup"] = errString(errnoErr(e))
	r["interfaces"], r["lo"] = interfaces()
	r["set lo up"] = errString(setLoUp())
	r["unshare user+net"] = errString(unix.Unshare(unix.CLONE_NEWUSER | unix.CLONE_NEWNET))
	st, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(st), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && (k == "CapEff" || k == "CapPrm" || k == "Groups") {
			r[k] = strings.TrimSpace(v)
		}
	}
	um, _ := os.ReadFile("/proc/self/uid_map")
	r["uid_map"] = strings.Join(strings.Fields(string(um)), " ")
	r["netns"], _ = os.Readlink("/proc/self/ns/net")
	return r
}

// signalableThreads counts the threads of process pid that tgkill(pid, tid, 0) may
// signal, as "N of M".
func signalableThreads(pid int) string {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err.Error()
	}
	n := 0
	for _, e := range ents {
		var tid int
		fmt.Sscan(e.Name(), &tid)
		if unix.Tgkill(pid, tid, 0) == nil {
			n++
		}
	}
	return fmt.Sprintf("%d of %d", n, len(ents))
}

// ptraceSeize attaches to pid without stopping it (the tracer's exit detaches).
func ptraceSeize(pid int) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, 0, 0, 0)
	return errnoErr(e)
}

// errnoErr is nil for 0, else e.
func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// trySocket creates (and closes) a socket of family and typ.
func trySocket(family, typ int) error {
	fd, err := unix.Socket(family, typ, 0)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// udpSend tries to send one UDP datagram to 127.0.0.1:9 (discard).
func udpSend() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Sendto(fd, []byte("x"), 0, &unix.SockaddrInet4{Port: 9, Addr: [4]byte{127, 0, 0, 1}})
}

// unixConnect connects a new AF_UNIX stream socket to sa.
func unixConnect(sa *unix.SockaddrUnix) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, sa)
}

// interfaces lists the network interfaces of the caller's network namespace
// (/proc/self/net/dev) and whether lo is up (SIOCGIFFLAGS on an AF_UNIX socket).
func interfaces() (string, string) {
	b, err := os.ReadFile("/proc/self/net/dev")
	if err != nil {
		return err.Error(), ""
	}
	var names []string
	for _, l := range strings.Split(string(b), "\n")[2:] {
		if n, _, ok := strings.Cut(l, ":"); ok {
			names = append(names, strings.TrimSpace(n))
		}
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return strings.Join(names, ","), err.Error()
	}
	defer unix.Close(fd)
	ifr, _ := unix.NewIfreq("lo")
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return strings.Join(names, ","), err.Error()
	}
	if ifr.Uint16()&unix.IFF_UP != 0 {
		return strings.Join(names, ","), "up"
	}
	return strings.Join(names, ","), "down"
}

// setLoUp tries to bring lo up (SIOCSIFFLAGS: CAP_NET_ADMIN over the namespace).
func setLoUp() error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, _ := unix.NewIfreq("lo")
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// probeTargets makes the fake VMM's targets under pub and writes the spec into share:
// a sibling process of probeUID, a listening pathname socket owned by probeUID in a
// directory it owns (mode 0777: only seccomp stands in the way) and a listening abstract
// socket in the test's network namespace.
func probeTargets(t *testing.T, bin, pub, share string) probeSpec {
	t.Helper()
	sib := startSleeper(t, bin, &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: probeUID, Gid: probeUID, Groups: []uint32{}},
		Pdeathsig: syscall.SIGKILL})
	s := probeSpec{Secret: filepath.Join(pub, "agent", "secret"), Sibling: sib, Agent: filepath.Join(pub, "agent", "agent.sock"), Abstract: fmt.Sprintf("brood-probe-%d", os.Getpid())}
	os.Mkdir(filepath.Dir(s.Agent), 0o777)
	os.Chown(filepath.Dir(s.Agent), probeUID, probeUID)
	for _, name := range []string{s.Agent, "@" + s.Abstract} {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
	os.Chown(s.Agent, probeUID, probeUID)
	os.WriteFile(s.Secret, []byte("secret"), 0o644)
	os.Chown(s.Secret, probeUID, probeUID)
	os.Chmod(s.Agent, 0o777)
	b, _ := json.Marshal(s)
	if err := os.WriteFile(filepath.Join(share, probeSpecName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// spawnProbe starts the spawner (spawnerExe vm-spawn), asks it for a runner as probeUID on
// share and a run directory, sends the runner cfg and returns the runner's events until
// its exit event, the runner's pid, the spawner's effective capabilities (CapEff, hex)
// and the runner's stderr.
func spawnProbe(t *testing.T, spawnerExe, pub, share string, cfg Config) ([]Event, int, string, string) {
	t.Helper()
	sp, err := spawner.Start(spawnerExe)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	run := filepath.Join(pub, "run")
	os.Mkdir(run, 0o700)
	os.Chown(run, probeUID, probeUID)
	a, b, err := testSocketpair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	er, ew, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	files := []*os.File{ew, b}
	files = append(files, testenv.RunnerFiles(t, share, run, pub)...)
	pid, pidfd, err := sp.Spawn(spawner.Request{UID: probeUID, GID: probeUID}, files)
	closeFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	defer pidfd.Close()
	stderr := make(chan string, 1)
	go func() { b, _ := io.ReadAll(er); stderr <- string(b) }()
	nc, err := net.FileConn(a)
	if err != nil {
		t.Fatal(err)
	}
	conn := api.NewConn(nc.(*net.UnixConn))
	defer conn.Close()
	msg, _ := json.Marshal(cfg)
	if err := conn.WriteFrame(msg); err != nil {
		t.Fatal(err)
	}
	spawnerCaps := ""
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		ppid, _ := strings.CutPrefix(statusLine(string(st), "PPid"), "PPid:")
		pst, _ := os.ReadFile("/proc/" + strings.TrimSpace(ppid) + "/status")
		spawnerCaps = strings.TrimSpace(strings.TrimPrefix(statusLine(string(pst), "CapEff"), "CapEff:"))
	}
	var evs []Event
	for {
		body, got, err := conn.ReadFrame()
		closeFiles(got)
		if err != nil {
			break
		}
		var ev Event
		json.Unmarshal(body, &ev)
		evs = append(evs, ev)
		if ev.Event == EvExit || ev.Event == EvError {
			break
		}
	}
	conn.Close()
	er.Close()
	return evs, pid, spawnerCaps, <-stderr
}

// TestVMMConfinementProbe runs the real spawner and the real runner (as uid 4242, with
// require_landlock) on a fake VMM that attacks from inside the confinement QEMU gets:
// every socket family but AF_UNIX is refused (EAFNOSUPPORT, so no UDP send), AF_UNIX
// datagram sockets are refused (EAFNOSUPPORT), connecting to a pathname unix socket of
// the same uid (standing for ssh-agent; its path is reachable) or to an abstract one is
// refused (EPERM), signals to a process of the same uid and to the runner are refused
// while signals to itself work (Landlock's signal scope), so are ptrace and
// process_vm_readv of that process (Landlock refuses tracing outside the domain),
// io_uring is unavailable (ENOSYS), unshare is refused (EPERM), and its network namespace
// is not the host's, holds only lo, down, and cannot be configured (no capability: its
// user namespace maps only uid 4242, and it has no supplementary group). Once with the
// spawner as full root, once with the spawner held to the systemd unit's capability
// bounding set (no CAP_SYS_ADMIN), as in production.
func TestVMMConfinementProbe(t *testing.T) {
	testenv.RequireRoot(t)
	if abi, _ := llsys.LandlockGetABIVersion(); abi < landlockabi.Pinned {
		testenv.Skip(t, fmt.Sprintf("Landlock ABI %d < %d", abi, landlockabi.Pinned))
	}
	setpriv := testenv.RequireCommand(t, "setpriv")
	pub, err := os.MkdirTemp("", "brood-runner-probe-") // t.TempDir's parent is 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pub) })
	os.Chmod(pub, 0o755)
	bin := testenv.CopyTestBinary(t, pub) // the runner and the fake VMM run as probeUID
	share := filepath.Join(pub, "share")
	os.Mkdir(share, 0o755)
	os.Chown(share, probeUID, probeUID)
	probeTargets(t, bin, pub, share)
	// The spawner under the unit's bounding set: setpriv execs the test binary, which is
	// then the spawner's own executable (and so the runner's).
	wrapper := filepath.Join(pub, "spawner-unit-caps")
	script := fmt.Sprintf("#!/bin/sh\nexec %s --bounding-set -all,%s -- %s \"$@\"\n", setpriv, unitCapabilities(t), bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, spawner string
		unitCaps      bool
	}{{"root", bin, false}, {"unit capabilities", wrapper, true}} {
		t.Run(tc.name, func(t *testing.T) { probeOnce(t, tc.spawner, pub, share, bin, tc.unitCaps) })
	}
}

// unitCapabilities returns the systemd unit's CapabilityBoundingSet as setpriv's list
// ("+net_admin,+setuid,...").
func unitCapabilities(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../systemd/broodd-helper.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapabilityBoundingSet="); ok {
			var caps []string
			for _, c := range strings.Fields(v) {
				caps = append(caps, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
			}
			if slices.Contains(caps, "+sys_admin") {
				t.Fatalf("the unit grants CAP_SYS_ADMIN: this test assumes it does not")
			}
			return strings.Join(caps, ",")
		}
	}
	t.Fatal("no CapabilityBoundingSet in the unit")
	return ""
}

// statusLine returns the line of /proc/<pid>/status text st that starts with key.
func statusLine(st, key string) string {
	for _, l := range strings.Split(st, "\n") {
		if strings.HasPrefix(l, key+":") {
			return l
		}
	}
	return ""
}

// probeOnce runs the fake VMM through spawnerExe's spawner and checks every attack.
// unitCaps says the spawner runs with the unit's capability set.
func probeOnce(t *testing.T, spawnerExe, pub, share, bin string, unitCaps bool) {
	cfg := Config{Session: "probe", Backend: "qemu", VMM: bin, Accel: sandbox.AccelTCG, CPUs: 1,
		MemoryMiB: sandbox.MinMemoryMiB, TimeoutSec: 60, RequireLandlock: true}
	evs, runnerPid, spawnerCaps, stderr := spawnProbe(t, spawnerExe, pub, share, cfg)
	if caps, err := strconv.ParseUint(spawnerCaps, 16, 64); err != nil || (caps&(1<<unix.CAP_SYS_ADMIN) != 0) == unitCaps {
		t.Errorf("spawner CapEff %s (%v): CAP_SYS_ADMIN must be there exactly when the spawner runs as full root", spawnerCaps, err)
	}
	if len(evs) == 0 || evs[len(evs)-1].Event != EvExit || evs[len(evs)-1].Outcome != api.OutcomePoweroff {
		t.Fatalf("runner events %+v\nrunner stderr:\n%s", evs, stderr)
	}
	var got map[string]string
	tail := evs[len(evs)-1].ConsoleTail
	if err := json.Unmarshal([]byte(tail[strings.LastIndex(strings.TrimSpace(tail), "\n")+1:]), &got); err != nil {
		t.Fatalf("fake VMM console %q: %v", tail, err)
	}
	hostNetns, _ := os.Readlink("/proc/self/ns/net")
	eafnosupport, eperm := unix.EAFNOSUPPORT.Error(), unix.EPERM.Error()
	want := map[string]string{
		"socket inet": eafnosupport, "socket inet6": eafnosupport, "socket packet": eafnosupport,
		"socket netlink": eafnosupport, "socket vsock": eafnosupport, "socket inet stream": eafnosupport,
		"udp send": eafnosupport, "unix stream": "ok", "unix dgram": eafnosupport, "socketpair dgram": eafnosupport,
		"stat agent": "ok", "connect agent": eperm, "connect abstract": eperm,
		"read outside":  "open " + filepath.Join(pub, "agent", "secret") + ": permission denied",
		"write outside": "open " + filepath.Join(pub, "agent", "secret.new") + ": permission denied",
		"kill sibling":  eperm, "kill runner": eperm, "kill self": "ok",
		"ptrace sibling": eperm, "process_vm_readv sibling": eperm,
		"io_uring_setup": unix.ENOSYS.Error(), "interfaces": "lo", "lo": "down",
		"set lo up": eperm, "unshare user+net": eperm, "CapEff": "0000000000000000", "CapPrm": "0000000000000000",
		"Groups": "", "uid_map": fmt.Sprintf("%d %d 1", probeUID, probeUID),
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("fake VMM %s: %q, want %q", k, got[k], w)
		}
	}
	// The one runner thread the VMM may signal is the one that forked it (they share the
	// VMM's domain): it can end its own runner, so its own session, nothing else.
	if n, _, _ := strings.Cut(got["runner threads signalable"], " "); n != "1" {
		t.Errorf("fake VMM may signal %s runner threads, want exactly the one that forked it", got["runner threads signalable"])
	}
	if got["netns"] == "" || got["netns"] == hostNetns {
		t.Errorf("fake VMM network namespace %q, the test's is %q: want a new one", got["netns"], hostNetns)
	}
	t.Logf("runner pid %d (spawner CapEff %s), fake VMM netns %s (host %s), runner threads it may signal: %s",
		runnerPid, spawnerCaps, got["netns"], hostNetns, got["runner threads signalable"])
}

// TestLandlockMode: the pinned configuration at or above the pinned ABI, with the signal
// and abstract-socket scopes; below it best effort (degraded), or with require_landlock
// an error that names it.
func TestLandlockMode(t *testing.T) {
	for _, tc := range []struct {
		abi      int
		require  bool
		degraded bool
		err      bool
	}{
		{landlockabi.Pinned, true, false, false},
		{landlockabi.Pinned + 1, false, false, false},
		{landlockabi.Pinned - 1, false, true, false},
		{landlockabi.Pinned - 1, true, true, true},
		{0, true, true, true},
		{0, false, true, false},
	} {
		cfg, degraded, err := landlockMode(tc.abi, tc.require)
		if degraded != tc.degraded || (err != nil) != tc.err {
			t.Errorf("landlockMode(%d, %v) = degraded %v, err %v", tc.abi, tc.require, degraded, err)
		}
		if err != nil && (!errors.Is(err, ErrRunner) || !strings.Contains(err.Error(), "require_landlock")) {
			t.Errorf("landlockMode(%d, require): %v, want ErrRunner naming require_landlock", tc.abi, err)
		}
		if cfg.Scoped&(llsys.ScopeSignal|llsys.ScopeAbstractUnixSocket) != llsys.ScopeSignal|llsys.ScopeAbstractUnixSocket {
			t.Errorf("landlockMode(%d): the runner's own domain does not scope signals and abstract sockets", tc.abi)
		}
	}
}

// TestRequireLandlockRefuses: on a kernel below the pinned ABI (simulated), a runner whose
// config carries require_landlock refuses before it changes anything (no_new_privs is
// still off, so this runs in the test process), with an error naming require_landlock; its
// VMM confinement refuses the same way without IPC scopes.
func TestRequireLandlockRefuses(t *testing.T) {
	old := kernelABI
	kernelABI = func() (int, error) { return scopeABI - 1, nil }
	defer func() { kernelABI = old }()
	err := confine(discardLog(), Config{Accel: sandbox.AccelTCG, VMM: "/bin/true", RequireLandlock: true})
	if !errors.Is(err, ErrRunner) || !strings.Contains(err.Error(), "require_landlock") {
		t.Errorf("confine with require_landlock on ABI %d: %v", scopeABI-1, err)
	}
	if b, _ := os.ReadFile("/proc/self/status"); !strings.Contains(string(b), "NoNewPrivs:\t0") {
		t.Errorf("the refused confine changed the process (NoNewPrivs set)")
	}
	// The VMM thread's confinement refuses after its seccomp step: run it on a thread
	// that is thrown away (a locked goroutine that returns).
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		errc <- vmmThreadConfine(discardLog(), scopeABI-1, true)()
	}()
	if err := <-errc; !errors.Is(err, ErrRunner) || !strings.Contains(err.Error(), "require_landlock") {
		t.Errorf("VMM confinement with require_landlock on ABI %d: %v", scopeABI-1, err)
	}
}

// discardLog is a logger that drops everything.
func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestVMMScopes applies the VMM's own Landlock domain (restrictThreadScopes(vmmScopes))
// on a thread of the test process that is then thrown away: from that thread, connecting
// to an abstract unix socket of the same network namespace and signalling another process
// are refused (EPERM), while another thread of the process does both. This is the layer
// behind the seccomp connect filter and the empty network namespace. (Signals between the
// threads of one process are always allowed, Linux 6.15 on.)
func TestVMMScopes(t *testing.T) {
	if abi, _ := llsys.LandlockGetABIVersion(); abi < scopeABI {
		testenv.Skip(t, fmt.Sprintf("Landlock ABI %d has no IPC scopes (%d)", abi, scopeABI))
	}
	name := fmt.Sprintf("@brood-scope-%d", os.Getpid())
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Serve(t, l, nil)
	other := startSleeper(t, os.Args[0], nil)
	probe := func() [2]string {
		return [2]string{errString(unixConnect(&unix.SockaddrUnix{Name: name})), errString(unix.Kill(other, 0))}
	}
	type res struct {
		got [2]string
		err error
	}
	resc := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the restricted thread ends with the goroutine
		if err := restrictThreadScopes(vmmScopes); err != nil {
			resc <- res{err: err}
			return
		}
		resc <- res{got: probe()}
	}()
	r := <-resc
	if r.err != nil {
		t.Fatal(r.err)
	}
	if want := [2]string{unix.EPERM.Error(), unix.EPERM.Error()}; r.got != want {
		t.Errorf("from the VMM's domain: abstract connect %q, signal another process %q; want %q", r.got[0], r.got[1], want)
	}
	if got := probe(); got != [2]string{"ok", "ok"} {
		t.Errorf("from an unrestricted thread: abstract connect %q, signal %q; want both ok", got[0], got[1])
	}
}

// TestUnitCapsNeedUserNamespace is why the spawner makes a user namespace: held to the
// systemd unit's capability bounding set, root cannot clone a child into a new network
// namespace alone (EPERM: no CAP_SYS_ADMIN), but can into one inside a new user namespace.
func TestUnitCapsNeedUserNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	setpriv := testenv.RequireCommand(t, "setpriv")
	caps := unitCapabilities(t)
	for flags, want := range map[int]string{
		unix.CLONE_NEWNET:                      unix.EPERM.Error(),
		unix.CLONE_NEWUSER | unix.CLONE_NEWNET: "ok",
	} {
		cmd := exec.Command(setpriv, "--bounding-set", "-all,"+caps, "--", os.Args[0])
		cmd.Env = []string{childEnv + "=unshare", "BROOD_TEST_FLAGS=" + strconv.Itoa(flags)}
		out, err := cmd.Output()
		if got := strings.TrimSpace(string(out)); err != nil || got != want {
			t.Errorf("clone(%#x) with the unit's capabilities: %q, %v; want %q", flags, got, err, want)
		}
	}
}
