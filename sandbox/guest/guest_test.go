package guest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/sandbox/guestcfg"
	"brood.dev/brood/sandbox/initramfs"
)

func TestParseCmdline(t *testing.T) {
	m := parseCmdline("console=ttyS0 quiet brood.time=1700000000.5 brood.debug=1\n")
	if m["console"] != "ttyS0" || m["brood.time"] != "1700000000.5" || m["brood.debug"] != "1" {
		t.Errorf("parseCmdline = %v", m)
	}
	if v, ok := m["quiet"]; !ok || v != "" {
		t.Errorf("bare word quiet = %q, %v", v, ok)
	}
}

func TestEnv(t *testing.T) {
	g := &guest{cfg: guestcfg.Config{User: "agent", UID: 1000, GID: 1000}}
	s := &session{pty: true, term: "xterm", env: []string{"OPENAI_API_KEY=k"}}
	got := g.env(s)
	for _, want := range []string{"HOME=/home/agent", "USER=agent", "TERM=xterm", "OPENAI_API_KEY=k"} {
		if !slices.Contains(got, want) {
			t.Errorf("env lacks %q: %q", want, got)
		}
	}
	os.Setenv("BROOD_SECRET_IN_INIT", "x")
	defer os.Unsetenv("BROOD_SECRET_IN_INIT")
	for _, e := range g.env(&session{}) {
		if e == "BROOD_SECRET_IN_INIT=x" || e == "TERM=" {
			t.Errorf("env leaked %q", e)
		}
	}
	for n, ok := range map[string]bool{"A": true, "": false, "A=B": false, "A\x00": false} {
		if validEnvName(n) != ok {
			t.Errorf("validEnvName(%q) = %v", n, !ok)
		}
	}
}

// load is start then wait for names.
func (l *modLoader) load(names []string) error {
	if err := l.start(names); err != nil {
		return err
	}
	return l.wait(names)
}

func TestModLoaderOrder(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(
		"kernel/fs/9p/9p.ko: kernel/fs/netfs/netfs.ko kernel/net/9p/9pnet.ko kernel/fs/fscache/fscache.ko\n"+
			"kernel/fs/netfs/netfs.ko: kernel/fs/fscache/fscache.ko\n"+
			"kernel/net/9p/9pnet.ko:\nkernel/fs/fscache/fscache.ko:\n"+
			"kernel/lib/libcrc32c.ko:\nkernel/crypto/crc32c_generic.ko:\nkernel/fs/erofs/erofs.ko: kernel/lib/libcrc32c.ko\n"+
			"kernel/drivers/virtio/virtio_mmio.ko:\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte("kernel/fs/ext4/ext4.ko\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "modules.softdep"), []byte("softdep libcrc32c pre: crc32c_generic\nsoftdep 9pnet pre: notloaded\n"), 0o644)
	l, err := newModLoader(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.load([]string{"ext4"}); err != nil {
		t.Errorf("built-in ext4: %v", err)
	}
	if err := l.load([]string{"nosuch"}); err == nil {
		t.Error("load(nosuch) succeeded")
	}
	// The real finit_module: the files do not exist here.
	err = l.load([]string{"fscache"})
	if pe, ok := err.(*os.PathError); !ok || pe.Path != filepath.Join(dir, "kernel/fs/fscache/fscache.ko") {
		t.Errorf("load(fscache) = %v, want an open error for fscache.ko", err)
	}

	// Every module is loaded once, after its modules.dep closure and soft dependencies.
	for range 20 { // goroutine scheduling varies between runs
		l.mods = map[string]*modLoad{}
		var mu sync.Mutex
		var order []string
		l.insmod = func(file string) error {
			mu.Lock()
			order = append(order, modName(file))
			mu.Unlock()
			return nil
		}
		if err := l.load([]string{"virtio_mmio", "crc32c_generic", "erofs", "9p"}); err != nil {
			t.Fatal(err)
		}
		at := map[string]int{}
		for i, m := range order {
			if _, dup := at[m]; dup {
				t.Fatalf("%s loaded twice: %v", m, order)
			}
			at[m] = i
		}
		if len(order) != 8 {
			t.Fatalf("loaded %v, want 8 modules", order)
		}
		for _, before := range [][2]string{{"fscache", "netfs"}, {"netfs", "9p"}, {"9pnet", "9p"}, {"fscache", "9p"},
			{"libcrc32c", "erofs"}, {"crc32c_generic", "libcrc32c"}} {
			if at[before[0]] > at[before[1]] {
				t.Fatalf("%s loaded after %s: %v", before[0], before[1], order)
			}
		}
	}

	// A second call loads only what the first did not.
	l.mods = map[string]*modLoad{}
	var second []string
	l.insmod = func(file string) error { second = append(second, modName(file)); return nil }
	if err := l.load([]string{"netfs"}); err != nil {
		t.Fatal(err)
	}
	second = nil
	if err := l.load([]string{"9p"}); err != nil {
		t.Fatal(err)
	}
	if slices.Sort(second); !slices.Equal(second, []string{"9p", "9pnet"}) {
		t.Errorf("second load loaded %v, want [9p 9pnet]", second)
	}

	// A failed module fails its dependents without trying them.
	l.mods = map[string]*modLoad{}
	var tried []string
	var mu sync.Mutex
	l.insmod = func(file string) error {
		mu.Lock()
		defer mu.Unlock()
		tried = append(tried, modName(file))
		if modName(file) == "fscache" {
			return unix.ENOEXEC
		}
		return nil
	}
	err = l.load([]string{"9p"})
	if !errors.Is(err, unix.ENOEXEC) {
		t.Errorf("load(9p) with fscache failing = %v", err)
	}
	if slices.Contains(tried, "9p") || slices.Contains(tried, "netfs") {
		t.Errorf("dependents of a failed module were tried: %v", tried)
	}
}

// TestModLoaderWait: a boot step waiting for its modules is not held up by a module it
// does not need, even one still loading; a module that was never started is an error;
// waitAll reports a failure of any started module.
func TestModLoaderWait(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(
		"kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko\nkernel/net/9p/9pnet.ko:\n"+
			"kernel/drivers/virtio/virtio_mmio.ko:\nkernel/drivers/char/virtio_console.ko: kernel/drivers/virtio/virtio_mmio.ko\n"+
			"kernel/drivers/net/virtio_net.ko:\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte("kernel/fs/ext4/ext4.ko\n"), 0o644)
	l, err := newModLoader(dir)
	if err != nil {
		t.Fatal(err)
	}
	release9p := make(chan struct{})
	var mu sync.Mutex
	var loaded []string
	l.insmod = func(file string) error {
		if modName(file) == "9pnet" {
			<-release9p
		}
		if modName(file) == "virtio_net" {
			return unix.ENODEV
		}
		mu.Lock()
		loaded = append(loaded, modName(file))
		mu.Unlock()
		return nil
	}
	if err := l.start([]string{"9p", "virtio_console", "ext4"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.wait([]string{"virtio_console", "ext4"}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("wait(virtio_console) = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("wait(virtio_console) waited for 9pnet, which it does not need")
	}
	mu.Lock()
	if !slices.Equal(loaded, []string{"virtio_mmio", "virtio_console"}) {
		t.Errorf("loaded %v before 9pnet was released, want [virtio_mmio virtio_console]", loaded)
	}
	mu.Unlock()
	if err := l.wait([]string{"virtio_net"}); err == nil {
		t.Error("wait for a module never started succeeded")
	}
	close(release9p)
	if err := l.wait([]string{"9p"}); err != nil {
		t.Fatalf("wait(9p) = %v", err)
	}
	if err := l.waitAll(); err != nil {
		t.Fatalf("waitAll = %v", err)
	}
	if err := l.start([]string{"virtio_net"}); err != nil {
		t.Fatal(err)
	}
	if err := l.waitAll(); !errors.Is(err, unix.ENODEV) {
		t.Errorf("waitAll with virtio_net failing = %v, want ENODEV", err)
	}
	if err := l.start([]string{"nosuch"}); err == nil {
		t.Error("start(nosuch) succeeded")
	}
}

// TestBootStepModules: every module a boot step waits for is one the initramfs lists.
func TestBootStepModules(t *testing.T) {
	steps := slices.Concat(sshModules, rootModules, shareModules, []string{netModule})
	for _, m := range steps {
		if !slices.Contains(initramfs.DefaultModules, m) {
			t.Errorf("boot step waits for %s, which initramfs.DefaultModules lacks", m)
		}
	}
	if !guestcfg.OptionalModules[netModule] {
		t.Errorf("%s is started only for a network, but guestcfg.OptionalModules lacks it", netModule)
	}
}

func TestWaitNoChildren(t *testing.T) {
	// Run in a child process: the test binary may have other children (none by
	// default), and waitNoChildren reaps whatever it finds.
	if os.Getenv("BROOD_TEST_WAITNOCHILDREN") == "1" {
		start := time.Now()
		waitNoChildren(time.Second)
		if d := time.Since(start); d > 500*time.Millisecond {
			fmt.Printf("no children: waited %v\n", d)
			os.Exit(1)
		}
		cmd := exec.Command("sleep", "0.2")
		if err := cmd.Start(); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		start = time.Now()
		waitNoChildren(5 * time.Second)
		if d := time.Since(start); d < 150*time.Millisecond || d > 3*time.Second {
			fmt.Printf("one child of 0.2 s: waited %v\n", d)
			os.Exit(1)
		}
		start = time.Now()
		long := exec.Command("sleep", "10")
		if err := long.Start(); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		waitNoChildren(100 * time.Millisecond)
		if d := time.Since(start); d > 3*time.Second {
			fmt.Printf("bound of 100 ms: waited %v\n", d)
			long.Process.Kill()
			os.Exit(1)
		}
		long.Process.Kill()
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWaitNoChildren$")
	cmd.Env = append(os.Environ(), "BROOD_TEST_WAITNOCHILDREN=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
