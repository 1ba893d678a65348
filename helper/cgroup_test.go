//go:build linux

package helper

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/testenv"
)

// TestUserCgroupPlacement places a process of uid 4242 (standing in for a runner) with
// the userCgroups the daemon uses, under a parent cgroup the test makes: /proc/PID/cgroup
// names <parent>/brood.slice/brood-user-4242.slice; uid 4242 can neither move it out nor
// write the limits; with the memory and cpu controllers in the unified hierarchy,
// memory.max and cpu.max hold the quota's values (a hybrid host has none there: logged);
// once the process is gone, Release removes the directory.
func TestUserCgroupPlacement(t *testing.T) {
	requireRoot(t)
	mount, err := cgroup2Mount()
	if err != nil {
		testenv.Skip(t, "no cgroup2 mount: "+err.Error())
	}
	b := make([]byte, 3)
	rand.Read(b)
	parent := "/brood-test-" + hex.EncodeToString(b)
	if err := os.Mkdir(filepath.Join(mount, parent), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.Rmdir(filepath.Join(mount, parent, cgroupSlice))
		unix.Rmdir(filepath.Join(mount, parent))
	})
	cg, err := openUserCgroups(parent)
	if err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("/bin/sleep", "600")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	pid := sleeper.Process.Pid
	if err := cg.Place(pid, 4242, userQuota{VCPUs: 2, MemoryMiB: 1024}); err != nil {
		t.Fatal(err)
	}
	want := "0::" + parent + "/" + cgroupSlice + "/brood-user-4242.slice"
	if got, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup"); !strings.Contains(string(got), want+"\n") {
		t.Errorf("/proc/%d/cgroup = %q, want the line %q", pid, got, want)
	}
	user := filepath.Join(cg.dir, "brood-user-4242.slice")
	owned := []string{filepath.Join(mount, "cgroup.procs"), filepath.Join(mount, parent, "cgroup.procs"), filepath.Join(user, "cgroup.subtree_control")}
	for _, f := range []string{"memory.max", "cpu.max"} {
		if _, err := os.Stat(filepath.Join(user, f)); err == nil {
			owned = append(owned, filepath.Join(user, f))
		}
	}
	for _, f := range owned {
		sh := exec.Command("/bin/sh", "-c", `echo "$1" > "$2"`, "sh", strconv.Itoa(pid), f)
		sh.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
		if out, err := sh.CombinedOutput(); err == nil {
			t.Errorf("uid 4242 wrote %s: %s", f, out)
		}
	}
	if len(cg.controllers) == 2 {
		for f, v := range map[string]string{"memory.max": memoryMax(1024), "cpu.max": "200000 100000"} {
			if got, _ := os.ReadFile(filepath.Join(user, f)); strings.TrimSpace(string(got)) != v {
				t.Errorf("%s = %q, want %q", f, got, v)
			}
		}
	} else {
		t.Logf("unified hierarchy has controllers %q of memory, cpu: limits not written (hybrid cgroup host); check: %+v", cg.controllers, cg.Check(nil))
	}
	cg.Release(4242)
	if _, err := os.Stat(user); err != nil {
		t.Errorf("Release removed the cgroup of a live process: %v", err)
	}
	sleeper.Process.Kill()
	sleeper.Wait()
	cg.Release(4242)
	if _, err := os.Stat(user); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup after the last process left: %v", err)
	}
}

// TestCgroupLimitValues: memory.max adds a quarter (at least 256 MiB) for the VMMs,
// cpu.max is vCPUs × 100 ms per 100 ms, 0 is unlimited.
func TestCgroupLimitValues(t *testing.T) {
	for _, tc := range []struct {
		mib  int
		want string
	}{{0, "max"}, {512, strconv.Itoa((512 + 256) << 20)}, {8192, strconv.Itoa((8192 + 2048) << 20)}} {
		if got := memoryMax(tc.mib); got != tc.want {
			t.Errorf("memoryMax(%d) = %s, want %s", tc.mib, got, tc.want)
		}
	}
	if got := cpuMax(0); got != "max 100000" {
		t.Errorf("cpuMax(0) = %s", got)
	}
	if got := cpuMax(3); got != "300000 100000" {
		t.Errorf("cpuMax(3) = %s", got)
	}
}
