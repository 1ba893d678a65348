package initramfs

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/u-root/u-root/pkg/cpio"

	"brood.dev/brood/sandbox/guestcfg"
)

const testDep = `kernel/fs/9p/9p.ko: kernel/fs/netfs/netfs.ko kernel/net/9p/9pnet.ko kernel/fs/fscache/fscache.ko
kernel/net/9p/9pnet.ko:
kernel/fs/netfs/netfs.ko: kernel/fs/fscache/fscache.ko
kernel/fs/fscache/fscache.ko:
kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/crypto/crc32c_generic.ko:
`

func TestClosure(t *testing.T) {
	db, err := ParseDepDB([]byte(testDep), []byte("kernel/fs/ext4/ext4.ko\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := db.Closure([]string{"9pnet-virtio", "9p", "ext4"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"kernel/drivers/virtio/virtio_ring.ko", "kernel/net/9p/9pnet.ko", "kernel/net/9p/9pnet_virtio.ko",
		"kernel/fs/fscache/fscache.ko", "kernel/fs/netfs/netfs.ko", "kernel/fs/9p/9p.ko",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Closure =\n%q\nwant\n%q", got, want)
	}
	if _, err := db.Closure([]string{"nosuch"}); !errors.Is(err, ErrUnknownModule) {
		t.Errorf("Closure(nosuch) err = %v, want ErrUnknownModule", err)
	}
	if _, err := ParseDepDB([]byte("/abs/x.ko: \n"), nil); err == nil {
		t.Error("ParseDepDB accepted an absolute module path")
	}
	sub := db.Subset([]string{"kernel/fs/netfs/netfs.ko"})
	if string(sub) != "kernel/fs/netfs/netfs.ko: kernel/fs/fscache/fscache.ko\n" {
		t.Errorf("Subset = %q", sub)
	}
}

func readArchive(t *testing.T, r io.ReaderAt) map[string]cpio.Record {
	t.Helper()
	recs, err := cpio.ReadAllRecords(cpio.Newc.Reader(r))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]cpio.Record{}
	for _, r := range recs {
		m[r.Name] = r
	}
	return m
}

func TestBuildAndSession(t *testing.T) {
	dir := t.TempDir()
	mods := filepath.Join(dir, "lib/modules/6.1.0-test")
	for _, f := range []string{"kernel/fs/9p/9p.ko", "kernel/net/9p/9pnet.ko", "kernel/fs/netfs/netfs.ko", "kernel/fs/fscache/fscache.ko"} {
		os.MkdirAll(filepath.Dir(filepath.Join(mods, f)), 0o755)
		os.WriteFile(filepath.Join(mods, f), []byte("module "+f), 0o644)
	}
	os.WriteFile(filepath.Join(mods, "modules.dep"), []byte(testDep), 0o644)
	os.WriteFile(filepath.Join(mods, "modules.builtin"), []byte("kernel/fs/ext4/ext4.ko\n"), 0o644)
	guest := filepath.Join(dir, "brood-guest")
	os.WriteFile(guest, []byte("\x7fELF guest"), 0o755)
	o := Options{Release: "6.1.0-test", ModulesDir: mods, Guest: guest, Modules: []string{"9p", "ext4"}}

	cache := filepath.Join(dir, "cache")
	base, err := Build(cache, o)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Build(cache, o)
	if err != nil || again != base {
		t.Errorf("second Build = %q, %v; want the cached %q", again, err, base)
	}
	os.WriteFile(guest, []byte("\x7fELF guest v2"), 0o755)
	if changed, _ := Build(cache, o); changed == base {
		t.Error("Build did not change its digest when the guest binary changed")
	}
	os.WriteFile(guest, []byte("\x7fELF guest"), 0o755)

	out := filepath.Join(dir, "session.img")
	if err := WithSession(base, out, []File{{Name: guestcfg.SessionPath, Mode: 0o600, Data: []byte(`{"x":1}`)}}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o600 {
		t.Errorf("session initramfs mode %v, want 0600", fi.Mode().Perm())
	}
	all, _ := os.ReadFile(out)
	br := bufio.NewReader(bytes.NewReader(all))
	zr, err := gzip.NewReader(br)
	if err != nil {
		t.Fatal(err)
	}
	zr.Multistream(false)
	first, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	m := readArchive(t, bytes.NewReader(first))
	if r, ok := m["init"]; !ok || r.Mode&0o777 != 0o755 {
		t.Errorf("base archive init = %+v (present %v)", r.Info, ok)
	}
	if r, ok := m["dev/console"]; !ok || r.Rmajor != 5 || r.Rminor != 1 {
		t.Errorf("base archive lacks dev/console c 5 1: %+v", r.Info)
	}
	for _, f := range []string{"lib/modules/6.1.0-test/kernel/fs/9p/9p.ko", "lib/modules/6.1.0-test/kernel/fs/fscache/fscache.ko", guestcfg.ModulesLoadPath} {
		if _, ok := m[f]; !ok {
			t.Errorf("base archive lacks %s", f)
		}
	}
	if _, ok := m["lib/modules/6.1.0-test/kernel/net/9p/9pnet_virtio.ko"]; ok {
		t.Error("base archive carries an unrequested module")
	}
	rest, _ := io.ReadAll(br)
	rest = bytes.TrimLeft(rest, "\x00") // the padding after the base archive
	if off := len(all) - len(rest); off%4 != 0 {
		t.Fatalf("session archive at offset %d, not 4-aligned", off)
	}
	sm := readArchive(t, bytes.NewReader(rest))
	if r, ok := sm[guestcfg.SessionPath]; !ok || r.Mode&0o777 != 0o600 {
		t.Errorf("session archive lacks %s mode 0600: %+v", guestcfg.SessionPath, r.Info)
	}
}

func TestSoftdeps(t *testing.T) {
	db, err := ParseDepDB([]byte("kernel/lib/libcrc32c.ko:\nkernel/crypto/crc32c_generic.ko:\nkernel/fs/erofs/erofs.ko: kernel/lib/libcrc32c.ko\nkernel/fs/ext4/ext4.ko:\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	softdep := []byte("# comment\nsoftdep ext4 pre: crypto-crc32c\nsoftdep libcrc32c pre: crc32c post: ext4\nsoftdep erofs pre: missing\n")
	alias := []byte("alias crc32c crc32c_intel\nalias crc32c crc32c_generic\nalias crypto-crc32c crc32c_generic\n")
	closure := []string{"kernel/crypto/crc32c_generic.ko", "kernel/lib/libcrc32c.ko", "kernel/fs/erofs/erofs.ko"}
	got := string(db.Softdeps(closure, softdep, alias))
	// ext4 is not in the closure; crc32c_intel is not either; "post:" and unresolved names drop out.
	if want := "softdep libcrc32c pre: crc32c_generic\n"; got != want {
		t.Errorf("Softdeps = %q, want %q", got, want)
	}
	if got := db.Softdeps(closure, nil, nil); len(got) != 0 {
		t.Errorf("Softdeps without files = %q, want empty", got)
	}
}
