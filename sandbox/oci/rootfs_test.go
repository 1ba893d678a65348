package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox/image"
	"brood.dev/brood/sandbox/store"
)

// The `test` recipe's rootfs, pushed as a one-layer image to the loopback registry and
// pulled back, is the same tree except for what the unpacker neutralises (setuid/setgid
// bits cleared, device nodes and FIFOs skipped).
func TestPullTestRootfs(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "mmdebstrap")
	testenv.RequireCommand(t, "mkfs.erofs")
	fsck := testenv.RequireCommand(t, "fsck.erofs")
	img, err := image.Ensure(t.Context(), store.New("").Images(), "test", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	start := time.Now()
	if out, err := exec.Command(fsck, "--extract="+src, img).CombinedOutput(); err != nil {
		t.Fatalf("fsck.erofs --extract: %v: %s", err, out)
	}
	t.Logf("extract %s: %v", filepath.Base(img), time.Since(start))
	start = time.Now()
	b := tarDir(t, src)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		t.Fatal(err)
	}
	im, err := mutate.AppendLayers(testImage(t, runtime.GOARCH), l)
	if err != nil {
		t.Fatal(err)
	}
	rg := newRegistry(t)
	d := push(t, rg.host+"/test:rootfs", im)
	t.Logf("tar (%d bytes) and push: %v", len(b), time.Since(start))
	start = time.Now()
	tree := filepath.Join(dir, "tree")
	p, err := Pull(t.Context(), rg.host+"/test@"+d.String(), tree, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pull and unpack %d entries, %d bytes: %v; %d notes", p.Report.Entries, p.Report.Bytes, time.Since(start), len(p.Report.Notes)+p.Report.Dropped)
	want, got := describe(t, src), describe(t, tree)
	if n := bytes.Count([]byte(want), []byte("\n")); n < 1000 {
		t.Fatalf("the rootfs lists %d entries; want a real rootfs", n)
	}
	if want != got {
		t.Errorf("pulled tree differs from the rootfs:\n%s", diffLines(want, got))
	}
}

// tarDir is dir as one uncompressed tar stream (owners, modes, times, hardlinks kept).
func tarDir(t *testing.T, dir string) []byte {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	links := map[[2]uint64]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		target := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, target)
		if err != nil {
			return err
		}
		h.Name, h.Uname, h.Gname = rel, "", ""
		st := fi.Sys().(*syscall.Stat_t)
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := links[key]; ok && fi.Mode().IsRegular() {
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
		} else if fi.Mode().IsRegular() && st.Nlink > 1 {
			links[key] = rel
		}
		if err := w.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(w, f)
			return err
		}
		return nil
	})
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// describe lists a tree's entries with type, permissions (setuid/setgid masked), owner,
// size and symlink target; device nodes, FIFOs and sockets are left out.
func describe(t *testing.T, root string) string {
	var out bytes.Buffer
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			out.WriteString("error " + err.Error() + "\n")
			return nil
		}
		m := fi.Mode()
		if m&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		st := fi.Sys().(*syscall.Stat_t)
		target, _ := os.Readlink(p)
		size := fi.Size()
		if fi.IsDir() {
			size = 0
		}
		perm := m &^ (fs.ModeSetuid | fs.ModeSetgid)
		if rel == "." {
			perm = 0
		}
		fmt.Fprintf(&out, "%s %v %d:%d %d %s\n", rel, perm, st.Uid, st.Gid, size, target)
		return nil
	})
	return out.String()
}

// diffLines lists the lines that are in one text and not the other (at most 40).
func diffLines(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range bytes.Split([]byte(s), []byte("\n")) {
			m[string(l)] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out bytes.Buffer
	n := 0
	for l := range ma {
		if !mb[l] && n < 40 {
			out.WriteString("- " + l + "\n")
			n++
		}
	}
	for l := range mb {
		if !ma[l] && n < 40 {
			out.WriteString("+ " + l + "\n")
			n++
		}
	}
	return out.String()
}
