package guest

import (
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

// homeChildEnv, set, makes TestMakeHome the child that runs in a private mount
// namespace (unshare(1) re-executes the test binary), so its tmpfs mounts vanish with it.
const homeChildEnv = "BROOD_TEST_HOME_CHILD"

// TestMakeHome makes the agent's home for uids 1000, 1001 and 123456 over an image home
// owned by uid 1000, and with only /etc/skel, in a temporary mount namespace: the home
// is a tmpfs owned by the uid with mode 0700, holds the skeleton owned by the uid, a
// process running as the uid can write to it, and the image's directory under it is
// untouched.
func TestMakeHome(t *testing.T) {
	testenv.RequireRoot(t)
	if os.Getenv(homeChildEnv) == "" {
		unshare := testenv.RequireCommand(t, "unshare")
		cmd := exec.Command(unshare, "--mount", "--propagation", "private", os.Args[0], "-test.run=^TestMakeHome$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), homeChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestMakeHome") {
			t.Fatalf("child in a private mount namespace: %v\n%s", err, out)
		}
		t.Logf("child:\n%s", out)
		return
	}
	for _, uid := range []int{1000, 1001, 123456} {
		for _, imageHome := range []bool{true, false} {
			name := strconv.Itoa(uid) + map[bool]string{true: "-image-home", false: "-etc-skel"}[imageHome]
			t.Run(name, func(t *testing.T) { testMakeHome(t, uid, imageHome) })
		}
	}
}

func testMakeHome(t *testing.T, uid int, imageHome bool) {
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} { // reachable by the uid under test
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(root, "home", "agent")
	skel := filepath.Join(root, "etc", "skel")
	write := func(p string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(filepath.Base(p)+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(skel, ".profile"), 0o644)
	src := skel
	if imageHome { // what useradd --create-home left in the image: uid 1000's
		src = home
		write(filepath.Join(home, ".profile"), 0o644)
		write(filepath.Join(home, ".config", "agent", "settings.json"), 0o600)
		write(filepath.Join(home, "bin", "tool"), 0o4755) // setuid dropped in the copy
		if err := os.Symlink(".config/agent", filepath.Join(home, "cfg")); err != nil {
			t.Fatal(err)
		}
		if err := filepath.Walk(home, func(p string, _ os.FileInfo, err error) error {
			if err == nil {
				err = os.Lchown(p, 1000, 1000)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := makeHome(home, uid, uid, []string{home, filepath.Join(root, "nosuch"), skel}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(home, unix.MNT_DETACH) })

	var sfs unix.Statfs_t
	if err := unix.Statfs(home, &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		t.Errorf("home is not a tmpfs: type %#x, %v", sfs.Type, err)
	}
	owned := func(rel string, mode os.FileMode) {
		t.Helper()
		fi, err := os.Lstat(filepath.Join(home, rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != uid || int(st.Gid) != uid || (mode != 0 && fi.Mode() != mode) {
			t.Errorf("%s: owner %d:%d mode %v, want %d:%d %v", rel, st.Uid, st.Gid, fi.Mode(), uid, uid, mode)
		}
	}
	owned(".", os.ModeDir|0o700)
	owned(".profile", 0o644)
	if imageHome {
		owned(".config/agent/settings.json", 0o600)
		owned("bin/tool", 0o755)
		owned("cfg", 0)
		if l, err := os.Readlink(filepath.Join(home, "cfg")); err != nil || l != ".config/agent" {
			t.Errorf("cfg -> %q, %v", l, err)
		}
	}
	// A process running as the uid (and only as it) writes a file and a directory.
	cmd := exec.Command("/bin/sh", "-c", `echo hi > "$HOME/x" && mkdir "$HOME/.cache" && id -u`)
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != strconv.Itoa(uid) {
		t.Fatalf("uid %d writing its home: %v: %s", uid, err, out)
	}
	owned("x", 0o644)
	// The image's directory under the mount is unchanged: nothing went into it.
	if err := unix.Unmount(home, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(home, "x")); !os.IsNotExist(err) {
		t.Errorf("x is in the image's home after the unmount: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(src, ".profile")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != map[bool]uint32{true: 1000, false: 0}[imageHome] {
		t.Errorf("skeleton %s/.profile changed: %v", src, err)
	}
}

func TestSetUser(t *testing.T) {
	for _, tc := range []struct {
		uid               int
		passwd, group     string
		wantPw, wantGroup string
	}{
		{123456, "root:x:0:0:root:/root:/bin/bash\nagent:x:1000:1000::/home/agent:/bin/sh\n", "root:x:0:\nagent:x:1000:\n",
			"root:x:0:0:root:/root:/bin/bash\nagent:x:123456:123456:brood agent:/home/agent:/bin/sh\n", "root:x:0:\nagent:x:123456:\n"},
		{1000, "root:x:0:0:root:/root:/bin/bash\nagent:x:1000:1000::/home/agent:/bin/sh\n", "root:x:0:\nagent:x:1000:\n",
			"root:x:0:0:root:/root:/bin/bash\nagent:x:1000:1000:brood agent:/home/agent:/bin/sh\n", "root:x:0:\nagent:x:1000:\n"},
		// uid 1001 was another account's; gid 1001 a group of its own, kept.
		{1001, "root:x:0:0:root:/root:/bin/bash\nbob:x:1001:1001::/home/bob:/bin/sh\n", "bob:x:1001:\n",
			"root:x:0:0:root:/root:/bin/bash\nagent:x:1001:1001:brood agent:/home/agent:/bin/sh\n", "bob:x:1001:\n"},
		{1001, "", "", "agent:x:1001:1001:brood agent:/home/agent:/bin/sh\n", "agent:x:1001:\n"}, // no files
	} {
		etc := t.TempDir()
		if tc.passwd != "" {
			os.WriteFile(filepath.Join(etc, "passwd"), []byte(tc.passwd), 0o644)
			os.WriteFile(filepath.Join(etc, "group"), []byte(tc.group), 0o644)
		}
		if err := setUser(etc, "agent", tc.uid, tc.uid, "/home/agent"); err != nil {
			t.Fatal(err)
		}
		pw, _ := os.ReadFile(filepath.Join(etc, "passwd"))
		gr, _ := os.ReadFile(filepath.Join(etc, "group"))
		if string(pw) != tc.wantPw || string(gr) != tc.wantGroup {
			t.Errorf("uid %d: passwd %q group %q; want %q %q", tc.uid, pw, gr, tc.wantPw, tc.wantGroup)
		}
	}
}
