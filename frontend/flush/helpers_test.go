package flush

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/digest"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/session"
)

// fixture is a workspace W, a session with snapshot S copied from W, and the manifest of
// W at snapshot time.
type fixture struct {
	t    *testing.T
	W, S string
	sess *session.Session
	m    *manifest.Manifest
}

// sum is the content digest of b (package digest), the value Change hashes hold.
func sum(b []byte) []byte { return digest.Bytes(b) }

func put(t testing.TB, root, rel, content string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func read(t testing.TB, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func modeOf(t testing.TB, root, rel string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

func absent(t testing.TB, root, rel string) bool {
	t.Helper()
	_, err := os.Lstat(filepath.Join(root, rel))
	return os.IsNotExist(err)
}

func statOf(fi fs.FileInfo) manifest.Stat {
	st := fi.Sys().(*syscall.Stat_t)
	return manifest.Stat{Type: manifest.TypeFromMode(st.Mode), Mode: st.Mode & 0o7777, Size: st.Size,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(), Ino: st.Ino, Dev: st.Dev, Nlink: st.Nlink}
}

// newFixture makes W from files (path -> content; a trailing "@" + target makes a
// symlink), snapshots it into a new session and records the manifest.
func newFixture(t *testing.T, files map[string]string) *fixture {
	t.Helper()
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	w := filepath.Join(t.TempDir(), "w")
	if err := os.Mkdir(w, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, c := range files {
		if strings.HasPrefix(c, "@") {
			os.MkdirAll(filepath.Dir(filepath.Join(w, p)), 0o755)
			if err := os.Symlink(c[1:], filepath.Join(w, p)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		put(t, w, p, c, 0o644)
	}
	return snapshotOf(t, w)
}

func snapshotOf(t testing.TB, w string) *fixture {
	t.Helper()
	sess, err := session.Create(w)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{W: w, S: sess.SnapshotDir(), sess: sess, m: &manifest.Manifest{Version: manifest.FormatVersion, Workspace: w}}
	if err := os.Mkdir(f.S, 0o755); err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(w, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == w {
			return err
		}
		rel, _ := filepath.Rel(w, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := manifest.Entry{Path: rel, W: statOf(fi)}
		dst := filepath.Join(f.S, rel)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			err = os.Symlink(target, dst)
		case fi.IsDir():
			err = os.Mkdir(dst, fi.Mode().Perm())
		default:
			b, _ := os.ReadFile(p)
			e.Hash = sum(b)
			err = os.WriteFile(dst, b, fi.Mode().Perm())
		}
		if err != nil {
			return err
		}
		sfi, _ := os.Lstat(dst)
		e.S = statOf(sfi)
		f.m.Entries = append(f.m.Entries, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(f.m.Entries, func(i, j int) bool { return f.m.Entries[i].Path < f.m.Entries[j].Path })
	return f
}

// change builds the Change the diff would report for rel (kind k), from W's manifest
// entry and S's current content.
func (f *fixture) change(k diff.Kind, rel string) diff.Change {
	c := diff.Change{Path: rel, Kind: k}
	if e := f.m.Lookup(rel); e != nil {
		c.OldMode, c.OldHash, c.OldSize = e.W.Mode, e.Hash, e.W.Size
	}
	if fi, err := os.Lstat(filepath.Join(f.S, rel)); err == nil {
		c.NewMode = uint32(fi.Mode().Perm())
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(filepath.Join(f.S, rel))
			c.NewHash, c.NewSize = sum(b), int64(len(b))
			c.NewMode = uint32(fi.Sys().(*syscall.Stat_t).Mode & 0o7777)
		}
	}
	return c
}

func items(cs ...diff.Change) []Item {
	out := make([]Item, len(cs))
	for i, c := range cs {
		out[i] = Item{Change: c}
	}
	return out
}

// treeState is every entry below root: path -> type/mode/content or link target.
func treeState(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, _ := os.Lstat(p)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link:" + target
		case fi.IsDir():
			out[rel] = "dir:" + fi.Mode().String()
		default:
			b, _ := os.ReadFile(p)
			out[rel] = fi.Mode().String() + ":" + string(b)
		}
		return nil
	})
	return out
}

func sameTree(t testing.TB, want, got map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q: want %q, got %q", k, v, got[k])
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%q: unexpected entry %q", k, v)
		}
	}
}

func syscallChmod(t testing.TB, p string, mode uint32) {
	t.Helper()
	if err := syscall.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

type syscallStat = syscall.Stat_t

func lstat(t testing.TB, p string, st *syscall.Stat_t) {
	t.Helper()
	if err := syscall.Lstat(p, st); err != nil {
		t.Fatal(err)
	}
}
