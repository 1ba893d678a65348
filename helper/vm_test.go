//go:build linux

package helper

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress"
	"brood.dev/brood/helper/runner"
	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/helper/vmhost"
	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/vmtest"
)

// vmChild runs the re-executed children of the VM tests: the helper under test
// re-executes this binary as its runner spawner and runners (with a scrubbed environment,
// so only argv tells), and the tests start VM clients.
func vmChild(env string) (int, bool) {
	switch {
	case env == "" && len(os.Args) > 1 && (os.Args[1] == spawner.Subcommand || os.Args[1] == spawner.BuildSubcommand):
		addTinyRecipe() // the spawner and the build child know the test recipe (build_vm_test.go)
		return Main(os.Args[1:]), true
	case env == "" && len(os.Args) > 1 && (os.Args[1] == spawner.RunnerSubcommand || os.Args[1] == egress.ProxySubcommand ||
		os.Args[1] == UnpackSubcommand):
		return Main(os.Args[1:]), true
	case env == "vmclient":
		return childVMClient(), true
	}
	return 0, false
}

// --- the VM client: a re-executed test binary under another uid, driven line by line --

// vmCmd is one step of the VM client (JSON, one per line on its stdin).
type vmCmd struct {
	Op      string `json:"op"` // create, start, run, close, wait, egresslog, stop, destroy, list, attach, policy
	Dir     string `json:"dir,omitempty"`
	ID      string `json:"id,omitempty"`
	Cmd     string `json:"cmd,omitempty"`
	Timeout int    `json:"timeout,omitempty"`
	Image   string `json:"image,omitempty"`  // start: default "test"
	Key     string `json:"key,omitempty"`    // start: replaces the client key
	Egress  string `json:"egress,omitempty"` // start: egress profile (empty: no network)
	// Secrets: start's secret bindings.
	Secrets *api.SessionSecrets `json:"secrets,omitempty"`
}

// vmOut is the answer to a vmCmd (JSON, one per line on its stdout).
type vmOut struct {
	Code     string        `json:"code"` // "" ok, a helper error code, or "io: ..."
	Session  api.Session   `json:"session"`
	Sessions []api.Session `json:"sessions,omitempty"`
	Info     api.VMInfo    `json:"info"`
	Exit     api.VMExit    `json:"exit"`
	Stdout   string        `json:"stdout,omitempty"`
	Policy   api.Policy    `json:"policy"`           // policy: resolve_policy's answer
	Millis   int64         `json:"millis,omitempty"` // start: start_vm call; run: start_vm → command done
}

func childVMClient() int {
	sock := os.Getenv("BROOD_TEST_SOCK")
	c, err := api.Dial(context.Background(), sock)
	enc := json.NewEncoder(os.Stdout)
	if err != nil {
		enc.Encode(vmOut{Code: "io: " + err.Error()})
		return 0
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	var hostKey ssh.PublicKey
	var client *ssh.Client
	var started time.Time
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var cmd vmCmd
		if err := json.Unmarshal(sc.Bytes(), &cmd); err != nil {
			enc.Encode(vmOut{Code: "io: " + err.Error()})
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		var out vmOut
		switch cmd.Op {
		case "create":
			var f *os.File
			if f, err = api.OpenShare(cmd.Dir); err == nil {
				out.Session, err = c.CreateSession(ctx, f)
				f.Close()
			}
		case "list":
			out.Sessions, err = c.ListSessions(ctx)
		case "start":
			t0 := time.Now()
			img, key := cmd.Image, cmd.Key
			if img == "" {
				img = "test"
			}
			if key == "" {
				key = string(ssh.MarshalAuthorizedKey(signer.PublicKey()))
			}
			out.Info, err = c.StartVM(ctx, api.StartVMArgs{
				ID: cmd.ID, Image: img, CPUs: 1, MemoryMiB: 512, TimeoutSec: cmd.Timeout,
				ClientKey: key, Clock: time.Now().Unix(), Egress: cmd.Egress, Agent: "shell", Secrets: cmd.Secrets,
			})
			out.Millis = time.Since(t0).Milliseconds()
			if err == nil {
				started = t0
				hostKey, _, _, _, err = ssh.ParseAuthorizedKey([]byte(out.Info.HostKey))
			}
		case "attach": // attach only (permission checks)
			var f *os.File
			if f, err = c.Attach(ctx, cmd.ID); err == nil {
				f.Close()
			}
		case "run":
			if client == nil {
				client, err = attachSSH(ctx, c, cmd.ID, signer, hostKey)
			}
			if err == nil {
				var s *ssh.Session
				if s, err = client.NewSession(); err == nil {
					var b []byte
					b, err = s.CombinedOutput(cmd.Cmd)
					out.Stdout = string(b)
					s.Close()
				}
			}
			out.Millis = time.Since(started).Milliseconds()
		case "close":
			if client != nil {
				err = client.Close()
				client = nil
			}
		case "wait":
			out.Exit, err = c.WaitVM(ctx, cmd.ID)
			out.Millis = time.Since(started).Milliseconds()
		case "egresslog": // egress_log: the file's content in Stdout
			out.Stdout, err = readEgressLog(ctx, c, cmd.ID)
		case "policy": // resolve_policy with the egress inputs "start" sends
			out.Policy, err = c.ResolvePolicy(ctx, api.ResolvePolicyArgs{Egress: cmd.Egress, Agent: "shell"})
		case "stop":
			err = c.StopVM(ctx, cmd.ID)
		case "destroy":
			err = c.DestroySession(ctx, cmd.ID)
		default:
			err = fmt.Errorf("unknown op %q", cmd.Op)
		}
		cancel()
		if err != nil {
			var e *api.Error
			if errors.As(err, &e) {
				out.Code = string(e.Code)
			} else {
				out.Code = "io: " + err.Error()
			}
		}
		enc.Encode(out)
	}
	return 0
}

// attachSSH opens the SSH connection over the descriptor Attach returns, pinning the
// host key from VMInfo and authenticating with the client key passed to StartVM.
func attachSSH(ctx context.Context, c *api.Client, id string, signer ssh.Signer, hostKey ssh.PublicKey) (*ssh.Client, error) {
	f, err := c.Attach(ctx, id)
	if err != nil {
		return nil, err
	}
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(2 * time.Minute))
	cfg := &ssh.ClientConfig{
		User:              "agent",
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback:   ssh.FixedHostKey(hostKey),
		HostKeyAlgorithms: []string{hostKey.Type()},
	}
	sc, chans, reqs, err := ssh.NewClientConn(nc, "brood-guest", cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return ssh.NewClient(sc, chans, reqs), nil
}

// vmClient is a running VM client process.
type vmClient struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Scanner
	cmd *exec.Cmd
}

func startVMClient(t *testing.T, sock string, uid uint32) *vmClient {
	t.Helper()
	cmd := exec.Command(publicTestBinary(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=vmclient", "BROOD_TEST_SOCK="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	cmd.Stderr = os.Stderr
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
	vc := &vmClient{t: t, in: in, out: bufio.NewScanner(out), cmd: cmd}
	vc.out.Buffer(nil, 1<<20)
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	return vc
}

// do runs one step and returns its answer.
func (vc *vmClient) do(c vmCmd) vmOut {
	vc.t.Helper()
	b, _ := json.Marshal(c)
	if _, err := vc.in.Write(append(b, '\n')); err != nil {
		vc.t.Fatalf("vm client %s: %v", c.Op, err)
	}
	if !vc.out.Scan() {
		vc.t.Fatalf("vm client %s: no answer (%v)", c.Op, vc.out.Err())
	}
	var o vmOut
	if err := json.Unmarshal(vc.out.Bytes(), &o); err != nil {
		vc.t.Fatalf("vm client %s: %q: %v", c.Op, vc.out.Bytes(), err)
	}
	return o
}

// must runs a step that must succeed.
func (vc *vmClient) must(c vmCmd) vmOut {
	vc.t.Helper()
	o := vc.do(c)
	if o.Code != "" {
		vc.t.Fatalf("vm client %s %s: %s", c.Op, c.ID, o.Code)
	}
	return o
}

// --- the helper under test ------------------------------------------------------------

// vmHelper is a broodd-helper child (--listen) booting the vmtest assets from
// /var/lib/brood, serving uids 4242 and 4243.
type vmHelper struct {
	hc      *helperChild
	sock    string
	runtime string
}

func startVMHelper(t *testing.T, extraConfig string) *vmHelper {
	t.Helper()
	return startVMHelperEnv(t, extraConfig, nil)
}

// startVMHelperEnv is startVMHelper with env added to the helper child's environment.
func startVMHelperEnv(t *testing.T, extraConfig string, env []string) *vmHelper {
	t.Helper()
	a := vmtest.Get(t)
	base := t.TempDir()
	pub := publicTempDir(t)
	sock := filepath.Join(pub, "helper.sock")
	cfg := writeConfig(t, base, fmt.Sprintf("allow_uids = [4242, 4243]\nkernel_release = %q\ninitramfs = %q\n%s",
		a.Kernel.Release, filepath.Base(a.Initramfs), extraConfig))
	runtime := filepath.Join(pub, "run")            // the VMM copy under it must be reachable by runners
	stateDir := filepath.Dir(filepath.Dir(a.Image)) // /var/lib/brood: kernels/ and images/
	hc := startHelperChild(t, env, nil, "--config", cfg, "--runtime-dir", runtime, "--state-dir", stateDir,
		"--listen", sock, "--idle-timeout", "0")
	serveHelper(t, hc, sock)
	return &vmHelper{hc: hc, sock: sock, runtime: runtime}
}

// proc describes a process from /proc.
type proc struct {
	pid    int
	status map[string]string
	fds    map[int]string // fd → readlink target
}

func readProc(t *testing.T, pid int) proc {
	t.Helper()
	p := proc{pid: pid, status: map[string]string{}, fds: map[int]string{}}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			p.status[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		n, _ := strconv.Atoi(e.Name())
		p.fds[n], _ = os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
	}
	return p
}

// findVMM returns the runner and QEMU pids of session id: the processes whose fd 5 is
// the session's run directory.
func findVMM(t *testing.T, runtime, id string) (runnerPid, vmm int) {
	t.Helper()
	want := filepath.Join(runtime, vmhost.RunParent, id)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, runner.FDRunDir)); l != want {
			continue
		}
		cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		switch argv := strings.Split(string(cl), "\x00"); {
		case len(argv) > 1 && argv[1] == spawner.RunnerSubcommand:
			runnerPid = pid
		case strings.Contains(argv[0], "qemu-system"):
			vmm = pid
		}
	}
	if runnerPid == 0 || vmm == 0 {
		t.Fatalf("session %s: runner pid %d, VMM pid %d (want both)", id, runnerPid, vmm)
	}
	return runnerPid, vmm
}

// socketInodes returns the "socket:[N]" targets among pid's descriptors.
func socketInodes(t *testing.T, pid int) map[string]bool {
	m := map[string]bool{}
	for _, l := range readProc(t, pid).fds {
		if strings.HasPrefix(l, "socket:") {
			m[l] = true
		}
	}
	return m
}

// TestVMSessionEndToEnd: a user (uid 4242) creates a session on a share it owns, boots
// the test image, attaches, runs a command over SSH that writes into /workspace, ends the
// SSH connection (the guest powers off) and waits: "poweroff", the write is in the share.
// Meanwhile the runner and QEMU run as 4242 without capabilities, with no_new_privs,
// holding only the descriptors they need; uid 4243 can do nothing to the session.
func TestVMSessionEndToEnd(t *testing.T) {
	h := startVMHelper(t, "")
	work := publicTempDir(t)
	w := ownedDir(t, work, "w", 4242, 4242) // stands for W's parent: the share is inside
	share := ownedDir(t, w, "snapshot", 4242, 4242)
	if err := os.WriteFile(filepath.Join(share, "README.md"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Join(share, "README.md"), 4242, 4242)

	a := startVMClient(t, h.sock, 4242)
	id := a.must(vmCmd{Op: "create", Dir: share}).Session.ID
	// Refused starts leave the session "created".
	for _, tc := range []struct {
		c    vmCmd
		want api.Code
	}{
		{vmCmd{Op: "start", ID: id, Image: "no-such-image"}, api.CodeUnavailable},
		{vmCmd{Op: "start", ID: id, Image: "../test"}, api.CodeBadRequest},
		{vmCmd{Op: "start", ID: id, Key: "ssh-ed25519 AAAA"}, api.CodeBadRequest},
		{vmCmd{Op: "attach", ID: id}, api.CodeState},
		{vmCmd{Op: "wait", ID: id}, api.CodeState},
	} {
		if o := a.do(tc.c); o.Code != string(tc.want) {
			t.Errorf("%s %+v: %q, want %s", tc.c.Op, tc.c, o.Code, tc.want)
		}
	}
	if l := a.must(vmCmd{Op: "list"}).Sessions; len(l) != 1 || l[0].State != api.SessionCreated {
		t.Errorf("sessions after refused starts: %+v", l)
	}
	st := a.must(vmCmd{Op: "start", ID: id, Timeout: 180})
	if st.Info.Accel == "" || st.Info.Backend != "qemu" || !strings.HasPrefix(st.Info.HostKey, "ssh-ed25519 ") {
		t.Errorf("VMInfo = %+v", st.Info)
	}
	if st.Info.Accel == sandbox.AccelTCG && st.Info.Warning == "" {
		t.Errorf("TCG without a warning: %+v", st.Info)
	}
	run := a.must(vmCmd{Op: "run", ID: id, Cmd: "echo from-guest > /workspace/out.txt && cat /workspace/README.md && id -u"})
	if run.Stdout != "hello\n4242\n" {
		t.Errorf("guest command output %q, want README and uid 4242", run.Stdout)
	}
	if l := a.must(vmCmd{Op: "list"}).Sessions; len(l) != 1 || l[0].State != api.SessionRunning {
		t.Errorf("sessions while running: %+v", l)
	}

	// The runner and the VMM: uid, capabilities, no_new_privs, descriptors.
	runnerPid, vmm := findVMM(t, h.runtime, id)
	runDir := filepath.Join(h.runtime, vmhost.RunParent, id)
	// Both sit in the owner's cgroup (cgroup_linux.go), placed by the confined helper.
	if _, err := cgroup2Mount(); err == nil {
		want := "0::/" + cgroupSlice + "/" + userCgroupName(4242) + "\n"
		for _, pid := range []int{runnerPid, vmm} {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); !strings.Contains(string(b), want) {
				t.Errorf("/proc/%d/cgroup = %q, %v; want the line %q", pid, b, err, want)
			}
		}
	}
	helperSockets := socketInodes(t, h.hc.cmd.Process.Pid)
	for _, pid := range []int{runnerPid, vmm} {
		p := readProc(t, pid)
		if p.status["Uid"] != "4242 4242 4242 4242" || p.status["Gid"] != "4242 4242 4242 4242" || p.status["Groups"] != "" {
			t.Errorf("pid %d: Uid %q Gid %q Groups %q, want 4242 and no groups", pid, p.status["Uid"], p.status["Gid"], p.status["Groups"])
		}
		// procfs hands /proc/<pid> of a non-dumpable process to root.
		if fi, err := os.Stat(fmt.Sprintf("/proc/%d/fd", pid)); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("pid %d is dumpable (its /proc/<pid>/fd belongs to the user): %v", pid, err)
		}
		if p.status["CapEff"] != "0000000000000000" || p.status["CapPrm"] != "0000000000000000" || p.status["NoNewPrivs"] != "1" {
			t.Errorf("pid %d: CapEff %s CapPrm %s NoNewPrivs %s", pid, p.status["CapEff"], p.status["CapPrm"], p.status["NoNewPrivs"])
		}
		for fd, target := range p.fds {
			switch {
			case helperSockets[target]:
				t.Errorf("pid %d fd %d is one of the helper's sockets (%s)", pid, fd, target)
			case target == w || target == work || target == os.Getenv("HOME") || target == "/" || target == filepath.Dir(runDir):
				t.Errorf("pid %d fd %d: %s (W's parent, $HOME or another directory)", pid, fd, target)
			case strings.HasPrefix(target, "/") && !strings.HasPrefix(target, "/dev/"):
				if fi, err := os.Stat(target); err == nil && fi.IsDir() && target != share && target != runDir {
					t.Errorf("pid %d fd %d: directory %s (only the share and the run dir are allowed)", pid, fd, target)
				}
			}
		}
		if p.fds[runner.FDShare] != share || p.fds[runner.FDRunDir] != runDir {
			t.Errorf("pid %d: fd 4 %q fd 5 %q, want the share and the run dir", pid, p.fds[runner.FDShare], p.fds[runner.FDRunDir])
		}
	}
	if readProc(t, vmm).status["Seccomp"] != "2" || readProc(t, runnerPid).status["Seccomp"] != "2" {
		t.Errorf("QEMU or its runner runs without a seccomp filter")
	}
	// Both in one new network namespace (the spawner's), not the helper's; the runner
	// executed from the helper's execute-only copy.
	helperNS, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", h.hc.cmd.Process.Pid))
	runnerNS, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", runnerPid))
	vmmNS, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", vmm))
	if runnerNS == "" || runnerNS == helperNS || vmmNS != runnerNS {
		t.Errorf("network namespaces: helper %s, runner %s, VMM %s (want the runner's new one for both)", helperNS, runnerNS, vmmNS)
	}
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", runnerPid)); exe != SelfCopyPath(h.runtime, publicTestBinary(t)) {
		t.Errorf("runner executes %q, want the execute-only copy %s", exe, SelfCopyPath(h.runtime, publicTestBinary(t)))
	}

	// Another user can do nothing to the session.
	b := startVMClient(t, h.sock, 4243)
	for _, op := range []string{"start", "attach", "stop", "wait", "destroy"} {
		if o := b.do(vmCmd{Op: op, ID: id, Timeout: 5}); o.Code != string(api.CodePermissionDenied) {
			t.Errorf("uid 4243 %s on uid 4242's session: %q, want permission_denied", op, o.Code)
		}
	}
	if o := a.do(vmCmd{Op: "start", ID: id}); o.Code != string(api.CodeState) {
		t.Errorf("second start_vm: %q, want bad_state", o.Code)
	}

	// End the SSH connection: the guest powers off.
	a.must(vmCmd{Op: "close"})
	ex := a.must(vmCmd{Op: "wait", ID: id})
	if ex.Exit.Outcome != api.OutcomePoweroff {
		t.Errorf("wait_vm = %+v, want poweroff", ex.Exit)
	}
	t.Logf("start_vm call %d ms; start_vm → first SSH command done %d ms; start_vm → VM gone %d ms (accel %s)",
		st.Millis, run.Millis, ex.Millis, st.Info.Accel)
	got, err := os.ReadFile(filepath.Join(share, "out.txt"))
	if string(got) != "from-guest\n" {
		t.Errorf("share out.txt = %q, %v", got, err)
	}
	if fi, err := os.Stat(filepath.Join(share, "out.txt")); err == nil && fi.Sys().(*syscall.Stat_t).Uid != 4242 {
		t.Errorf("out.txt owned by uid %d, want 4242", fi.Sys().(*syscall.Stat_t).Uid)
	}
	if alive(vmm) || alive(runnerPid) {
		t.Errorf("VMM %d or runner %d alive after wait_vm", vmm, runnerPid)
	}
	if _, err := os.Lstat(runDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run dir %s left behind: %v", runDir, err)
	}
	if l := a.must(vmCmd{Op: "list"}).Sessions; len(l) != 1 || l[0].State != api.SessionStopped {
		t.Errorf("sessions after the VM: %+v", l)
	}
	a.must(vmCmd{Op: "destroy", ID: id})
}

// TestVMTimeoutStopDestroy: a guest nobody attaches to hangs until its timeout (wait_vm
// "timeout", the VMM is killed, the session is still listed); stop_vm stops a running VM
// ("stopped"); destroy_session of a running VM stops it and removes the session. The
// helper's request read timeout is 1 s: wait_vm blocking for 3 s must not trip it.
func TestVMTimeoutStopDestroy(t *testing.T) {
	h := startVMHelper(t, "read_timeout_seconds = 1\n")
	work := publicTempDir(t)
	a := startVMClient(t, h.sock, 4242)
	ids := map[string]string{}
	for _, n := range []string{"hang", "stop", "destroy"} {
		share := ownedDir(t, work, n, 4242, 4242)
		ids[n] = a.must(vmCmd{Op: "create", Dir: share}).Session.ID
	}
	// 15 s: under TCG on a loaded 2-core host, with two more VMs booting beside it, the
	// kernel has been seen to print nothing in the first 6 s; the wait below costs no
	// more than the timeout, and the console tail must not be empty.
	a.must(vmCmd{Op: "start", ID: ids["hang"], Timeout: 15})
	_, hangVMM := findVMM(t, h.runtime, ids["hang"])
	a.must(vmCmd{Op: "start", ID: ids["stop"], Timeout: 120})
	a.must(vmCmd{Op: "start", ID: ids["destroy"], Timeout: 120})
	stopRunner, stopVMM := findVMM(t, h.runtime, ids["stop"])
	_, destroyVMM := findVMM(t, h.runtime, ids["destroy"])

	// A client killed while it waits does not keep its call (and connection) alive
	// until the VM ends.
	waiter := startVMClient(t, h.sock, 4242)
	req, _ := json.Marshal(vmCmd{Op: "wait", ID: ids["stop"]})
	waiter.in.Write(append(req, '\n'))
	time.Sleep(300 * time.Millisecond)
	waiter.cmd.Process.Kill()
	waiter.cmd.Wait()
	line := fmt.Sprintf("pid=%d call=wait_vm", waiter.cmd.Process.Pid)
	deadline := time.Now().Add(3 * time.Second)
	for !strings.Contains(h.hc.stderr.String(), line) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(h.hc.stderr.String(), line) {
		t.Errorf("wait_vm of a killed client still pending (no %q in the log)", line)
	}

	ex := a.must(vmCmd{Op: "wait", ID: ids["hang"]})
	if ex.Exit.Outcome != api.OutcomeTimeout || ex.Exit.ConsoleTail == "" {
		t.Errorf("hung guest: wait_vm = %q %q (console %d bytes), want timeout with a console tail", ex.Exit.Outcome, ex.Exit.Detail, len(ex.Exit.ConsoleTail))
	}
	if alive(hangVMM) {
		t.Errorf("VMM %d alive after the timeout", hangVMM)
	}

	a.must(vmCmd{Op: "stop", ID: ids["stop"]})
	if alive(stopVMM) || alive(stopRunner) {
		t.Errorf("VMM %d / runner %d alive after stop_vm returned", stopVMM, stopRunner)
	}
	if ex := a.must(vmCmd{Op: "wait", ID: ids["stop"]}); ex.Exit.Outcome != api.OutcomeStopped {
		t.Errorf("stopped VM: wait_vm = %+v, want stopped", ex.Exit)
	}
	a.must(vmCmd{Op: "stop", ID: ids["stop"]}) // idempotent

	a.must(vmCmd{Op: "destroy", ID: ids["destroy"]})
	if alive(destroyVMM) {
		t.Errorf("VMM %d alive after destroy_session", destroyVMM)
	}
	l := a.must(vmCmd{Op: "list"}).Sessions
	states := map[string]api.SessionState{}
	for _, s := range l {
		states[s.ID] = s.State
	}
	if len(l) != 2 || states[ids["hang"]] != api.SessionStopped || states[ids["stop"]] != api.SessionStopped {
		t.Errorf("sessions = %+v, want hang and stop listed as stopped, destroy gone", l)
	}
	ents, _ := os.ReadDir(filepath.Join(h.runtime, vmhost.RunParent))
	if len(ents) != 0 {
		t.Errorf("run dirs left: %v", ents)
	}

	// The connection that started a VM is its lease: silent for longer than
	// read_timeout_seconds while the VM boots or runs, it stays open; when the client
	// dies (SIGKILL) the helper stops the VM and destroys the session.
	lease := startVMClient(t, h.sock, 4242)
	lid := lease.must(vmCmd{Op: "create", Dir: ownedDir(t, work, "lease", 4242, 4242)}).Session.ID
	lease.must(vmCmd{Op: "start", ID: lid, Timeout: 120})
	leaseRunner, leaseVMM := findVMM(t, h.runtime, lid)
	time.Sleep(2500 * time.Millisecond) // read_timeout_seconds = 1
	lease.must(vmCmd{Op: "list"})
	lease.cmd.Process.Kill()
	lease.cmd.Wait()
	deadline = time.Now().Add(10 * time.Second)
	for (alive(leaseVMM) || alive(leaseRunner)) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(leaseVMM) || alive(leaseRunner) {
		t.Errorf("VMM %d / runner %d survive the client that started them", leaseVMM, leaseRunner)
	}
	// a's VMs are gone, so its connection was closed for idleness meanwhile (taking its
	// stopped sessions with it): a new client.
	a = startVMClient(t, h.sock, 4242)
	for _, s := range a.must(vmCmd{Op: "list"}).Sessions {
		if s.ID == lid {
			t.Errorf("session %s of the killed client still listed (%s)", lid, s.State)
		}
	}

	// The helper crashes with a VM running: its spawner, the runner and QEMU follow it
	// (socket EOF, then Pdeathsig); the next helper removes the run dir left behind.
	crash := a.must(vmCmd{Op: "create", Dir: ownedDir(t, work, "crash", 4242, 4242)}).Session.ID
	a.must(vmCmd{Op: "start", ID: crash, Timeout: 120})
	crashRunner, crashVMM := findVMM(t, h.runtime, crash)
	h.hc.cmd.Process.Kill()
	<-h.hc.done
	deadline = time.Now().Add(10 * time.Second)
	for (alive(crashVMM) || alive(crashRunner)) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(crashVMM) || alive(crashRunner) {
		t.Fatalf("VMM %d / runner %d survive the helper's crash", crashVMM, crashRunner)
	}
	left := filepath.Join(h.runtime, vmhost.RunParent, crash)
	if _, err := os.Lstat(left); err != nil {
		t.Fatalf("expected the crashed session's run dir %s: %v", left, err)
	}
	var base []string
	for i, arg := range h.hc.cmd.Args {
		if arg == "--listen" {
			base = append(h.hc.cmd.Args[1:i:i], "--listen", h.sock+"2", "--idle-timeout", "0")
		}
	}
	hc2 := startHelperChild(t, nil, nil, base...)
	waitDial(t, hc2, h.sock+"2", 20*time.Second).Close()
	if _, err := os.Lstat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run dir of the crashed helper's session survives a restart: %v\n%s", err, hc2.stderr.String())
	}
}

// readEgressLog returns the content of session id's egress_log descriptor.
func readEgressLog(ctx context.Context, c *api.Client, id string) (string, error) {
	f, err := c.EgressLog(ctx, id)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<30))
	return string(b), err
}
