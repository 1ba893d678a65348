package oci

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ent is one tar entry of a test layer.
type ent struct {
	name string
	typ  byte
	body string // content of a regular file
	link string // symlink or hardlink target
	mode int64
	uid  int
	size int64 // declared size when body is not written (0: len(body))
}

func reg(name, body string) ent { return ent{name: name, typ: tar.TypeReg, body: body, mode: 0o644} }
func dir(name string) ent       { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func sym(name, to string) ent   { return ent{name: name, typ: tar.TypeSymlink, link: to, mode: 0o777} }
func hard(name, to string) ent  { return ent{name: name, typ: tar.TypeLink, link: to, mode: 0o644} }

var epoch = time.Unix(1700000000, 0)

// layerTar returns the tar stream of es. An entry whose size is set but body is empty
// gets only its header (the stream ends there), for caps decided from headers.
func layerTar(t testing.TB, es ...ent) []byte {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, Uid: e.uid, Gid: e.uid,
			ModTime: epoch, Size: int64(len(e.body)), Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if e.size > 0 {
			h.Size = e.size
			if err := w.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			w.Flush()
			return b.Bytes()
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// paxRecord is one PAX extended header record ("len key=value\n").
func paxRecord(k, v string) string {
	s := " " + k + "=" + v + "\n"
	n := len(s) + 1
	for len(fmt.Sprint(n))+len(s) != n {
		n++
	}
	return fmt.Sprint(n) + s
}

// sparseTar returns a PAX 1.0 sparse entry named name of realsize bytes whose only data
// is its last byte, written by hand (archive/tar writes no sparse files).
func sparseTar(t testing.TB, name string, realsize int64) []byte {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	recs := paxRecord("GNU.sparse.major", "1") + paxRecord("GNU.sparse.minor", "0") +
		paxRecord("GNU.sparse.name", name) + paxRecord("GNU.sparse.realsize", fmt.Sprint(realsize))
	w.WriteHeader(&tar.Header{Name: "pax", Typeflag: tar.TypeReg, Size: int64(len(recs)), Format: tar.FormatUSTAR})
	w.Write([]byte(recs))
	w.Flush()
	hb := b.Bytes()[:512] // turn it into the 'x' header archive/tar refuses to write
	hb[156] = tar.TypeXHeader
	copy(hb[148:156], "        ")
	sum := 0
	for _, c := range hb {
		sum += int(c)
	}
	copy(hb[148:], fmt.Sprintf("%06o\x00 ", sum))
	data := make([]byte, 1024)
	copy(data, fmt.Sprintf("1\n%d\n1\n", realsize-1))
	data[512] = 'x'
	w.WriteHeader(&tar.Header{Name: "GNUSparseFile.0/" + name, Typeflag: tar.TypeReg, Size: 513, Mode: 0o644, Format: tar.FormatUSTAR})
	w.Write(data[:513])
	w.Close()
	return b.Bytes()
}

// site is a parent directory holding the tree being unpacked and, next to it, a
// sentinel directory the layers try to reach.
type site struct {
	parent, tree, sentinel string
	before                 string
}

func newSite(t testing.TB) *site {
	t.Helper()
	s := &site{parent: t.TempDir()}
	s.tree = filepath.Join(s.parent, "tree")
	s.sentinel = filepath.Join(s.parent, "sentinel")
	os.Mkdir(s.sentinel, 0o755)
	os.WriteFile(filepath.Join(s.sentinel, "keep"), []byte("keep"), 0o644)
	os.Mkdir(filepath.Join(s.sentinel, "sub"), 0o755)
	s.before = s.outside(t)
	return s
}

// outside describes everything in parent except the tree: names, types, modes, owners,
// link counts, sizes, times and contents.
func (s *site) outside(t testing.TB) string {
	t.Helper()
	var lines []string
	filepath.WalkDir(s.parent, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			lines = append(lines, "error "+err.Error())
			return nil
		}
		if p == s.tree {
			return filepath.SkipDir
		}
		if p == s.parent { // its own times and link count change with the tree's creation
			names, _ := os.ReadDir(p)
			l := "parent holds"
			for _, n := range names {
				if n.Name() != "tree" {
					l += " " + n.Name()
				}
			}
			lines = append(lines, l)
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			lines = append(lines, "error "+err.Error())
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		l := fmt.Sprintf("%s %v %d:%d n%d %d %d", p, fi.Mode(), st.Uid, st.Gid, st.Nlink, fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			h := sha256.Sum256(b)
			l += " " + hex.EncodeToString(h[:8])
		}
		lines = append(lines, l)
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// untouched fails t when anything outside the tree changed.
func (s *site) untouched(t testing.TB) {
	t.Helper()
	if after := s.outside(t); after != s.before {
		t.Errorf("outside the tree changed:\nbefore:\n%s\nafter:\n%s", s.before, after)
	}
}

// apply unpacks layers (tar streams) in order into a new tree of s and finishes it; it
// returns the first error.
func (s *site) apply(t testing.TB, o TreeOptions, layers ...[]byte) (Report, error) {
	t.Helper()
	tr, err := NewTree(s.tree, o)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for i, l := range layers {
		if err := tr.Apply(fmt.Sprintf("layer%d", i), bytes.NewReader(l)); err != nil {
			return Report{}, err
		}
	}
	return tr.Finish()
}
