package manifest

import (
	"bytes"
	"encoding/gob"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Names are raw bytes: newline, ESC, invalid UTF-8 and a hash survive Write+Read exactly,
// entries come back sorted, and Lookup finds them.
func TestWriteReadRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "manifest")
	names := []string{"z.txt", "a\nb", "\x1b[2Jx", "bad\xff\xfe", "dir/sub/f"}
	m := &Manifest{Workspace: "/w", Created: 42}
	for i, n := range names {
		m.Entries = append(m.Entries, Entry{Path: n, W: Stat{Type: TypeRegular, Mode: 0o644, Size: int64(i)},
			Hash: bytes.Repeat([]byte{byte(i)}, 32)})
	}
	if err := Write(p, m); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("manifest file mode: %v %v", fi, err)
	}
	got, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != FormatVersion || got.Workspace != "/w" || len(got.Entries) != len(names) {
		t.Fatalf("read %+v", got)
	}
	for i := 1; i < len(got.Entries); i++ {
		if got.Entries[i-1].Path >= got.Entries[i].Path {
			t.Errorf("entries not sorted: %q before %q", got.Entries[i-1].Path, got.Entries[i].Path)
		}
	}
	for i, n := range names {
		e := got.Lookup(n)
		if e == nil || e.W.Size != int64(i) || !bytes.Equal(e.Hash, bytes.Repeat([]byte{byte(i)}, 32)) {
			t.Errorf("Lookup(%q) = %+v", n, e)
		}
	}
	if got.Lookup("a") != nil || got.Lookup("") != nil {
		t.Error("Lookup found an absent path")
	}
	if matches, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".manifest-*")); len(matches) != 0 {
		t.Errorf("temp files left: %v", matches)
	}
}

func TestReadRejectsOtherVersion(t *testing.T) {
	p := filepath.Join(t.TempDir(), "manifest")
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(&Manifest{Version: FormatVersion + 1}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, b.Bytes(), 0o600)
	if _, err := Read(p); !errors.Is(err, ErrVersion) {
		t.Errorf("Read of version %d: %v, want ErrVersion", FormatVersion+1, err)
	}
	os.WriteFile(p, []byte("garbage"), 0o600)
	if _, err := Read(p); err == nil {
		t.Error("Read of garbage succeeded")
	}
}

// TestReadRejectsVersion1: a manifest of the plain SHA-256 format fails by name and with
// the reason, never as a content mismatch later.
func TestReadRejectsVersion1(t *testing.T) {
	p := filepath.Join(t.TempDir(), "manifest")
	var b bytes.Buffer
	old := &Manifest{Version: 1, Entries: []Entry{{Path: "a", Hash: make([]byte, 32)}}}
	if err := gob.NewEncoder(&b).Encode(old); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Read(p)
	if !errors.Is(err, ErrVersion) {
		t.Fatalf("Read of version 1: %v, want ErrVersion", err)
	}
	for _, s := range []string{p, "format version 1", "older brood", "SHA-256"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}

func TestTypeFromModeAndFromStat(t *testing.T) {
	for _, c := range []struct {
		mode uint32
		want Type
	}{{unix.S_IFREG | 0o644, TypeRegular}, {unix.S_IFDIR, TypeDir}, {unix.S_IFLNK, TypeSymlink},
		{unix.S_IFIFO, TypeFIFO}, {unix.S_IFSOCK, TypeSocket}, {unix.S_IFCHR, TypeDevice}, {unix.S_IFBLK, TypeDevice}} {
		if got := TypeFromMode(c.mode); got != c.want {
			t.Errorf("TypeFromMode(%#o) = %d, want %d", c.mode, got, c.want)
		}
	}
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte("12345"), 0o644)
	if err := unix.Chmod(p, 0o4755); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	s := FromStat(&st)
	if s.Type != TypeRegular || s.Mode != 0o4755 || s.Size != 5 || s.Ino != st.Ino || s.Ctime == 0 || s.Nlink != 1 {
		t.Errorf("FromStat = %+v", s)
	}
}
