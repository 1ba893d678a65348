package oci

import (
	"archive/tar"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// refused asserts err is an *EntryError for entry wrapping want, and that nothing outside
// the tree changed.
func refused(t *testing.T, s *site, err error, entry string, want error) {
	t.Helper()
	var ee *EntryError
	if !errors.As(err, &ee) || ee.Entry != entry || !errors.Is(err, want) {
		t.Fatalf("err = %v, want an EntryError for %q wrapping %v", err, entry, want)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("%q", entry)) || !strings.Contains(err.Error(), "layer") {
		t.Errorf("error %q does not name the layer and entry %q", err, entry)
	}
	s.untouched(t)
}

func TestHostileDotDot(t *testing.T) {
	for _, name := range []string{"../sentinel/evil", "a/../../sentinel/evil", "./..", "a/b/../../.."} {
		s := newSite(t)
		_, err := s.apply(t, TreeOptions{}, layerTar(t, reg(name, "evil")))
		refused(t, s, err, name, ErrUnsafePath)
	}
}

func TestHostileAbsolute(t *testing.T) {
	s := newSite(t)
	name := filepath.Join(s.sentinel, "evil")
	_, err := s.apply(t, TreeOptions{}, layerTar(t, reg(name, "evil")))
	refused(t, s, err, name, ErrUnsafePath)
}

// A symlink a layer made is never written through: not in the same layer, not in a
// later one, not by a directory, file, hardlink or whiteout below it.
func TestHostileSymlinkWriteThrough(t *testing.T) {
	cases := []struct {
		name   string
		layers func(s *site) [][]byte
		entry  string
	}{
		{"same layer file", func(s *site) [][]byte {
			return [][]byte{layerTar(t, sym("esc", s.sentinel), reg("esc/evil", "x"))}
		}, "esc/evil"},
		{"later layer file", func(s *site) [][]byte {
			return [][]byte{layerTar(t, sym("esc", "../sentinel")), layerTar(t, reg("esc/evil", "x"))}
		}, "esc/evil"},
		{"later layer dir", func(s *site) [][]byte {
			return [][]byte{layerTar(t, sym("esc", s.sentinel)), layerTar(t, dir("esc/sub/new/"))}
		}, "esc/sub/new/"},
		{"deep file under nested link", func(s *site) [][]byte {
			return [][]byte{layerTar(t, dir("a/"), sym("a/b", "/"), reg("a/b/"+s.sentinel[1:]+"/evil", "x"))}
		}, "a/b/" + "SENT/evil"},
		{"hardlink under link", func(s *site) [][]byte {
			return [][]byte{layerTar(t, reg("f", "x"), sym("esc", s.sentinel), hard("esc/evil", "f"))}
		}, "esc/evil"},
		{"whiteout under link", func(s *site) [][]byte {
			return [][]byte{layerTar(t, sym("esc", s.sentinel)), layerTar(t, reg("esc/.wh.keep", ""))}
		}, "esc/.wh.keep"},
		{"opaque under link", func(s *site) [][]byte {
			return [][]byte{layerTar(t, sym("esc", s.sentinel)), layerTar(t, reg("esc/.wh..wh..opq", ""))}
		}, "esc/.wh..wh..opq"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSite(t)
			entry := strings.Replace(c.entry, "SENT", s.sentinel[1:], 1)
			_, err := s.apply(t, TreeOptions{}, c.layers(s)...)
			refused(t, s, err, entry, ErrSymlinkPath)
		})
	}
}

// A later entry at a symlink's own path replaces the link; it never writes its target.
func TestSymlinkReplacedNotFollowed(t *testing.T) {
	s := newSite(t)
	keep := filepath.Join(s.sentinel, "keep")
	_, err := s.apply(t, TreeOptions{},
		layerTar(t, sym("f", keep), sym("d", s.sentinel), hard("h", "f")),
		layerTar(t, reg("f", "new"), dir("d/"), reg("h", "other")))
	if err != nil {
		t.Fatal(err)
	}
	s.untouched(t)
	if b, err := os.ReadFile(filepath.Join(s.tree, "f")); err != nil || string(b) != "new" {
		t.Errorf("f = %q, %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(s.tree, "d")); err != nil || !fi.IsDir() {
		t.Errorf("d is %v, %v; want a directory", fi, err)
	}
}

func TestHostileWhiteoutDotDot(t *testing.T) {
	for _, name := range []string{".wh...", "a/.wh...", ".wh..", "a/.wh..", ".wh.", "a/.wh."} {
		s := newSite(t)
		_, err := s.apply(t, TreeOptions{}, layerTar(t, dir("a/")), layerTar(t, reg(name, "")))
		refused(t, s, err, name, ErrUnsafePath)
	}
	s := newSite(t)
	_, err := s.apply(t, TreeOptions{}, layerTar(t, reg("../sentinel/.wh.keep", "")))
	refused(t, s, err, "../sentinel/.wh.keep", ErrUnsafePath)
}

func TestHostileHardlink(t *testing.T) {
	cases := []struct {
		name, target string
		want         error
	}{
		{"out", "../sentinel/keep", ErrUnsafePath},
		{"abs", "/SENT/keep", ErrUnsafePath},
		{"missing", "nosuch", ErrHardlink},
		{"later", "later", ErrHardlink}, // the target comes after the link in the layer
		{"dir", "d", ErrHardlink},
		{"root", "./", ErrHardlink},
		{"self", "self", ErrHardlink},
		{"through", "esc/keep", ErrSymlinkPath},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSite(t)
			target := strings.Replace(c.target, "/SENT", s.sentinel, 1)
			_, err := s.apply(t, TreeOptions{}, layerTar(t,
				dir("d/"), sym("esc", s.sentinel), hard(c.name, target), reg("later", "x")))
			refused(t, s, err, c.name, c.want)
		})
	}
}

// Hardlinks join files of the tree; a later layer's file at one name is a new file,
// never a write into the shared inode.
func TestHardlinkInTree(t *testing.T) {
	s := newSite(t)
	_, err := s.apply(t, TreeOptions{},
		layerTar(t, dir("bin/"), reg("bin/a", "one"), hard("bin/b", "./bin/a")),
		layerTar(t, reg("bin/a", "two")))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(s.tree, "bin/a"))
	b, _ := os.ReadFile(filepath.Join(s.tree, "bin/b"))
	if string(a) != "two" || string(b) != "one" {
		t.Errorf("bin/a = %q, bin/b = %q; want two, one", a, b)
	}
	s.untouched(t)
}

func TestDevicesSkipped(t *testing.T) {
	s := newSite(t)
	layer := layerTar(t, dir("dev/"),
		ent{name: "dev/null", typ: tar.TypeChar, mode: 0o666},
		ent{name: "dev/sda", typ: tar.TypeBlock, mode: 0o660},
		ent{name: "fifo", typ: tar.TypeFifo, mode: 0o644})
	rep, err := s.apply(t, TreeOptions{}, layer)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"dev/null", "dev/sda", "fifo"} {
		if _, err := os.Lstat(filepath.Join(s.tree, n)); !os.IsNotExist(err) {
			t.Errorf("%s exists (%v); devices and FIFOs are skipped", n, err)
		}
		if !hasNote(rep, n, "skipped") {
			t.Errorf("report %+v lacks a skip note for %s", rep.Notes, n)
		}
	}
	s.untouched(t)
}

func hasNote(r Report, path, what string) bool {
	for _, n := range r.Notes {
		if n.Path == path && strings.Contains(n.What, what) {
			return true
		}
	}
	return false
}

func TestSetuidCleared(t *testing.T) {
	s := newSite(t)
	f := reg("bin/su", "#!")
	f.mode = 0o4755
	g := reg("bin/wall", "#!")
	g.mode = 0o2755
	d := dir("tmp/")
	d.mode = 0o3777 // setgid cleared, sticky kept
	rep, err := s.apply(t, TreeOptions{}, layerTar(t, f, g, d))
	if err != nil {
		t.Fatal(err)
	}
	for n, want := range map[string]os.FileMode{"bin/su": 0o755, "bin/wall": 0o755, "tmp": os.ModeSticky | 0o777} {
		fi, err := os.Lstat(filepath.Join(s.tree, n))
		if err != nil || fi.Mode()&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != want {
			t.Errorf("%s mode %v, %v; want %v", n, fi.Mode(), err, want)
		}
		if !hasNote(rep, n, "setuid/setgid cleared") {
			t.Errorf("report %+v lacks a note for %s", rep.Notes, n)
		}
	}
}

func TestEntryCap(t *testing.T) {
	var es []ent
	for i := range 11 {
		es = append(es, reg(fmt.Sprintf("f%d", i), ""))
	}
	s := newSite(t)
	_, err := s.apply(t, TreeOptions{Limits: Limits{MaxEntries: 10}}, layerTar(t, es...))
	refused(t, s, err, "f10", ErrLimit)
	if _, err := os.Lstat(filepath.Join(s.tree, "f10")); !os.IsNotExist(err) {
		t.Errorf("f10 written past the cap: %v", err)
	}
	if (Limits{}).withDefaults().MaxEntries != 1_000_000 {
		t.Errorf("default entry cap is not one million")
	}
}

// A 1 TiB sparse entry is refused from its header, before a byte is written; an
// allowed sparse entry is written as a hole.
func TestHugeSparseEntry(t *testing.T) {
	s := newSite(t)
	_, err := s.apply(t, TreeOptions{}, sparseTar(t, "big", 1<<40))
	refused(t, s, err, "big", ErrLimit)
	if _, err := os.Lstat(filepath.Join(s.tree, "big")); !os.IsNotExist(err) {
		t.Errorf("big exists: %v", err)
	}

	s = newSite(t)
	if _, err := s.apply(t, TreeOptions{}, sparseTar(t, "hole", 256<<20)); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(s.tree, "hole"))
	if err != nil || fi.Size() != 256<<20 || fi.Sys().(*syscall.Stat_t).Blocks*512 > 1<<20 {
		t.Errorf("hole: %v, %v; want 256 MiB with at most 1 MiB allocated", fi, err)
	}
}

func TestSizeCaps(t *testing.T) {
	s := newSite(t)
	big := reg("big", "")
	big.size = 2 << 20 // header only: refused from the header
	_, err := s.apply(t, TreeOptions{Limits: Limits{MaxFileSize: 1 << 20}}, layerTar(t, big))
	refused(t, s, err, "big", ErrLimit)

	s = newSite(t)
	_, err = s.apply(t, TreeOptions{Limits: Limits{MaxTotalSize: 1000}},
		layerTar(t, reg("a", strings.Repeat("a", 600))), layerTar(t, reg("b", strings.Repeat("b", 600))))
	refused(t, s, err, "b", ErrLimit)
}

func TestPathCaps(t *testing.T) {
	long := strings.Repeat("d/", 2047) + "ff" // 4096 bytes
	comp := strings.Repeat("n", 256)
	for _, name := range []string{long, comp, "a/" + comp + "/b"} {
		s := newSite(t)
		_, err := s.apply(t, TreeOptions{}, layerTar(t, reg(name, "x")))
		refused(t, s, err, name, ErrUnsafePath)
	}
	s := newSite(t)
	_, err := s.apply(t, TreeOptions{}, layerTar(t, sym("l", strings.Repeat("x", 4096))))
	refused(t, s, err, "l", ErrUnsafePath)
	s = newSite(t)
	ok := strings.Repeat("d/", 2046) + "fff" // 4095 bytes: the longest allowed
	if _, err := s.apply(t, TreeOptions{}, layerTar(t, reg(ok, "x"))); err != nil {
		t.Errorf("4095-byte name refused: %v", err)
	}
}

func TestDuplicateEntries(t *testing.T) {
	for _, es := range [][]ent{
		{reg("f", "1"), reg("f", "2")},
		{reg("f", "1"), sym("./f", "x")},
		{dir("d/"), reg("d", "x")},
		{reg("a/b", "1"), reg("a", "x")}, // a is implied by a/b
	} {
		s := newSite(t)
		last := es[len(es)-1].name
		_, err := s.apply(t, TreeOptions{}, layerTar(t, es...))
		refused(t, s, err, last, ErrDuplicate)
	}
	s := newSite(t)
	if _, err := s.apply(t, TreeOptions{}, layerTar(t, dir("d/"), reg("d/x", "1"), dir("./d"))); err != nil {
		t.Errorf("directory twice: %v", err)
	}
}

func TestNotDirParent(t *testing.T) {
	s := newSite(t)
	_, err := s.apply(t, TreeOptions{}, layerTar(t, reg("f", "1")), layerTar(t, reg("f/x", "2")))
	refused(t, s, err, "f/x", ErrNotDir)
}

// Whiteouts remove lower layers' entries; an opaque directory hides everything lower
// layers put there, and keeps what its own layer wrote, before or after the marker.
func TestWhiteouts(t *testing.T) {
	s := newSite(t)
	_, err := s.apply(t, TreeOptions{},
		layerTar(t, dir("a/"), reg("a/x", "1"), dir("a/sub/"), reg("a/sub/y", "2"), reg("b", "3"), dir("c/"), reg("c/z", "4")),
		layerTar(t, reg("a/sub/new", "5"), reg(".wh.b", ""), reg("a/.wh..wh..opq", ""), reg("a/w", "6"), reg("c/.wh.z", ""), reg(".wh.nosuch", "")))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	filepath.Walk(s.tree, func(p string, fi os.FileInfo, err error) error {
		if rel, _ := filepath.Rel(s.tree, p); rel != "." {
			got = append(got, rel)
		}
		return nil
	})
	if strings.Join(got, " ") != "a a/sub a/sub/new a/w c" {
		t.Errorf("tree = %q, want a a/sub a/sub/new a/w c", got)
	}
	s.untouched(t)
}

func TestOwnersKept(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("lchown to other uids needs root")
	}
	s := newSite(t)
	f := reg("f", "x")
	f.uid = 1234
	l := sym("l", "f")
	l.uid = 4321
	d := dir("d/")
	d.uid = 123456
	if _, err := s.apply(t, TreeOptions{KeepOwners: true}, layerTar(t, f, l, d)); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[string]uint32{"f": 1234, "l": 4321, "d": 123456} {
		fi, err := os.Lstat(filepath.Join(s.tree, n))
		if err != nil || fi.Sys().(*syscall.Stat_t).Uid != want || fi.Sys().(*syscall.Stat_t).Gid != want {
			t.Errorf("%s owner %v, %v; want %d", n, fi.Sys(), err, want)
		}
	}
	bad := reg("g", "x")
	bad.uid = 1<<32 - 1
	s = newSite(t)
	_, err := s.apply(t, TreeOptions{KeepOwners: true}, layerTar(t, bad))
	refused(t, s, err, "g", ErrUnsupported)
}

// BenchmarkTreeApply unpacks a layer of 2,000 directories' worth of small files
// (10,000 files of 4 KiB, 40 MB) per iteration; reports entries/s.
func BenchmarkTreeApply(b *testing.B) {
	var es []ent
	body := strings.Repeat("x", 4096)
	for i := range 10000 {
		if i%5 == 0 {
			es = append(es, dir(fmt.Sprintf("d%d/", i/5)))
		}
		es = append(es, reg(fmt.Sprintf("d%d/f%d", i/5, i), body))
	}
	layer := layerTar(b, es...)
	b.SetBytes(int64(len(layer)))
	for b.Loop() {
		s := newSite(b)
		if _, err := s.apply(b, TreeOptions{KeepOwners: os.Geteuid() == 0}, layer); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(s.tree)
		b.StartTimer()
	}
	b.ReportMetric(float64(len(es))*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}
