package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/assets"
	"brood.dev/brood/sandbox/guestcfg"
	"brood.dev/brood/sandbox/qemu"
)

// Sizes of the test VMs, smaller than a session's (sandbox.DefaultCPUs and
// DefaultMemoryMiB) to keep the tier-3 tests light on 2-core CI machines; the boot
// benchmark uses the session defaults.
const (
	testCPUs      = 1
	testMemoryMiB = 512
)

// envInt returns the integer in environment variable name, or def when it is unset.
func envInt(t testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// vmRun is one booted test VM.
type vmRun struct {
	vm     sandbox.VM
	keys   *guestcfg.Keys
	sock   string
	start  time.Time
	client *ssh.Client
}

// boot starts a VM on the assets with share as /workspace and extra kernel cmdline words.
func boot(t *testing.T, a *assets.Set, share string, timeout time.Duration, cmdline ...string) *vmRun {
	t.Helper()
	return bootB(t, a, share, timeout, cmdline...)
}

// bootB is boot for tests and benchmarks.
func bootB(t testing.TB, a *assets.Set, share string, timeout time.Duration, cmdline ...string) *vmRun {
	t.Helper()
	return bootNet(t, a, share, timeout, nil, nil, cmdline...)
}

// bootNet is bootB with a network: tap as the NIC and net as the guest's eth0 config.
func bootNet(t testing.TB, a *assets.Set, share string, timeout time.Duration, tap *os.File, net *guestcfg.Net, cmdline ...string) *vmRun {
	t.Helper()
	return bootCfg(t, a, share, timeout, tap, func(c *guestcfg.Config) { c.Net = net }, cmdline...)
}

// bootCfg is bootNet with the session config changed by set.
func bootCfg(t testing.TB, a *assets.Set, share string, timeout time.Duration, tap *os.File, set func(*guestcfg.Config), cmdline ...string) *vmRun {
	t.Helper()
	dir := t.TempDir()
	keys, err := guestcfg.NewKeys()
	if err != nil {
		t.Fatal(err)
	}
	cfg := keys.Config()
	set(&cfg)
	spec, err := a.Spec(dir, cfg, share)
	if err != nil {
		t.Fatal(err)
	}
	spec.Tap = tap
	spec.Timeout = timeout
	spec.Cmdline = cmdline
	return startVM(t, spec, keys, dir)
}

// startVM starts spec (keys are the session's; dir names the console log saved with
// BROOD_VMTEST_DEBUG) and stops the VM when the test ends. The VM gets
// testCPUs/testMemoryMiB unless BROOD_VMTEST_CPUS / BROOD_VMTEST_MEMORY_MIB say otherwise.
func startVM(t testing.TB, spec sandbox.Spec, keys *guestcfg.Keys, dir string) *vmRun {
	t.Helper()
	var err error
	spec.CPUs, spec.MemoryMiB = envInt(t, "BROOD_VMTEST_CPUS", testCPUs), envInt(t, "BROOD_VMTEST_MEMORY_MIB", testMemoryMiB)
	r := &vmRun{keys: keys, sock: spec.SSHSocket}
	if os.Getenv("BROOD_VMTEST_DEBUG") != "" { // a directory: brood-guest logs its steps, console saved there
		spec.Cmdline = append(spec.Cmdline, guestcfg.CmdlineDebug+"=1")
		// Extra kernel command line words for experiments; the kernel hands words it
		// does not know (GODEBUG=inittrace=1) to /init as environment variables.
		spec.Cmdline = append(spec.Cmdline, strings.Fields(os.Getenv("BROOD_VMTEST_CMDLINE"))...)
		t.Cleanup(func() {
			p := filepath.Join(os.Getenv("BROOD_VMTEST_DEBUG"), "console-"+filepath.Base(dir)+".log")
			t.Logf("console log in %s: %v", p, os.WriteFile(p, r.vm.ConsoleLog(), 0o644))
		})
	}
	r.start = time.Now()
	if r.vm, err = (&qemu.Backend{}).Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.vm.Stop()
		if t.Failed() {
			t.Logf("console log:\n%s", r.vm.ConsoleLog())
		}
	})
	return r
}

func (r *vmRun) dial(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if err := r.dialCtx(ctx); err != nil {
		t.Fatal(err)
	}
}

func (r *vmRun) dialCtx(ctx context.Context) error {
	c, err := guestcfg.Dial(ctx, r.sock, guestcfg.DefaultUser, r.keys)
	r.client = c
	return err
}

// run runs cmd in a new session and returns stdout, stderr and the exit status.
func (r *vmRun) run(t *testing.T, cmd string) (string, string, int) {
	t.Helper()
	s, err := r.client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr = &out, &errb
	err = s.Run(cmd)
	var ee *ssh.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitStatus()
	}
	t.Fatalf("run %q: %v", cmd, err)
	return "", "", -1
}

// closeAndWait ends the SSH connection (the session) and waits for the guest to power
// off and QEMU to exit.
func (r *vmRun) closeAndWait(t *testing.T) time.Duration {
	t.Helper()
	r.client.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := r.vm.Wait(ctx); err != nil {
		t.Fatalf("VM did not power off cleanly: %v", err)
	}
	return time.Since(r.start)
}

func shareWithReadme(t *testing.T) string {
	share := t.TempDir()
	if err := os.WriteFile(filepath.Join(share, "README.md"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The share is the snapshot, owned by the user the agent maps to (uid 1000).
	for _, p := range []string{share, filepath.Join(share, "README.md")} {
		if err := os.Chown(p, guestcfg.DefaultUID, guestcfg.DefaultGID); err != nil {
			t.Fatal(err)
		}
	}
	return share
}

// TestVMEndToEnd boots the test image twice on one share: the first boot changes the
// share and the overlay; the second sees the share change and not the overlay one.
func TestVMEndToEnd(t *testing.T) {
	a := Get(t)
	share := shareWithReadme(t)

	r := boot(t, a, share, 3*time.Minute)
	r.dial(t)
	out, errOut, code := r.run(t, `echo hi >> /workspace/README.md; git --version; echo x > /home/agent/x; id -u; pwd; echo x > /etc/x`)
	firstCmd := time.Since(r.start)
	if !strings.Contains(out, "git version") || !strings.Contains(out, "\n1000\n/workspace\n") {
		t.Errorf("stdout = %q, want git version, uid 1000, cwd /workspace", out)
	}
	if code == 0 || !strings.Contains(errOut, "/etc/x") {
		t.Errorf("writing /etc/x as the agent: status %d stderr %q; want refused", code, errOut)
	}
	// The agent must not reach the SSH channel's port, the rootfs disk or the console.
	if out, _, _ := r.run(t, "ls /dev/vport*p* /dev/vda >/dev/null || echo missing; for d in /dev/vport*p* /dev/vda /dev/ttyS0 /dev/mem; do head -c1 $d >/dev/null 2>&1 && echo readable $d; (true >>$d) 2>/dev/null && echo writable $d; done; echo done"); out != "done\n" {
		t.Errorf("agent can use host-facing devices: %q", out)
	}
	// The guest clock was set from the host's: it reads no earlier than the host clock
	// when QEMU started (brood.time) and no later than the host clock now. Under TCG on a
	// loaded host the guest clock may run slow, so no tighter bound holds; an unset clock
	// (1970) or one off by hours fails either way. One second of slack each side covers
	// `date +%s` truncating to whole seconds.
	before := time.Now()
	out, _, _ = r.run(t, "date +%s")
	guestNow, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	guest := time.Unix(guestNow, 0)
	if err != nil || guest.Before(r.start.Add(-time.Second)) || guest.After(time.Now().Add(time.Second)) {
		t.Errorf("guest clock %q (%v) is outside [QEMU start %v, host now %v] (asked at %v)",
			out, guest, r.start.Truncate(time.Second), time.Now().Truncate(time.Second), before.Truncate(time.Second))
	}
	// An orphan re-parented to PID 1 must be reaped when it exits.
	if out, _, _ := r.run(t, "sh -c 'sleep 0.2 &'; sleep 1.5; grep -l '^State:.*Z' /proc/[0-9]*/status | wc -l"); strings.TrimSpace(out) != "0" {
		t.Errorf("zombies after an orphan exited: %q, want 0", out)
	}
	if _, _, code := r.run(t, "exit 7"); code != 7 {
		t.Errorf("exit 7: status %d", code)
	}
	if out, _, _ := r.run(t, "cat /home/agent/x; env | sort"); !strings.HasPrefix(out, "x\n") ||
		strings.Contains(out, "BROOD") || !strings.Contains(out, "USER=agent") {
		t.Errorf("overlay file / env: %q", out)
	}
	if out, _, _ := r.run(t, "ls /sys/class/net; grep -c ' /workspace 9p ' /proc/mounts; cat /sys/class/net/lo/flags"); strings.TrimSpace(out) != "lo\n1\n0x9" {
		t.Errorf("network devices, share mount, lo flags: %q, want only lo, one 9p mount, lo up (0x9: IFF_UP|IFF_LOOPBACK)", out)
	}

	// PTY with a window change forwarded while the command runs.
	s, err := r.client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	// The window change is sent only after the command has printed its first size and
	// tty, and the command polls until the size changes, so no ordering depends on how
	// fast the guest runs (the test's timeout bounds the wait).
	var ptyErr bytes.Buffer
	s.Stderr = &ptyErr
	stdout, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(`stty size; tty; while [ "$(stty size)" = "24 80" ]; do sleep 0.1; done; stty size`); err != nil {
		t.Fatalf("start in a pty: %v (stderr %q)", err, ptyErr.String())
	}
	lines := bufio.NewReader(stdout)
	var first string
	for range 2 {
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("pty output before the window change: %q: %v", first+line, err)
		}
		first += line
	}
	if err := s.WindowChange(40, 120); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(lines)
	if err := s.Wait(); err != nil {
		t.Errorf("pty session: %v", err)
	}
	if got := strings.ReplaceAll(first+string(rest), "\r", ""); !strings.HasPrefix(got, "24 80\n/dev/pts/") || !strings.HasSuffix(got, "\n40 120\n") {
		t.Errorf("pty output %q, want 24 80, a /dev/pts tty, then 40 120", got)
	}
	whole := r.closeAndWait(t)
	t.Logf("first boot: QEMU start to first SSH command done %v, whole VM %v", firstCmd.Round(time.Millisecond), whole.Round(time.Millisecond))

	if b, _ := os.ReadFile(filepath.Join(share, "README.md")); string(b) != "hello\nhi\n" {
		t.Errorf("share README.md = %q, want the guest's append", b)
	}

	r2 := boot(t, a, share, 3*time.Minute)
	r2.dial(t)
	out, _, _ = r2.run(t, "cat /workspace/README.md; test -e /home/agent/x && echo survived || echo gone")
	if out != "hello\nhi\ngone\n" {
		t.Errorf("second boot: %q, want the share change kept and the overlay file gone", out)
	}
	// A command still running when the client hangs up must not keep the VM alive.
	s2, err := r2.client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Start("sleep 1000"); err != nil {
		t.Fatal(err)
	}
	r2.closeAndWait(t)
}

// TestVMHomeAnyUID runs the agent as uid 123456, which owns nothing in the image (its
// /home/agent is uid 1000's): $HOME must be a tmpfs of its own, mode 0700, writable.
func TestVMHomeAnyUID(t *testing.T) {
	a := Get(t)
	const uid = 123456
	r := bootCfg(t, a, "", 3*time.Minute, nil, func(c *guestcfg.Config) { c.UID, c.GID = uid, uid })
	r.dial(t)
	out, errOut, code := r.run(t, `echo x > "$HOME/x" && mkdir -p "$HOME/.codex" && cat "$HOME/x" && id -u && stat -c '%u:%g %a' "$HOME" "$HOME/x" && awk '$2 == "/home/agent" {print $3}' /proc/mounts && ls -A "$HOME"`)
	want := "x\n123456\n123456:123456 700\n123456:123456 644\ntmpfs\n"
	if code != 0 || !strings.HasPrefix(out, want) {
		t.Errorf("as uid %d: status %d stdout %q stderr %q; want prefix %q", uid, code, out, errOut, want)
	}
	for _, f := range []string{".bashrc", ".profile", ".codex", "x"} { // the image's skeleton is there too
		if !strings.Contains(out, "\n"+f+"\n") {
			t.Errorf("home lacks %s: %q", f, out)
		}
	}
	r.closeAndWait(t)
}

// TestVMWrongKeyRefused checks that the guest accepts only the session's client key
// (and then ends the session) and that the client pins the guest's host key.
func TestVMWrongKeyRefused(t *testing.T) {
	a := Get(t)
	other, err := guestcfg.NewKeys()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		keys func(session *guestcfg.Keys) *guestcfg.Keys
		want string
	}{
		{"wrong client key", func(s *guestcfg.Keys) *guestcfg.Keys {
			return &guestcfg.Keys{HostSigner: s.HostSigner, ClientSigner: other.ClientSigner}
		}, "unable to authenticate"},
		{"wrong pinned host key", func(s *guestcfg.Keys) *guestcfg.Keys {
			return &guestcfg.Keys{HostSigner: other.HostSigner, ClientSigner: s.ClientSigner}
		}, "host key mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := boot(t, a, "", 3*time.Minute)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			c, err := guestcfg.Dial(ctx, r.sock, guestcfg.DefaultUser, tc.keys(r.keys))
			if err == nil {
				c.Close()
				t.Fatal("handshake succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Dial error %q, want %q", err, tc.want)
			}
			// The guest ends the session after a failed handshake.
			if err := r.vm.Wait(ctx); err != nil {
				t.Errorf("Wait after refused handshake: %v", err)
			}
		})
	}
}

// TestVMHangTimesOut: a guest nobody connects to waits forever; Spec.Timeout must make
// Wait return ErrTimeout and the QEMU process must be gone.
func TestVMHangTimesOut(t *testing.T) {
	a := Get(t)
	r := boot(t, a, "", 4*time.Second)
	pid := r.vm.Pid()
	err := r.vm.Wait(t.Context())
	if !errors.Is(err, sandbox.ErrTimeout) {
		t.Fatalf("Wait = %v, want ErrTimeout", err)
	}
	if e := syscall.Kill(pid, 0); !errors.Is(e, syscall.ESRCH) {
		t.Errorf("QEMU pid %d still exists after the timeout (kill 0: %v)", pid, e)
	}
	t.Logf("Wait: %v", err)
}

// TestVMPanicFails: a guest whose init cannot run panics; Wait must say so instead of
// reporting the clean exit QEMU makes of the panic's reboot.
func TestVMPanicFails(t *testing.T) {
	a := Get(t)
	r := boot(t, a, "", time.Minute, "rdinit=/nonexistent")
	err := r.vm.Wait(t.Context())
	if !errors.Is(err, sandbox.ErrVMFailed) || !strings.Contains(err.Error(), "panic") {
		t.Fatalf("Wait = %v, want ErrVMFailed naming the panic", err)
	}
}
