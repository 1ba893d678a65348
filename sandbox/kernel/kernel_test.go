package kernel

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox/store"
)

func TestParseDepends(t *testing.T) {
	out := []byte("linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n")
	if got, err := ParseDepends(out); err != nil || got != "linux-image-6.1.0-57-amd64" {
		t.Errorf("ParseDepends = %q, %v", got, err)
	}
	if _, err := ParseDepends([]byte("linux-image-amd64\n")); !errors.Is(err, ErrNoPackage) {
		t.Errorf("ParseDepends(no depends) err = %v, want ErrNoPackage", err)
	}
	if rel, err := Release("linux-image-6.1.0-57-amd64"); err != nil || rel != "6.1.0-57-amd64" {
		t.Errorf("Release = %q, %v", rel, err)
	}
	for _, bad := range []string{"linux-image-amd64", "linux-headers-6.1", "linux-image-../x"} {
		if _, err := Release(bad); !errors.Is(err, ErrNoPackage) {
			t.Errorf("Release(%q) err = %v, want ErrNoPackage", bad, err)
		}
	}
}

// fakeBzImage builds a minimal bzImage: boot protocol 2.15 header and payload.
func fakeBzImage(payload []byte) []byte {
	const setupSects = 3
	b := make([]byte, (setupSects+1)*512+16+len(payload)+4)
	b[offSetupSects] = setupSects
	copy(b[offHeaderMagic:], "HdrS")
	binary.LittleEndian.PutUint16(b[offVersion:], 0x20f)
	binary.LittleEndian.PutUint32(b[offPayloadOffset:], 16)
	binary.LittleEndian.PutUint32(b[offPayloadLength:], uint32(len(payload)+4)) // + size_append
	copy(b[(setupSects+1)*512+16:], payload)
	return b
}

func TestVmlinuxGzip(t *testing.T) {
	elf := append([]byte("\x7fELF"), bytes.Repeat([]byte("kernel"), 1000)...)
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(elf)
	zw.Close()
	got, err := Vmlinux(t.Context(), fakeBzImage(z.Bytes()))
	if err != nil || !bytes.Equal(got, elf) {
		t.Fatalf("Vmlinux = %d bytes, %v; want the %d-byte ELF", len(got), err, len(elf))
	}
	if _, err := Vmlinux(t.Context(), fakeBzImage([]byte("\x04\x22\x4d\x18lz4"))); !errors.Is(err, ErrCompression) {
		t.Errorf("lz4 payload: err = %v, want ErrCompression", err)
	}
	if _, err := Vmlinux(t.Context(), []byte("MZ not a kernel")); !errors.Is(err, ErrNotBzImage) {
		t.Errorf("garbage: err = %v, want ErrNotBzImage", err)
	}
}

// TestFetch downloads and unpacks the real Debian kernel (tier 3 set-up; ~5 s, cached).
func TestFetch(t *testing.T) {
	testenv.RequireCommand(t, "apt-get")
	testenv.RequireCommand(t, "depmod")
	testenv.RequireCommand(t, "xz")
	// Root fills the store the helper boots from; anyone else a cache of their own.
	dir := store.New("").Kernels()
	if os.Geteuid() != 0 {
		c, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(c, "brood", "kernels")
	}
	k, err := Fetch(t.Context(), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 4)
	f, err := os.Open(k.Vmlinux)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Read(head)
	if string(head) != "\x7fELF" {
		t.Errorf("%s starts with % x, want ELF", k.Vmlinux, head)
	}
	dep, err := os.ReadFile(k.ModulesDir + "/modules.dep")
	if err != nil || !bytes.Contains(dep, []byte("kernel/fs/9p/9p.ko:")) {
		t.Errorf("modules.dep lacks 9p (err %v)", err)
	}
}
