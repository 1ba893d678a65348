package cli_test

// End-to-end tests of `brood run` and `brood run-image` (testing tier 3,
// docs/ARCHITECTURE.md "Testing tiers"): a real broodd-helper on a temporary socket, real
// QEMU VMs (TCG here) booting the `test` image with brood-guest, the real brood binary
// running as an unprivileged user, and the review gate afterwards. They share the
// kernel, initramfs and image caches of sandbox/vmtest and boot five VMs in all.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox/vmtest"
)

// The developer the tests run brood as: uid/gid 1000, the uid brood-guest's agent user
// has too, so the snapshot's owner and the agent agree whichever way the helper maps it.
const devUID, devGID = 1000, 1000

// rig is one helper plus the brood binary and a developer environment.
type rig struct {
	t         testing.TB
	base      string // world-traversable scratch directory, removed at the end
	brood     string // the brood binary
	socket    string // the helper socket
	runtime   string // the helper's runtime dir (VMM sockets live below it)
	home      string
	state     string // BROOD_STATE_DIR
	helperLog *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		l.b.Reset()
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var (
	rigOnce sync.Once
	shared  *rig
	rigErr  error
)

// repoRoot is the module root (three levels up from this file).
func repoRoot() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(self)))
}

func goBuild(dir, pkg, out string) error {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(goBin, "build", "-o", out, pkg)
	cmd.Dir = dir
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, o)
	}
	return nil
}

// getRig returns the shared rig, starting it on first use. Tests must not run in
// parallel with each other (2 cores; each VM is a TCG guest).
func getRig(t testing.TB) *rig {
	t.Helper()
	vmtest.Get(t) // root, QEMU, the kernel, the base initramfs and the test image
	testenv.RequireCommand(t, "git")
	rigOnce.Do(func() { shared, rigErr = startRig() })
	if rigErr != nil {
		t.Fatalf("start rig: %v", rigErr)
	}
	shared.t = t
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("helper log (tail):\n%s", tail(shared.helperLog.String(), 6000))
		}
	})
	return shared
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func startRig() (*rig, error) {
	base, err := os.MkdirTemp("", "brood-run-e2e-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(base, 0o755); err != nil {
		return nil, err
	}
	r := &rig{base: base, socket: filepath.Join(base, "run", "helper.sock"), runtime: filepath.Join(base, "run"),
		home: filepath.Join(base, "home"), state: filepath.Join(base, "home", "state"), helperLog: &lockedBuffer{}}
	bin := filepath.Join(base, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	r.brood = filepath.Join(bin, "brood")
	if err := goBuild(repoRoot(), "./cmd/brood", r.brood); err != nil {
		return nil, err
	}
	// $BROOD_E2E_HELPER names a prebuilt broodd-helper (development: a helper built
	// from a clean checkout while its package is being edited).
	helperBin := os.Getenv("BROOD_E2E_HELPER")
	if helperBin == "" {
		helperBin = filepath.Join(bin, "broodd-helper")
		if err := goBuild(repoRoot(), "./cmd/broodd-helper", helperBin); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{r.home, r.state, filepath.Join(r.home, ".config")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		if err := os.Chown(d, devUID, devGID); err != nil {
			return nil, err
		}
	}
	cfg := filepath.Join(base, "helper.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("allow_group = \"\"\nallow_gids = [%d]\nidle_seconds = 0\n", devGID)), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(helperBin, "--listen", r.socket, "--runtime-dir", r.runtime, "--config", cfg, "--idle-timeout", "0")
	cmd.Stdout, cmd.Stderr = r.helperLog, r.helperLog
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start helper: %w", err)
	}
	// The helper outlives single tests; TestMain stops it.
	helperProc = cmd
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(r.socket); err == nil {
			break
		}
		if time.Now().After(end) {
			return nil, fmt.Errorf("helper socket %s did not appear: %s", r.socket, r.helperLog.String())
		}
	}
	return r, nil
}

var helperProc *exec.Cmd

// rigStops are the stop functions of other rigs (agent_e2e_test.go), run after the tests.
var rigStops []func()

func TestMain(m *testing.M) {
	code := m.Run()
	for _, stop := range rigStops {
		stop()
	}
	if helperProc != nil && helperProc.Process != nil {
		helperProc.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { helperProc.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			helperProc.Process.Kill()
		}
	}
	if shared != nil {
		os.RemoveAll(shared.base)
	}
	os.Exit(code)
}

// workspace makes a git repository W owned by the developer with README.md and old.txt
// committed.
func (r *rig) workspace(name string) string {
	t := r.t
	w := filepath.Join(r.base, name)
	if err := os.MkdirAll(w, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, c := range map[string]string{"README.md": "hello\n", "old.txt": "old\n"} {
		if err := os.WriteFile(filepath.Join(w, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "init"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = w
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, o)
		}
	}
	if err := filepath.Walk(w, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, devUID, devGID)
	}); err != nil {
		t.Fatal(err)
	}
	return w
}

// command returns brood args run as the developer in dir.
func (r *rig) command(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(r.brood, args...)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + r.home,
		"BROOD_STATE_DIR=" + r.state,
		"BROOD_HELPER_SOCKET=" + r.socket,
		"XDG_CONFIG_HOME=" + filepath.Join(r.home, ".config"),
		"OPENAI_API_KEY=sk-test-forwarded",
		"AWS_SECRET_ACCESS_KEY=never-forwarded",
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: devUID, Gid: devGID, Groups: []uint32{}}}
	return cmd
}

// run runs brood to completion and returns its exit code, stdout and stderr.
func (r *rig) run(dir string, args ...string) (int, string, string) {
	r.t.Helper()
	cmd := r.command(dir, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	r.t.Fatalf("brood %v: %v", args, err)
	return -1, "", ""
}

var sessionLineRe = regexp.MustCompile(`brood: session ([a-z0-9]+) `)

func sessionID(t testing.TB, stderr string) string {
	t.Helper()
	m := sessionLineRe.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no session id in stderr:\n%s", stderr)
	}
	return m[1]
}

// vmms lists the pids of the helper's VM runners (`broodd-helper vm-run`) and QEMU
// processes: its descendants, so VMs of other tests on the machine do not count, and not
// the long-lived `vm-spawn` process that starts runners.
func (r *rig) vmms() []int {
	if helperProc == nil || helperProc.Process == nil {
		return nil
	}
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		var state string
		var ppid int
		if i < 0 || func() bool { _, err := fmt.Sscanf(string(b[i+1:]), " %s %d", &state, &ppid); return err != nil }() {
			continue
		}
		if state == "Z" {
			continue // exited, not yet reaped: not running
		}
		parent[pid] = ppid
	}
	root := helperProc.Process.Pid
	var pids []int
	for pid := range parent {
		for p, n := parent[pid], 0; p != 0 && n < 64; p, n = parent[p], n+1 {
			if p != root {
				continue
			}
			cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			argv := strings.Split(string(cl), "\x00")
			if strings.Contains(filepath.Base(argv[0]), "qemu") || (len(argv) > 1 && argv[1] == "vm-run") {
				pids = append(pids, pid)
			}
			break
		}
	}
	return pids
}

// vmRecord is the part of the session's vm.json the tests read.
type vmRecord struct {
	Outcome      api.VMOutcome `json:"outcome"`
	ExitStatus   *int          `json:"exit_status"`
	BootSeconds  float64       `json:"boot_seconds"`
	VMSeconds    float64       `json:"vm_seconds"`
	TotalSeconds float64       `json:"total_seconds"`
	Console      string        `json:"console"`
	Detached     bool          `json:"detached"`
}

func (r *rig) record(id string) vmRecord {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(r.state, "sessions", id, "vm.json"))
	if err != nil {
		r.t.Fatal(err)
	}
	var rec vmRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		r.t.Fatal(err)
	}
	return rec
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if err != nil {
		return "<missing>"
	}
	return string(b)
}

// TestRunImageEndToEnd is the acceptance test of `brood run-image`: the command changes
// S only, W stays untouched while the VM runs, the VM is gone before the diff, brood
// diff --json lists exactly the changes, brood apply lands them; then the exit status of
// a command is propagated.
func TestRunImageEndToEnd(t *testing.T) {
	r := getRig(t)
	w := r.workspace("w-e2e")
	const script = `echo hi >> README.md && git -C /workspace status --short && rm old.txt && mkdir new && echo x > new/f`
	cmd := r.command(w, "run-image", "test", "--", "sh", "-c", script)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Watch stderr line by line: the session id, then the diff step, at which point no
	// VMM may be left.
	var stderr strings.Builder
	var id string
	vmmsAtDiff := -1
	sawS := false // S changed while W did not (polled while the VM ran)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	sawVMM := false
loop:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				break loop
			}
			stderr.WriteString(l + "\n")
			if m := sessionLineRe.FindStringSubmatch(l + " "); m != nil && id == "" {
				id = m[1]
			}
			if strings.HasPrefix(l, "brood: diff ...") {
				pids := r.vmms()
				vmmsAtDiff = len(pids)
				for _, pid := range pids {
					st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
					t.Logf("alive at diff: %s", st)
				}
			}
		case <-tick.C:
			if readFile(t, filepath.Join(w, "README.md")) != "hello\n" || readFile(t, filepath.Join(w, "old.txt")) != "old\n" {
				t.Errorf("W changed while the VM ran")
			}
			if len(r.vmms()) > 0 {
				sawVMM = true
			}
			if id != "" && !sawS && vmmsAtDiff < 0 {
				snap := filepath.Join(r.state, "sessions", id, "snapshot")
				if readFile(t, filepath.Join(snap, "README.md")) == "hello\nhi\n" && len(r.vmms()) > 0 {
					sawS = true
				}
			}
		}
	}
	werr := cmd.Wait()
	whole := time.Since(start)
	if werr != nil {
		t.Fatalf("brood run-image: %v\nstdout:\n%s\nstderr:\n%s", werr, stdout.String(), stderr.String())
	}
	if !sawVMM {
		t.Errorf("never saw a QEMU process while brood ran")
	}
	if vmmsAtDiff != 0 {
		t.Errorf("%d VMM process(es) alive when the diff started, want 0\n%s", vmmsAtDiff, stderr.String())
	}
	if !sawS {
		t.Logf("note: the snapshot change was not caught while the VM still ran (polling interval)")
	}
	if got := stdout.String(); !strings.Contains(got, " M README.md") {
		t.Errorf("stdout %q lacks git status ' M README.md'", got)
	}
	errText := stderr.String()
	for _, want := range []string{"brood review " + id, "brood apply " + id + " --all", "modified  README.md", "deleted   old.txt"} {
		if !strings.Contains(errText, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errText)
		}
	}
	rec := r.record(id)
	if rec.Outcome != api.OutcomePoweroff || rec.ExitStatus == nil || *rec.ExitStatus != 0 {
		t.Errorf("vm.json: %+v", rec)
	}
	t.Logf("run-image: boot to prompt %.3fs, VM life %.3fs, brood to review %.3fs, whole command %v",
		rec.BootSeconds, rec.VMSeconds, rec.TotalSeconds, whole.Round(time.Millisecond))

	// W is still untouched; brood diff --json lists exactly the changes.
	if readFile(t, filepath.Join(w, "README.md")) != "hello\n" || readFile(t, filepath.Join(w, "new", "f")) != "<missing>" {
		t.Errorf("W changed before apply")
	}
	code, out, errOut := r.run(w, "diff", "--json", id)
	if code != 0 {
		t.Fatalf("brood diff --json: exit %d: %s", code, errOut)
	}
	var d struct {
		Changes []struct {
			Path string `json:"path"`
			Kind string `json:"kind"`
			Risk string `json:"risk"`
		} `json:"changes"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("diff json: %v\n%s", err, out)
	}
	var got []string
	gitIndex := false // git status rewrites .git/index: a derived file, never listed
	for _, c := range d.Changes {
		gitIndex = gitIndex || strings.HasPrefix(c.Path, ".git/")
		got = append(got, c.Kind+" "+c.Path)
	}
	sort.Strings(got)
	want := []string{"added new", "added new/f", "deleted old.txt", "modified README.md"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("diff changes = %q, want %q", got, want)
	}

	if gitIndex {
		t.Errorf("diff lists git's own files: %q", got)
	}
	// apply --all lands them.
	code, out, errOut = r.run(w, "apply", id, "--all", "--yes")
	if code != 0 {
		t.Fatalf("brood apply: exit %d\n%s%s", code, out, errOut)
	}
	if readFile(t, filepath.Join(w, "README.md")) != "hello\nhi\n" || readFile(t, filepath.Join(w, "old.txt")) != "<missing>" ||
		readFile(t, filepath.Join(w, "new", "f")) != "x\n" {
		t.Errorf("W after apply: README %q old.txt %q new/f %q", readFile(t, filepath.Join(w, "README.md")),
			readFile(t, filepath.Join(w, "old.txt")), readFile(t, filepath.Join(w, "new", "f")))
	}
}

// TestRunImageEscapes checks what the agent can see and reach from inside the VM, then
// (second VM) that nothing it wrote outside /workspace survived and that the command's
// exit status is brood's.
func TestRunImageEscapes(t *testing.T) {
	r := getRig(t)
	w := r.workspace("w-escape")
	probe := fmt.Sprintf(`
echo "net: $(ls /sys/class/net | tr '\n' ' ')"
for p in %q %q %q %q %q; do test -e "$p" && echo "visible: $p"; done
grep -F -e %q -e %q /proc/mounts && echo "host path in mounts"
echo "env: $(printenv OPENAI_API_KEY) $(printenv AWS_SECRET_ACCESS_KEY || echo no-aws)"
echo mark > /home/agent/persist && echo mark > /tmp/persist && echo wrote
echo done`, w, r.socket, r.runtime, r.home, r.base, r.base, r.home)
	// The probe runs as a custom agent from the user config that forwards OPENAI_*:
	// only that variable may reach the VM (brood's environment has AWS_SECRET_* too).
	cfg := filepath.Join(r.home, ".config", "brood", "config.toml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o700); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf("[agents.probe]\nimage = \"test\"\ncommand = [\"sh\", \"-c\", '''%s''']\nenv = [\"OPENAI_*\"]\n", probe)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Dir(cfg), cfg} {
		if err := os.Chown(p, devUID, devGID); err != nil {
			t.Fatal(err)
		}
	}
	// An agent gets a network by default; --egress none is the isolation this probe checks.
	code, stdout, stderr := r.run(w, "run", "--egress", "none", "probe")
	if code != 0 {
		t.Fatalf("probe: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"net: lo \n", "wrote\n", "done\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("probe stdout lacks %q:\n%s", want, stdout)
		}
	}
	// The forwarded key reaches the guest as a placeholder of its shape, never as its
	// value (docs/secrets.md); the unlisted AWS variable not at all.
	if !regexp.MustCompile(`(?m)^env: sk-[A-Za-z0-9_-]+ no-aws$`).MatchString(stdout) || strings.Contains(stdout, "sk-test-forwarded") {
		t.Errorf("probe stdout: want the key as a placeholder of its shape and no AWS variable:\n%s", stdout)
	}
	for _, bad := range []string{"visible:", "host path in mounts"} {
		if strings.Contains(stdout, bad) {
			t.Errorf("probe stdout has %q:\n%s", bad, stdout)
		}
	}
	id := sessionID(t, stderr)
	if !strings.Contains(stderr, "forwarding $OPENAI_API_KEY") || strings.Contains(stderr, "AWS_SECRET") {
		t.Errorf("stderr does not list exactly the forwarded variable:\n%s", stderr)
	}
	if !strings.Contains(stderr, "no changes in session "+id) {
		t.Errorf("probe changed the workspace?\n%s", stderr)
	}

	code, stdout, stderr = r.run(w, "run-image", "test", "--", "sh", "-c", "cat /home/agent/persist /tmp/persist 2>/dev/null; exit 7")
	if code != 7 {
		t.Errorf("exit 7: brood exited %d\n%s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("writes outside /workspace survived the session: %q", stdout)
	}
	if !strings.Contains(stderr, "exited with status 7") {
		t.Errorf("stderr does not name the status:\n%s", stderr)
	}
}

// TestRunImageTimeout: a guest command that never ends is stopped at --timeout with a
// clear error; the VMM is gone and the session is kept and listed.
func TestRunImageTimeout(t *testing.T) {
	r := getRig(t)
	w := r.workspace("w-timeout")
	start := time.Now()
	code, _, stderr := r.run(w, "run-image", "--timeout", "20s", "--console", "test", "--", "sleep", "1000")
	el := time.Since(start)
	if code != 1 {
		t.Errorf("exit %d, want 1\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "timeout") || !strings.Contains(stderr, "the session is kept") {
		t.Errorf("stderr does not name the timeout:\n%s", stderr)
	}
	if el > 45*time.Second {
		// The helper stops the VM at 20 s; brood's own deadline is 10 s later
		// (lifetimeGrace), then it stops the VM itself.
		t.Errorf("timeout took %v", el)
	}
	if n := len(r.vmms()); n != 0 {
		t.Errorf("%d VMM process(es) left after the timeout", n)
	}
	id := sessionID(t, stderr)
	code, out, errOut := r.run(w, "session", "list")
	if code != 0 || !regexp.MustCompile(id+`\s+\S+ \S+\s+stopped\s`).MatchString(out) {
		t.Errorf("session list (exit %d) does not show %s stopped:\n%s%s", code, id, out, errOut)
	}
	rec := r.record(id)
	if rec.Outcome != api.OutcomeTimeout {
		t.Errorf("vm.json outcome %q, want timeout", rec.Outcome)
	}
	// The console tail is kept in the session and printed (escaped) with --console.
	kernelLine := regexp.MustCompile(`\[ *\d+\.\d{6}\] `)
	if rec.Console == "" || !kernelLine.MatchString(readFile(t, rec.Console)) {
		t.Errorf("console tail %q not saved or without kernel log lines", rec.Console)
	}
	if i := strings.Index(stderr, "--- guest console"); i < 0 || !kernelLine.MatchString(stderr[i:]) || strings.ContainsAny(stderr[i:], "\x1b\r") {
		t.Errorf("--console did not print the escaped tail:\n%s", stderr)
	}
	t.Logf("timeout after %v; brood's stderr:\n%s", el.Round(time.Millisecond), stderr)
}

// ptyReader collects a PTY's output and waits for patterns in it.
type ptyReader struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan struct{}
}

func newPtyReader(f io.Reader) *ptyReader {
	p := &ptyReader{ch: make(chan struct{}, 1)}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := f.Read(b)
			p.mu.Lock()
			p.buf.Write(b[:n])
			p.mu.Unlock()
			select {
			case p.ch <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return p
}

func (p *ptyReader) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.String()
}

// waitFor waits until re matches the output after offset from; it returns the end of the
// match, or fails the test after d.
func (p *ptyReader) waitFor(t *testing.T, from int, re *regexp.Regexp, d time.Duration) int {
	t.Helper()
	end, ok := p.tryWait(from, re, d)
	if !ok {
		t.Fatalf("timed out waiting for %q; output so far:\n%q", re, p.String())
	}
	return end
}

// tryWait is waitFor reporting a timeout as ok == false.
func (p *ptyReader) tryWait(from int, re *regexp.Regexp, d time.Duration) (int, bool) {
	end := time.Now().Add(d)
	for {
		s := p.String()
		if from > len(s) {
			from = len(s)
		}
		if loc := re.FindStringIndex(s[from:]); loc != nil {
			return from + loc[1], true
		}
		if time.Now().After(end) {
			return from, false
		}
		select {
		case <-p.ch:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestRunShellInteractive drives `brood run shell` through a real PTY: a command and its
// output, a window resize that `stty size` follows, exit, and the review prompt.
func TestRunShellInteractive(t *testing.T) {
	r := getRig(t)
	w := r.workspace("w-shell")
	cmd := r.command(w, "run", "shell")
	cmd.Env = append(cmd.Env, "TERM=xterm")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	go func() { <-ctx.Done(); cmd.Process.Kill() }()
	out := newPtyReader(ptmx)
	send := func(s string) {
		if _, err := ptmx.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	pos := out.waitFor(t, 0, regexp.MustCompile(`Ctrl-\] detaches`), 2*time.Minute)
	pos = out.waitFor(t, pos, regexp.MustCompile(`\$ $`), time.Minute)
	prompt := time.Since(start)
	send("echo hello-$((6*7))\r")
	// Wait for the next prompt before typing: a line typed while the command still runs
	// is echoed by the line discipline before the prompt, so its output follows "$ ".
	pos = out.waitFor(t, pos, regexp.MustCompile(`hello-42\r?\n(?:.*\r?\n)*?\$ `), 30*time.Second)
	send("stty size\r")
	pos = out.waitFor(t, pos, regexp.MustCompile(`(?:^|[^0-9])24 80\r?\n`), 30*time.Second)
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	// The window change travels SIGWINCH → brood → SSH window-change → guest PTY; ask
	// until the new size shows (typed-ahead lines may interleave with prompts).
	resized := regexp.MustCompile(`(?:^|[^0-9])40 120\r?\n`)
	for i := 0; ; i++ {
		send("stty size\r")
		if end, ok := out.tryWait(pos, resized, 2*time.Second); ok {
			pos = end
			break
		}
		if i == 15 {
			t.Fatalf("stty size never showed 40 120:\n%q", out.String())
		}
	}
	send("echo from-the-vm > made-in-vm.txt; exit\r")
	pos = out.waitFor(t, pos, regexp.MustCompile(`Apply this change to W`), 2*time.Minute)
	send("a")
	pos = out.waitFor(t, pos, regexp.MustCompile(`(?i)y/n`), 30*time.Second)
	send("y")
	if err := cmd.Wait(); err != nil {
		t.Errorf("brood run shell: %v\n%q", err, out.String())
	}
	if got := readFile(t, filepath.Join(w, "made-in-vm.txt")); got != "from-the-vm\n" {
		t.Errorf("W/made-in-vm.txt = %q after review\n%q", got, out.String())
	}
	t.Logf("interactive: start to shell prompt %v, whole session %v", prompt.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if testing.Verbose() {
		t.Logf("terminal transcript:\n%s", out.String())
	}
}

// TestRunShellDetach: Ctrl-] leaves the agent running, stops the VM and goes to the
// review; quitting the review changes nothing and keeps the session.
func TestRunShellDetach(t *testing.T) {
	r := getRig(t)
	w := r.workspace("w-detach")
	cmd := r.command(w, "run", "shell")
	cmd.Env = append(cmd.Env, "TERM=xterm")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	go func() { <-ctx.Done(); cmd.Process.Kill() }()
	out := newPtyReader(ptmx)
	pos := out.waitFor(t, 0, regexp.MustCompile(`Ctrl-\] detaches`), 2*time.Minute)
	pos = out.waitFor(t, pos, regexp.MustCompile(`\$ $`), time.Minute)
	ptmx.Write([]byte("echo kept-in-s > detached.txt; sleep 1000\r"))
	// Detach once the shell has written the file (it then sleeps): S is the share.
	inS := filepath.Join(r.state, "sessions", sessionID(t, out.String()), "snapshot", "detached.txt")
	for end := time.Now().Add(30 * time.Second); readFile(t, inS) != "kept-in-s\n"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("S/detached.txt = %q after 30 s\n%q", readFile(t, inS), out.String())
		}
	}
	ptmx.Write([]byte{0x1d})
	pos = out.waitFor(t, pos, regexp.MustCompile(`stop VM`), 30*time.Second)
	pos = out.waitFor(t, pos, regexp.MustCompile(`Apply this change to W`), time.Minute)
	ptmx.Write([]byte("q"))
	err = cmd.Wait()
	if readFile(t, filepath.Join(w, "detached.txt")) != "<missing>" {
		t.Errorf("W changed without an accepted review")
	}
	id := sessionID(t, out.String())
	if rec := r.record(id); !rec.Detached {
		t.Errorf("vm.json does not record the detach: %+v", rec)
	}
	if got := readFile(t, filepath.Join(r.state, "sessions", id, "snapshot", "detached.txt")); got != "kept-in-s\n" {
		t.Errorf("S/detached.txt = %q", got)
	}
	if n := len(r.vmms()); n != 0 {
		t.Errorf("%d VMM process(es) left after detaching", n)
	}
	t.Logf("brood after q: %v", err)
}

// TestRunTwoSessionsSideBySide runs two VMs of the same developer at once, each on its
// own workspace; each sees and changes only its own snapshot.
func TestRunTwoSessionsSideBySide(t *testing.T) {
	r := getRig(t)
	type result struct {
		code           int
		stdout, stderr string
	}
	ws := []string{r.workspace("w-side-a"), r.workspace("w-side-b")}
	res := make([]result, 2)
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("side-%d", i)
			cmd := r.command(w, "run-image", "test", "--", "sh", "-c", "sleep 2; ls; echo "+name+" > "+name+".txt")
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			res[i] = result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
			if err != nil && res[i].code == 0 {
				res[i].code = -1
			}
		}()
	}
	wg.Wait()
	for i, rs := range res {
		if rs.code != 0 {
			// The guest's console says how far the boot got (an intermittent hang here
			// was one guest never finishing the SSH handshake).
			console := "<no session id>"
			if m := sessionLineRe.FindStringSubmatch(rs.stderr); m != nil {
				console = readFile(t, filepath.Join(r.state, "sessions", m[1], "console.log"))
			}
			t.Fatalf("session %d: exit %d\n%s\nconsole:\n%s", i, rs.code, rs.stderr, console)
		}
		// Both guests see only their own workspace (the other's file does not exist yet
		// in either snapshot, and each lists only the committed files).
		if rs.stdout != "README.md\nold.txt\n" {
			t.Errorf("session %d listed %q", i, rs.stdout)
		}
		id := sessionID(t, rs.stderr)
		name := fmt.Sprintf("side-%d.txt", i)
		if got := readFile(t, filepath.Join(r.state, "sessions", id, "snapshot", name)); got != fmt.Sprintf("side-%d\n", i) {
			t.Errorf("session %d: S/%s = %q", i, name, got)
		}
		other := fmt.Sprintf("side-%d.txt", 1-i)
		if got := readFile(t, filepath.Join(r.state, "sessions", id, "snapshot", other)); got != "<missing>" {
			t.Errorf("session %d has the other session's file", i)
		}
	}
}
