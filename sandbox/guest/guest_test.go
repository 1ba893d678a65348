package guest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"brood.dev/brood/sandbox/guestcfg"
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

func TestModLoaderOrder(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(
		"kernel/fs/9p/9p.ko: kernel/fs/netfs/netfs.ko kernel/net/9p/9pnet.ko kernel/fs/fscache/fscache.ko\n"+
			"kernel/fs/netfs/netfs.ko: kernel/fs/fscache/fscache.ko\n"+
			"kernel/net/9p/9pnet.ko:\nkernel/fs/fscache/fscache.ko:\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte("kernel/fs/ext4/ext4.ko\n"), 0o644)
	l, err := newModLoader(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.load("ext4"); err != nil {
		t.Errorf("built-in ext4: %v", err)
	}
	if err := l.load("nosuch"); err == nil {
		t.Error("load(nosuch) succeeded")
	}
	// Mark everything loaded but 9p itself: loading 9p must then try only 9p.ko,
	// which does not exist here, proving dependencies are skipped once loaded.
	for _, f := range []string{"kernel/fs/netfs/netfs.ko", "kernel/net/9p/9pnet.ko", "kernel/fs/fscache/fscache.ko"} {
		l.loaded[f] = true
	}
	err = l.load("9p")
	if pe, ok := err.(*os.PathError); !ok || pe.Path != filepath.Join(dir, "kernel/fs/9p/9p.ko") {
		t.Errorf("load(9p) = %v, want an open error for 9p.ko", err)
	}
}
