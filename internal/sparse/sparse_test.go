package sparse

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestCopyKeepsHoles: a 64 MiB file with two 4 KiB data runs is copied with the same
// bytes and about the same allocation (far below its size), through both the
// copy_file_range path and the pread/pwrite fallback that a buffer-sized copy takes.
func TestCopyKeepsHoles(t *testing.T) {
	dir := t.TempDir()
	src, err := os.Create(filepath.Join(dir, "src"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	const size = 64 << 20
	data := bytes.Repeat([]byte("brood"), 820)[:4096]
	for _, off := range []int64{4096, 40 << 20} {
		if _, err := src.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.Truncate(size); err != nil {
		t.Fatal(err)
	}
	var offs []int64
	if err := Extents(int(src.Fd()), size, func(off, n int64) error { offs = append(offs, off); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(offs) != 2 {
		t.Fatalf("extents at %v, want 2 data runs", offs)
	}
	dst, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := Copy(int(src.Fd()), int(dst.Fd()), size, make([]byte, 8192)); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(src.Name())
	b, _ := os.ReadFile(dst.Name())
	if !bytes.Equal(a, b) {
		t.Fatal("copy differs from source")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dst.Name(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > 1<<20 {
		t.Fatalf("copy allocates %d bytes of a %d-byte sparse file: holes were filled", st.Blocks*512, size)
	}
}

// TestCopyShrank: asking for more bytes than the source holds is ErrShrank.
func TestCopyShrank(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "src"), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, _ := os.Open(filepath.Join(dir, "src"))
	defer src.Close()
	dst, _ := os.Create(filepath.Join(dir, "dst"))
	defer dst.Close()
	if err := Copy(int(src.Fd()), int(dst.Fd()), 4096, make([]byte, 512)); !errors.Is(err, ErrShrank) {
		t.Fatalf("Copy of a shrunk source: %v, want ErrShrank", err)
	}
}
