//go:build linux

package helper

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"brood.dev/brood/helper/vmhost"
)

// TestHelperStartupKeepsForeignTree: the real helper (started as root, so running with
// the unit's capability set only) removes a predecessor's run dir at startup as the run
// dir's owner. Its owner, uid 4242, had renamed uid 4343's directory "drop" (mode 0777),
// holding a private directory (0700) with a 0600 file that uid 4242 cannot delete, into
// the run dir: after the startup cleanup the file is intact and still uid 4343's, uid
// 4242's own file is gone, and the helper logs the run dir it kept.
func TestHelperStartupKeepsForeignTree(t *testing.T) {
	requireRoot(t)
	pub := publicTempDir(t)
	runtime := filepath.Join(pub, "run")
	runDir := filepath.Join(runtime, vmhost.RunParent, "0badc0de")
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(runDir, 0o700)
	os.Chown(runDir, 4242, 4242)
	shared := filepath.Join(pub, "shared")
	os.Mkdir(shared, 0o777)
	os.Chmod(shared, 0o777)
	private := filepath.Join(shared, "drop", "private")
	os.MkdirAll(private, 0o700)
	secret := filepath.Join(private, "secret")
	if err := os.WriteFile(secret, []byte("victim's"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(private), 0o777)
	for _, p := range []string{secret, private, filepath.Dir(private)} {
		os.Chown(p, 4343, 4343)
	}
	mv := exec.Command("/bin/sh", "-c", `echo mine > "$1/own" && mv "$2" "$1/stolen"`, "sh", runDir, filepath.Dir(private))
	mv.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
	if out, err := mv.CombinedOutput(); err != nil {
		t.Fatalf("the owner's rename: %v\n%s", err, out)
	}

	base, args := helperDirs(t)
	sock := filepath.Join(base, "h.sock")
	hc := startHelperChild(t, nil, nil, append(args[:4:4], "--runtime-dir", runtime, "--listen", sock, "--idle-timeout", "0")...)
	c := waitDial(t, hc, sock, 20*time.Second)
	c.Close()

	moved := filepath.Join(runDir, "stolen", "private", "secret")
	var st syscall.Stat_t
	if b, err := os.ReadFile(moved); err != nil || string(b) != "victim's" {
		t.Errorf("victim's file after the helper's startup cleanup: %q, %v", b, err)
	} else if syscall.Lstat(moved, &st); st.Uid != 4343 {
		t.Errorf("victim's file now owned by uid %d", st.Uid)
	}
	if _, err := os.Lstat(filepath.Join(runDir, "own")); !os.IsNotExist(err) {
		t.Errorf("the owner's own file is still there: %v", err)
	}
	if log := hc.stderr.String(); !strings.Contains(log, "another user's directory") {
		t.Errorf("helper log does not report the kept run dir:\n%s", log)
	}
}
