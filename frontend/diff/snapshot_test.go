package diff

import (
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/manifest"
)

// testSnapshot copies w to s the way the snapshot does for the diff's purposes and
// returns the manifest: regular files copied (content and mode), directories created,
// symlinks recreated (never followed), special files skipped and recorded, names matching
// a secret (".env") excluded and recorded. Every regular file in W gets a hash when hash
// is true.
func testSnapshot(t testing.TB, w, s string, hash bool) *manifest.Manifest {
	t.Helper()
	m := &manifest.Manifest{Workspace: w}
	err := filepath.WalkDir(w, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(w, p)
		if rel == "." {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		e := manifest.Entry{Path: filepath.ToSlash(rel), W: statFrom(&st)}
		dst := filepath.Join(s, rel)
		switch {
		case filepath.Base(rel) == ".env":
			e.Excluded = ".env"
		case e.W.Type == manifest.TypeDir:
			if err := os.Mkdir(dst, os.FileMode(e.W.Mode)); err != nil {
				return err
			}
		case e.W.Type == manifest.TypeSymlink:
			tgt, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(tgt, dst); err != nil {
				return err
			}
		case e.W.Type == manifest.TypeRegular:
			if err := copyFile(p, dst, e.W.Mode); err != nil {
				return err
			}
			if hash {
				h, err := HashFile(p)
				if err != nil {
					return err
				}
				e.Hash = h
			}
		default:
			e.Skipped = "special file"
		}
		if e.Excluded == "" && e.Skipped == "" {
			if err := unix.Lstat(dst, &st); err != nil {
				return err
			}
			e.S = statFrom(&st)
		}
		m.Entries = append(m.Entries, e)
		return nil
	})
	if err != nil {
		t.Fatalf("test snapshot %s -> %s: %v", w, s, err)
	}
	// WalkDir visits in lexical order per directory, which is not path-byte order
	// ("a.b" < "a/b"); sort as manifest.Write does.
	m.Entries = sortedEntries(m.Entries)
	return m
}

func copyFile(src, dst string, mode uint32) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(mode&0o777))
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(os.FileMode(mode & 0o777)); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// writeFiles creates files below root from a map of relative path -> content; a path
// ending in "/" is a directory.
func writeFiles(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func sha(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}
