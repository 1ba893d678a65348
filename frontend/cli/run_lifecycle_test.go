package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/helper/api"
)

// shortPoweroff makes the stop path ask the helper at once instead of giving the guest
// poweroffWait to power off by itself.
func shortPoweroff(t *testing.T) {
	old := poweroffWait
	poweroffWait = 50 * time.Millisecond
	t.Cleanup(func() { poweroffWait = old })
}

// TestRunSurvivesClosedHelperConnection: the helper closes brood's main
// connection after StartVM (as its read timeout did during a slow boot). Attach and the
// StopVM that ends a guest which does not power off go through a new connection: the
// VM is stopped, not orphaned, and the run ends normally.
func TestRunSurvivesClosedHelperConnection(t *testing.T) {
	shortPoweroff(t)
	f := newFakeHelper(t)
	f.DropAfter, f.Lingers = api.CallStartVM, true
	code, stdout, stderr, ss := fakeRun(t, "run-image", "test", "--", "true")
	if code != 0 || stdout != "ran: exec true\n" {
		t.Fatalf("exit %d stdout %q\n%s", code, stdout, stderr)
	}
	calls := f.Calls()
	// hello: the main connection, the waiter's, and the redial after the drop.
	if strings.Count(calls, "hello") != 3 || !strings.Contains(calls, "attach") {
		t.Errorf("attach did not go through a new connection: %s", calls)
	}
	if !strings.Contains(calls, "stop_vm") || f.Outcome() != api.OutcomeStopped {
		t.Errorf("the VM was not stopped: outcome %q, calls %s", f.Outcome(), calls)
	}
	if len(ss) != 1 || ss[0].State != session.StateStopped || ss[0].HelperSession != "0000abcd" {
		t.Errorf("sessions %+v", ss)
	}
}

// TestRunWaiterRedials: the connection of WaitVM is closed under it; the waiter asks
// again on a new one, so brood learns that the guest powered off (no StopVM needed).
func TestRunWaiterRedials(t *testing.T) {
	shortPoweroff(t)
	f := newFakeHelper(t)
	f.DropWait = true
	code, _, stderr, ss := fakeRun(t, "run-image", "test", "--", "true")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if n := strings.Count(f.Calls(), "wait_vm"); n != 2 || strings.Contains(f.Calls(), "stop_vm") {
		t.Errorf("calls %s, want wait_vm twice and no stop_vm", f.Calls())
	}
	b, err := os.ReadFile(filepath.Join(ss[0].Dir, frontend.VMRecordFile))
	var rec frontend.VMRecord
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil || rec.Outcome != api.OutcomePoweroff {
		t.Errorf("vm.json outcome %q (%v), want poweroff", rec.Outcome, err)
	}
}

// TestRunChecksImageAndSizesBeforeSnapshot: an image the helper has not built, or more
// vCPUs than the host has, is refused before a session is created, with a hint that
// fits how the image was named.
func TestRunChecksImageAndSizesBeforeSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		want    []string
		notWant string
	}{
		{"run-image", []string{"run-image", "nosuchimage", "--", "true"}, ExitError,
			[]string{"image not built: \"nosuchimage\"", "built images: codex, test", `no recipe "nosuchimage" (recipes: codex, test)`}, "image build"},
		{"run --image", []string{"run", "--image", "nosuch", "shell"}, ExitError,
			[]string{"image not built: \"nosuch\"", "built images: codex, test"}, "--image"},
		{"agent default", []string{"run", "claude-code"}, ExitError,
			[]string{"image not built: \"claude-code\"", "pass --image NAME"}, ""},
		{"cpus", []string{"run-image", "--cpus", "64", "test", "--", "true"}, ExitUsage,
			[]string{"--cpus 64 asks for more than the host has", "this host has 2 CPU(s) and 4096 MiB", "--cpus 1..2"}, "--memory 0"},
		{"memory", []string{"run-image", "--memory", "5000", "test", "--", "true"}, ExitUsage,
			[]string{"--memory 5000 MiB not in 128..4096: more than the host has"}, "--cpus 0"},
		{"memory too small", []string{"run-image", "--memory", "1", "test", "--", "true"}, ExitUsage,
			[]string{"--memory 1 MiB not in 128..262144"}, ""},
		{"cpus over the helper's limit", []string{"run-image", "--cpus", "999", "test", "--", "true"}, ExitUsage,
			[]string{"--cpus 999 not in 1..64"}, ""},
		{"timeout over the helper's limit", []string{"run", "--timeout", "9h", "shell"}, ExitUsage,
			[]string{"--timeout 9h0m0s not in 1s..8h0m0s"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHelper(t)
			f.Caps.Images, f.Caps.HostCPUs, f.Caps.HostMemoryMiB = []string{"codex", "test"}, 2, 4096
			f.Images.Recipes = []string{"codex", "test"}
			code, _, stderr, ss := fakeRun(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s", code, tc.code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if tc.notWant != "" && strings.Contains(stderr, tc.notWant) {
				t.Errorf("stderr has %q:\n%s", tc.notWant, stderr)
			}
			if len(ss) != 0 || strings.Contains(f.Calls(), "create_session") {
				t.Errorf("snapshotted anyway: sessions %d, calls %s", len(ss), f.Calls())
			}
		})
	}
	// A known image and sizes within the host's pass.
	f := newFakeHelper(t)
	f.Caps.Images, f.Caps.HostCPUs, f.Caps.HostMemoryMiB = []string{"test"}, 2, 4096
	if code, _, stderr, _ := fakeRun(t, "run-image", "--cpus", "2", "test", "--", "true"); code != 0 {
		t.Errorf("exit %d\n%s", code, stderr)
	}
}

// TestRunStartVMHostResources: the helper's host_resources refusal gets the host's sizes.
func TestRunStartVMHostResources(t *testing.T) {
	f := newFakeHelper(t)
	f.Caps.HostCPUs, f.Caps.HostMemoryMiB = 2, 4096
	f.StartErr = &api.Error{Code: api.CodeHostResources, Message: "cpus 3: the host has 2: more vCPUs or memory than the host has"}
	code, _, stderr, _ := fakeRun(t, "run-image", "test", "--", "true")
	if code != ExitError || !strings.Contains(stderr, "pass --cpus 1..2 and --memory up to 4096") {
		t.Errorf("exit %d\n%s", code, stderr)
	}
}

// TestRunPrintsSnapshotReport: brood run lists exclusions, skips and the sanitized
// .git/config like brood session new, names escaped.
func TestRunPrintsSnapshotReport(t *testing.T) {
	newFakeHelper(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	w := t.TempDir()
	os.MkdirAll(filepath.Join(w, ".git"), 0o755)
	os.WriteFile(filepath.Join(w, ".git", "config"), []byte("[credential]\n\thelper = store\n[core]\n\tfsmonitor = /bin/evil\n"), 0o644)
	os.WriteFile(filepath.Join(w, ".env"), []byte("TOKEN=1\n"), 0o644)
	os.WriteFile(filepath.Join(w, "a\x1b[31m.pem"), []byte("k"), 0o644)
	code, _, out := runCLI(t, "run-image", "--workspace", w, "test", "--", "true")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s", code, out)
	}
	for _, want := range []string{"excluded .env (", "sanitized .git/config: removed credential (credential section)", "excluded a\\x1b[31m.pem"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[31m") {
		t.Errorf("unescaped name on stderr:\n%q", out)
	}
}

// TestPrintLaterApplyNeedsYes: the non-TTY summary's apply command works without a TTY.
func TestPrintLaterApplyNeedsYes(t *testing.T) {
	var b bytes.Buffer
	printLater(&b, "abc123", false)
	if !strings.Contains(b.String(), "brood apply abc123 --all --yes\n") {
		t.Errorf("printLater:\n%s", b.String())
	}
}

// runningSession creates a session marked running whose VM was helper session hid.
func runningSession(t *testing.T, hid string) *session.Session {
	t.Helper()
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	w := t.TempDir()
	os.WriteFile(filepath.Join(w, "f"), []byte("x\n"), 0o644)
	code, stdout, stderr := runCLI(t, "session", "new", "--workspace", w)
	if code != 0 {
		t.Fatalf("session new: %d %s", code, stderr)
	}
	id := strings.Fields(strings.SplitN(stdout, "\n", 2)[0])[1]
	s, err := session.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	s.HelperSession = hid
	if err := s.SetState(session.StateRunning); err != nil {
		t.Fatal(err)
	}
	return s
}

// runCLI runs brood with args and returns the exit code and output.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	root := NewRootCommand()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(""))
	root.SetArgs(args)
	err := root.Execute()
	if err != nil {
		errb.WriteString("error: " + err.Error() + "\n")
	}
	return exitCode(err), out.String(), errb.String()
}

// TestRunningSessionSettles: a session left "running" by a killed brood is
// marked stopped when the helper does not know its VM (or lists it stopped, or is not
// running at all), and diff/review/apply go on; a live VM is refused with a pointer to
// brood session stop, which stops it through the helper.
func TestRunningSessionSettles(t *testing.T) {
	t.Run("helper does not know it", func(t *testing.T) {
		f := newFakeHelper(t)
		f.Sessions = []api.Session{{ID: "11111111", State: api.SessionRunning}}
		s := runningSession(t, "0000abcd")
		if code, _, stderr := runCLI(t, "diff", s.ID); code != 0 {
			t.Errorf("diff: exit %d\n%s", code, stderr)
		}
		if s2, _ := session.Open(s.ID); s2.State != session.StateStopped {
			t.Errorf("state %s, want stopped", s2.State)
		}
	})
	t.Run("helper lists it stopped", func(t *testing.T) {
		f := newFakeHelper(t)
		f.Sessions = []api.Session{{ID: "0000abcd", State: api.SessionStopped}}
		s := runningSession(t, "0000abcd")
		if code, _, stderr := runCLI(t, "apply", s.ID, "--all", "--yes"); code != 0 {
			t.Errorf("apply: exit %d\n%s", code, stderr)
		}
	})
	t.Run("no helper", func(t *testing.T) {
		t.Setenv(api.SocketEnv, filepath.Join(t.TempDir(), "none.sock"))
		s := runningSession(t, "0000abcd")
		if code, _, stderr := runCLI(t, "diff", s.ID); code != 0 {
			t.Errorf("diff: exit %d\n%s", code, stderr)
		}
	})
	t.Run("alive", func(t *testing.T) {
		f := newFakeHelper(t)
		f.Sessions = []api.Session{{ID: "0000abcd", State: api.SessionRunning}}
		s := runningSession(t, "0000abcd")
		for _, cmd := range [][]string{{"apply", s.ID, "--all", "--yes"}, {"diff", s.ID}, {"session", "rm", s.ID}} {
			code, _, stderr := runCLI(t, cmd...)
			if code != ExitRefused || !strings.Contains(stderr, "brood session stop "+s.ID) {
				t.Errorf("%v: exit %d\n%s", cmd, code, stderr)
			}
		}
		code, stdout, stderr := runCLI(t, "session", "stop", s.ID)
		if code != 0 || !strings.Contains(stdout, "stopped") || !strings.Contains(f.Calls(), "stop_vm") {
			t.Errorf("session stop: exit %d %s\n%s calls %s", code, stdout, stderr, f.Calls())
		}
		if s2, _ := session.Open(s.ID); s2.State != session.StateStopped {
			t.Errorf("state %s after session stop", s2.State)
		}
	})
	t.Run("rm --force stops the VM", func(t *testing.T) {
		f := newFakeHelper(t)
		f.Sessions = []api.Session{{ID: "0000abcd", State: api.SessionRunning}}
		s := runningSession(t, "0000abcd")
		code, _, stderr := runCLI(t, "session", "rm", "--force", s.ID)
		if code != 0 || !strings.Contains(f.Calls(), "stop_vm") {
			t.Errorf("rm --force: exit %d calls %s\n%s", code, f.Calls(), stderr)
		}
		if _, err := session.Open(s.ID); err == nil {
			t.Errorf("session %s still there", s.ID)
		}
	})
}
