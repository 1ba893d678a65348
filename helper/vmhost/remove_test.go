//go:build linux

package vmhost

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/testenv"
)

// Two unprivileged uids of the run dir removal tests: the session owner (the attacker)
// and the victim whose directory the owner moves into the run dir.
const (
	ownerUID  = 4242
	victimUID = 4343
)

// asUID runs argv as uid (and gid = uid), failing the test on error.
func asUID(t *testing.T, uid uint32, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v as uid %d: %v\n%s", argv, uid, err, out)
	}
}

// stolenTree lays out the attack of a session owner on another user's files: the
// victim's directory "drop" (mode 0777, so that others may move it) holds their private
// directory (0700) with a 0600 file, which the owner cannot delete; "drop" sits in a
// directory both may write. The owner, as their own uid, renames "drop" into their run
// dir next to files and directories of their own (one mode 0000). It returns the
// runtime dir, the run dir and the victim's file path inside it.
func stolenTree(t *testing.T) (runtimeDir, runDir, secret string) {
	t.Helper()
	testenv.RequireRoot(t)
	runtimeDir, err := os.MkdirTemp("", "rundir-attack-") // t.TempDir's parent is 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(runtimeDir) })
	os.Chmod(runtimeDir, 0o755)
	shared := filepath.Join(runtimeDir, "shared")
	os.Mkdir(shared, 0o777)
	os.Chmod(shared, 0o777) // not sticky: the owner may rename the victim's directory
	drop := filepath.Join(shared, "drop")
	private := filepath.Join(drop, "private")
	os.MkdirAll(private, 0o700)
	if err := os.WriteFile(filepath.Join(private, "secret"), []byte("victim's"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(drop, 0o777)
	for _, p := range []string{filepath.Join(private, "secret"), private, drop} {
		if err := os.Chown(p, victimUID, victimUID); err != nil {
			t.Fatal(err)
		}
	}
	parent := filepath.Join(runtimeDir, RunParent)
	os.Mkdir(parent, 0o755)
	runDir = filepath.Join(parent, "0badc0de")
	os.Mkdir(runDir, 0o700)
	os.Chown(runDir, ownerUID, ownerUID)
	asUID(t, ownerUID, "/bin/sh", "-c", `mkdir -p "$1/own/deeper" && echo x > "$1/own/f" && chmod 0 "$1/own/deeper" && mv "$2" "$1/stolen"`,
		"sh", runDir, drop)
	secret = filepath.Join(runDir, "stolen", "private", "secret")
	// The harm is real: the owner cannot delete the victim's file themself.
	cmd := exec.Command("/bin/rm", "-rf", filepath.Join(runDir, "stolen", "private"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: ownerUID, Gid: ownerUID}}
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("the owner deleted the victim's private directory themself: %s", out)
	}
	return runtimeDir, runDir, secret
}

// checkVictimIntact: the victim's file still holds its content and, like its
// directory, is still the victim's.
func checkVictimIntact(t *testing.T, secret string) {
	t.Helper()
	if b, err := os.ReadFile(secret); err != nil || string(b) != "victim's" {
		t.Errorf("victim's file after removal: %q, %v", b, err)
	}
	for _, p := range []string{secret, filepath.Dir(secret), filepath.Dir(filepath.Dir(secret))} {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil || st.Uid != victimUID {
			t.Errorf("%s: owner %d, %v (want uid %d, never chowned)", p, st.Uid, err, victimUID)
		}
	}
}

// TestRemoveRunDirKeepsForeignTree: a session owner moved another user's private
// directory into their run dir; removing the run dir deletes the owner's own files and
// directories (even one they made mode 0000) and leaves the victim's directory and file
// as they were, owner included, reporting ErrForeignTree.
func TestRemoveRunDirKeepsForeignTree(t *testing.T) {
	_, runDir, secret := stolenTree(t)
	err := removeRunDir(runDir)
	if !errors.Is(err, ErrForeignTree) {
		t.Errorf("removeRunDir = %v, want ErrForeignTree", err)
	}
	checkVictimIntact(t, secret)
	if _, err := os.Lstat(filepath.Join(runDir, "own")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the owner's own directory is still there: %v", err)
	}
}

// TestCleanupRunDirsKeepsForeignTree: the same attack against the startup cleanup of
// run dirs a crashed helper left.
func TestCleanupRunDirsKeepsForeignTree(t *testing.T) {
	runtimeDir, runDir, secret := stolenTree(t)
	got, left, err := CleanupRunDirs(runtimeDir)
	if err != nil || !errors.Is(left, ErrForeignTree) || len(got) != 0 {
		t.Errorf("CleanupRunDirs = %v, %v, %v; want nothing removed and ErrForeignTree left", got, left, err)
	}
	checkVictimIntact(t, secret)
	if _, err := os.Lstat(filepath.Join(runDir, "own")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the owner's own directory is still there: %v", err)
	}
}

// fsuids returns the filesystem uid of every thread of this process
// (/proc/self/task/*/status, the fourth field of Uid:).
func fsuids(t *testing.T) map[string]string {
	t.Helper()
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	out := map[string]string{}
	for _, p := range tasks {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited meanwhile
		}
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) == 5 && f[0] == "Uid:" {
				out[p] = f[4]
			}
		}
	}
	return out
}

// TestAsOwnerThreadNotReused: fn runs with the owner's filesystem uid, and afterwards no
// thread of the process is left with it (the locked thread exits with its goroutine;
// polled, since the runtime ends the thread just after the goroutine returns), except
// the main thread, which the Go runtime cannot end and parks for good instead
// (runtime.mexit: "wedge" m0).
func TestAsOwnerThreadNotReused(t *testing.T) {
	testenv.RequireRoot(t)
	for i := 0; i < 20; i++ {
		err := asOwner(ownerUID, ownerUID, func() error {
			if cur, _ := unix.SetfsuidRetUid(-1); cur != ownerUID {
				return fmt.Errorf("fsuid in fn = %d", cur)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := 0
		main := fmt.Sprintf("/proc/self/task/%d/status", os.Getpid())
		for p, u := range fsuids(t) {
			if u != "0" && p != main {
				left++
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d threads keep a non-root filesystem uid: %v", left, fsuids(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
