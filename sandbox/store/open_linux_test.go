package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"brood.dev/brood/internal/testenv"
)

// tree makes a store with images a (two builds), b and a work file, root-owned.
func tree(t *testing.T) Layout {
	t.Helper()
	testenv.RequireRoot(t)
	l := New(filepath.Join(t.TempDir(), "state"))
	if err := os.MkdirAll(l.Images(), 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for name, age := range map[string]time.Time{
		"a-00000000000000000000000000000000.erofs": old,
		"a-11111111111111111111111111111111.erofs": time.Now(),
		"b-22222222222222222222222222222222.erofs": old,
		".build-a-123": time.Now(),
	} {
		p := filepath.Join(l.Images(), name)
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, age, age)
	}
	return l
}

// TestListAndOpenImages: the list is the newest file per name, what OpenImage opens; a
// name whose newest file is unsafe is not listed and refused when opened.
func TestListAndOpenImages(t *testing.T) {
	l := tree(t)
	imgs, err := l.ListImages()
	if err != nil || len(imgs) != 2 || imgs[0].Name != "a" || imgs[0].Digest != "11111111111111111111111111111111" || imgs[1].Name != "b" {
		t.Fatalf("ListImages = %+v, %v", imgs, err)
	}
	f, err := l.OpenImage("a")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	n, _ := f.Read(b)
	f.Close()
	if string(b[:n]) != imgs[0].File {
		t.Errorf("OpenImage(a) read %q, want %q", b[:n], imgs[0].File)
	}
	if _, err := l.OpenImage("c"); !errors.Is(err, ErrMissing) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenImage(c) = %v, want ErrMissing", err)
	}
	if _, err := l.OpenImage("../a"); !errors.Is(err, ErrUnsafe) {
		t.Errorf("OpenImage(../a) = %v, want ErrUnsafe", err)
	}
	bPath := filepath.Join(l.Images(), "b-22222222222222222222222222222222.erofs")
	os.Chown(bPath, 4242, 4242)
	if imgs, _ := l.ListImages(); len(imgs) != 1 || imgs[0].Name != "a" {
		t.Errorf("ListImages with a user-owned b = %+v", imgs)
	}
	if _, err := l.OpenImage("b"); !errors.Is(err, ErrUnsafe) {
		t.Errorf("OpenImage(user-owned b) = %v, want ErrUnsafe", err)
	}
	os.Chmod(l.Images(), 0o775)
	if _, err := l.ListImages(); !errors.Is(err, ErrUnsafe) {
		t.Errorf("ListImages of a group-writable dir = %v, want ErrUnsafe", err)
	}
	os.Chmod(l.Images(), 0o755)
	// A symlinked root is refused; a missing images directory lists nothing.
	link := filepath.Join(filepath.Dir(l.Root), "link")
	os.Symlink(l.Root, link)
	if _, err := New(link).ListImages(); !errors.Is(err, ErrUnsafe) {
		t.Errorf("ListImages through a symlinked root = %v, want ErrUnsafe", err)
	}
	empty := New(filepath.Join(filepath.Dir(l.Root), "empty"))
	os.Mkdir(empty.Root, 0o755)
	if imgs, err := empty.ListImages(); err != nil || len(imgs) != 0 {
		t.Errorf("ListImages of an empty store = %+v, %v", imgs, err)
	}
}
