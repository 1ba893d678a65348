package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"brood.dev/brood/internal/testenv"
)

// TestInstallWithoutSystemd installs the .deb into a Debian root where systemd is not
// running (dpkg --root runs the maintainer scripts chrooted there; no /run/systemd/system):
// the postinst creates the group and /var/lib/brood, enables no unit and prints the
// --listen fallback. The packaged helper started that way serves, and `brood doctor` names
// the mode. Purge removes /var/lib/brood. Everything runs in a new network namespace
// (unshare --net), so the scripts' `broodd-helper --cleanup` and the helper's startup
// cleanup touch no tap or nft table of the machine running the test.
func TestInstallWithoutSystemd(t *testing.T) {
	testenv.RequireRoot(t)
	unshare := testenv.RequireCommand(t, "unshare")
	deb, _ := builtPackages(t)
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", cachedRootfs(t), "-C", root).CombinedOutput(); err != nil {
		t.Fatalf("unpack rootfs: %v\n%s", err, out)
	}
	dpkg := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(unshare, append([]string{"--net", "dpkg", "--root=" + root}, args...)...)
		cmd.Env = []string{containerPath, "DEBIAN_FRONTEND=noninteractive"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := dpkg("-i", deb)
	t.Logf("dpkg -i:\n%s", out)
	if !strings.Contains(out, "no systemd: start the helper yourself") || !strings.Contains(out, "broodd-helper --listen /run/brood/helper.sock --idle-timeout 0") {
		t.Errorf("the postinst did not print the --listen fallback")
	}
	if group, _ := os.ReadFile(filepath.Join(root, "etc/group")); !strings.Contains(string(group), "\nbrood:") {
		t.Error("the postinst created no group brood")
	}
	if st, err := os.Stat(filepath.Join(root, "var/lib/brood")); err != nil || !st.IsDir() || st.Mode().Perm() != 0o755 {
		t.Errorf("/var/lib/brood after install: %v, %v", st, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/systemd/system/sockets.target.wants/broodd-helper.socket")); err == nil {
		t.Error("the postinst enabled the socket on a machine without systemd")
	}
	dpkg("-i", deb) // idempotent: a second configure succeeds

	doctor := listenDoctor(t, unshare, root)
	if !strings.Contains(doctor, "activation") || !strings.Contains(doctor, "--listen ") || !strings.Contains(doctor, "(no socket activation") {
		t.Errorf("doctor does not name the --listen mode:\n%s", doctor)
	}
	dpkg("-P", "brood")
	for _, p := range []string{"var/lib/brood", "etc/brood", "usr/sbin/broodd-helper"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("/%s left after purge", p)
		}
	}
}

// listenDoctor starts the packaged helper the documented way for systems without systemd
// (--listen, --idle-timeout 0), in its own network and PID namespaces with its run and state
// directories in a temporary directory, runs the packaged `brood doctor` against it and
// returns doctor's output (its exit status is not checked: there are no boot artifacts).
func listenDoctor(t *testing.T, unshare, root string) string {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "helper.sock")
	cfg := filepath.Join(dir, "helper.toml")
	if err := os.WriteFile(cfg, []byte("allow_uids = [0]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Its own PID namespace too: the startup cleanup's scan for orphaned runners sees only
	// the helper itself, never the runners of other helpers on this machine.
	helper := exec.Command(unshare, "--net", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM", filepath.Join(root, "usr/sbin/broodd-helper"), "--listen", sock, "--idle-timeout", "0",
		"--config", cfg, "--runtime-dir", filepath.Join(dir, "run"), "--state-dir", filepath.Join(dir, "state"))
	var log strings.Builder
	helper.Stdout, helper.Stderr = &log, &log
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// SIGTERM to the helper itself (unshare's child; unshare exits with it), then, should
		// it hang, SIGKILL to both.
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", helper.Process.Pid, helper.Process.Pid))
		for _, k := range strings.Fields(string(kids)) {
			if pid, err := strconv.Atoi(k); err == nil {
				syscall.Kill(pid, syscall.SIGTERM)
			}
		}
		done := make(chan struct{})
		go func() { helper.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			for _, k := range strings.Fields(string(kids)) {
				if pid, err := strconv.Atoi(k); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			helper.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("helper log:\n%s", log.String())
		}
	}()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if st, err := os.Stat(sock); err == nil && st.Mode()&os.ModeSocket != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the helper made no socket within a minute")
		}
	}
	cmd := exec.Command(filepath.Join(root, "usr/bin/brood"), "doctor")
	cmd.Env = []string{containerPath, "HOME=" + dir, "BROOD_HELPER_SOCKET=" + sock}
	out, _ := cmd.CombinedOutput()
	return string(out)
}
