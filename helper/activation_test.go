//go:build linux

package helper

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"brood.dev/brood/helper/api"
)

// helperChild is a broodd-helper (the test binary running Main) in its own network
// namespace, so that its startup cleanup cannot touch the host's links or nft tables.
type helperChild struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{} // closed when the process has exited
	err    error         // Wait's result, valid after done
}

// startHelperChild starts Main with args. With activate set, the listener ln is passed as
// fd 3 with LISTEN_FDS/LISTEN_FDNAMES, and LISTEN_PID is set by exec in place through
// sh (a parent cannot know its child's pid before exec, and go-systemd's activation
// checks that LISTEN_PID is its own pid).
func startHelperChild(t *testing.T, env []string, activate *os.File, args ...string) *helperChild {
	t.Helper()
	bin := publicTestBinary(t)
	var cmd *exec.Cmd
	if activate != nil {
		cmd = exec.Command("/bin/sh", append([]string{"-c", `LISTEN_PID=$$ exec "$0" "$@"`, bin}, args...)...)
		cmd.ExtraFiles = []*os.File{activate}
	} else {
		cmd = exec.Command(bin, args...)
	}
	cmd.Env = append(append(os.Environ(), childEnv+"=helper-main"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	hc := &helperChild{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = hc.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { hc.err = cmd.Wait(); close(hc.done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-hc.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
	})
	return hc
}

// waitDial dials the helper until it answers hello or d passes.
func waitDial(t *testing.T, hc *helperChild, sock string, d time.Duration) *api.Client {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := api.Dial(ctx, sock)
		cancel()
		if err == nil {
			return c
		}
		select {
		case <-hc.done:
			t.Fatalf("helper exited (%v) before serving: %v\n%s", hc.err, err, hc.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("helper not serving after %v: %v\n%s", d, err, hc.stderr.String())
		}
		time.Sleep(30 * time.Millisecond)
	}
}

func helperDirs(t *testing.T) (base string, args []string) {
	base = t.TempDir()
	return base, []string{"--config", writeConfig(t, base, ""), "--runtime-dir", filepath.Join(base, "run"), "--state-dir", filepath.Join(base, "state")}
}

func writeConfig(t *testing.T, dir, extra string) string {
	t.Helper()
	p := filepath.Join(dir, "helper.toml")
	if err := os.WriteFile(p, []byte("allow_group = \"\"\n"+extra), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestActivation passes a listener through LISTEN_FDS/LISTEN_PID without systemd; the
// helper serves on it, confined, and creates its runtime directory.
func TestActivation(t *testing.T) {
	requireRoot(t)
	base, args := helperDirs(t)
	sock := filepath.Join(base, "activated.sock")
	ln, err := ListenPath(sock, -1)
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	lf, err := ln.File()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	notifyPath := filepath.Join(base, "notify.sock")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	hc := startHelperChild(t, []string{"LISTEN_FDS=1", "LISTEN_FDNAMES=" + SocketFDName, "NOTIFY_SOCKET=" + notifyPath}, lf, args...)
	lf.Close()
	notify.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 256)
	n, err := notify.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Fatalf("sd_notify: %q, %v\n%s", buf[:n], err, hc.stderr.String())
	}
	c := waitDial(t, hc, sock, 10*time.Second)
	defer c.Close()
	if c.Caps.Peer.UID != 0 || c.Caps.Landlock.Mode != api.LandlockEnforced {
		t.Errorf("caps = %+v", c.Caps)
	}
	fi, err := os.Lstat(filepath.Join(base, "run"))
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Errorf("runtime dir: %v %v", fi, err)
	}
}

// TestActivationMissing: without LISTEN_FDS (and without --listen) the helper exits
// non-zero with a message that says what is missing and what to do.
func TestActivationMissing(t *testing.T) {
	requireRoot(t)
	_, args := helperDirs(t)
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"nothing passed", nil, "LISTEN_FDS/LISTEN_PID not set"},
		{"foreign LISTEN_PID", []string{"LISTEN_FDS=1", "LISTEN_PID=1", "LISTEN_FDNAMES=helper"}, "LISTEN_PID=1 is not this process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc := startHelperChild(t, append([]string{"LISTEN_FDS=", "LISTEN_PID="}, tc.env...), nil, args...)
			select {
			case <-hc.done:
				err := hc.err
				ee, ok := err.(*exec.ExitError)
				if !ok || ee.ExitCode() != 1 {
					t.Errorf("exit = %v, want status 1", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("helper did not exit")
			}
			if out := hc.stderr.String(); !strings.Contains(out, tc.want) || !strings.Contains(out, "--listen") && tc.env == nil {
				t.Errorf("stderr lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestActivationWrongName: a passed socket under another name is not taken.
func TestActivationWrongName(t *testing.T) {
	requireRoot(t)
	base, args := helperDirs(t)
	ln, err := ListenPath(filepath.Join(base, "x.sock"), -1)
	if err != nil {
		t.Fatal(err)
	}
	lf, _ := ln.File()
	ln.Close()
	defer lf.Close()
	hc := startHelperChild(t, []string{"LISTEN_FDS=1", "LISTEN_FDNAMES=other"}, lf, args...)
	select {
	case <-hc.done:
		if err := hc.err; err == nil || !strings.Contains(hc.stderr.String(), `no Unix stream socket named "helper"`) {
			t.Errorf("exit %v, stderr:\n%s", err, hc.stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("helper did not exit")
	}
}

// TestIdleExit: with no connection and no session the helper exits 0 after its idle
// timeout.
func TestIdleExit(t *testing.T) {
	requireRoot(t)
	base, args := helperDirs(t)
	sock := filepath.Join(base, "h.sock")
	hc := startHelperChild(t, nil, nil, append(args, "--listen", sock, "--idle-timeout", "1s")...)
	c := waitDial(t, hc, sock, 10*time.Second)
	c.Close()
	select {
	case <-hc.done:
		if err := hc.err; err != nil {
			t.Errorf("idle exit: %v\n%s", err, hc.stderr.String())
		}
		if !strings.Contains(hc.stderr.String(), "idle timeout") {
			t.Errorf("no idle message:\n%s", hc.stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("helper did not exit when idle")
	}
}

// TestUnsafeRuntimeDir: the helper refuses to start on a symlinked or group-writable
// runtime directory.
func TestUnsafeRuntimeDir(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name string
		mk   func(string) error
	}{
		{"symlink", func(p string) error { return os.Symlink(os.TempDir(), p) }},
		{"group writable", func(p string) error {
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			return os.Chmod(p, 0o775)
		}},
		{"foreign owner", func(p string) error {
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			return os.Chown(p, 4242, 4242)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, args := helperDirs(t)
			if err := tc.mk(filepath.Join(base, "run")); err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			hc := startHelperChild(t, nil, nil, append(args, "--listen", filepath.Join(base, "h.sock"))...)
			select {
			case <-hc.done:
				stderr.WriteString(hc.stderr.String())
				if err := hc.err; err == nil || !strings.Contains(stderr.String(), "unsafe directory") {
					t.Errorf("exit %v, stderr:\n%s", err, stderr.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("helper started on an unsafe runtime dir")
			}
		})
	}
}

// TestCleanupFlag: broodd-helper --cleanup (ExecStopPost) runs the real cleanup in its
// network namespace and exits 0, twice in a row (idempotent).
func TestCleanupFlag(t *testing.T) {
	requireRoot(t)
	_, args := helperDirs(t)
	for i := range 2 {
		hc := startHelperChild(t, nil, nil, append(args, "--cleanup")...)
		select {
		case <-hc.done:
			if hc.err != nil || !strings.Contains(hc.stderr.String(), "cleanup done") {
				t.Errorf("run %d: exit %v\n%s", i, hc.err, hc.stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("--cleanup did not exit")
		}
	}
}
