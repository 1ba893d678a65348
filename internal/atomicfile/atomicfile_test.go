package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := WriteBytes(p, []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := WriteBytes(p, []byte("new")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if err != nil || string(b) != "new" || fi.Mode().Perm() != 0o600 {
		t.Fatalf("content %q mode %v err %v", b, fi.Mode(), err)
	}
	// A failing fill leaves the old file and no temp file behind.
	boom := errors.New("boom")
	err = Write(p, func(w io.Writer) error { w.Write([]byte("partial")); return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Write with failing fill: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Errorf("failed write changed the file to %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temp files left: %v", ents)
	}
	if err := WriteBytes(filepath.Join(dir, "missing", "f"), nil); err == nil {
		t.Error("write into a missing directory succeeded")
	}
}
