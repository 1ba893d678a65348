//go:build linux

// Package difftest builds small workspaces, snapshots and manifests for tests of the diff
// and its callers, without the real snapshot package: W is copied to S file by file and
// the manifest records both sides' lstat, the way the snapshot does.
//
// Privilege: none; tests only.
package difftest

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/digest"
	"brood.dev/brood/frontend/manifest"
)

// Snapshot copies the tree w into the existing directory s and returns its manifest:
// regular files copied (content and permission bits), directories created, symlinks
// recreated (never followed), FIFOs/sockets/devices skipped (Skipped set) and entries
// named ".env" excluded (Excluded = ".env"). With hash, regular files get their content digest
// (package digest).
// Entries come back sorted by path bytes, as manifest.Write stores them.
func Snapshot(w, s string, hash bool) (*manifest.Manifest, error) {
	m := &manifest.Manifest{Version: manifest.FormatVersion, Workspace: w}
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
		e := manifest.Entry{Path: filepath.ToSlash(rel), W: Stat(&st)}
		dst := filepath.Join(s, rel)
		switch {
		case filepath.Base(rel) == ".env":
			e.Excluded = ".env"
			if d.IsDir() {
				m.Entries = append(m.Entries, e)
				return filepath.SkipDir
			}
		case e.W.Type == manifest.TypeDir:
			if err := os.Mkdir(dst, os.FileMode(e.W.Mode&0o777)); err != nil {
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
			sum, err := copyFile(p, dst, e.W.Mode)
			if err != nil {
				return err
			}
			if hash {
				e.Hash = sum
			}
		default:
			e.Skipped = "special file"
		}
		if e.Excluded == "" && e.Skipped == "" {
			if err := unix.Lstat(dst, &st); err != nil {
				return err
			}
			e.S = Stat(&st)
		}
		m.Entries = append(m.Entries, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("test snapshot %s -> %s: %w", w, s, err)
	}
	// WalkDir visits in per-directory lexical order, not path-byte order ("a.b" < "a/b").
	slices.SortFunc(m.Entries, func(a, b manifest.Entry) int { return strings.Compare(a.Path, b.Path) })
	return m, nil
}

// Stat converts lstat(2) output to a manifest.Stat.
func Stat(st *unix.Stat_t) manifest.Stat {
	var t manifest.Type
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		t = manifest.TypeRegular
	case unix.S_IFDIR:
		t = manifest.TypeDir
	case unix.S_IFLNK:
		t = manifest.TypeSymlink
	case unix.S_IFIFO:
		t = manifest.TypeFIFO
	case unix.S_IFSOCK:
		t = manifest.TypeSocket
	default:
		t = manifest.TypeDevice
	}
	return manifest.Stat{
		Type: t, Mode: st.Mode & 0o7777, Size: st.Size,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(), Ino: st.Ino, Dev: uint64(st.Dev), Nlink: uint64(st.Nlink),
	}
}

func copyFile(src, dst string, mode uint32) ([]byte, error) {
	in, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(mode&0o777))
	if err != nil {
		return nil, err
	}
	h := digest.New()
	if _, err := io.Copy(io.MultiWriter(out, h), in); err != nil {
		out.Close()
		return nil, err
	}
	if err := out.Chmod(os.FileMode(mode & 0o777)); err != nil {
		out.Close()
		return nil, err
	}
	return h.Result().Sum, out.Close()
}

// WriteFiles creates files below root from a map of relative path -> content (mode
// 0644, parents created 0755); a path ending in "/" is a directory.
func WriteFiles(root string, files map[string]string) error {
	for p, c := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				return err
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Tree writes a synthetic source tree of files regular files below root (100 files per
// directory, directories two levels deep, 64–4,159 bytes each, deterministic content)
// and returns the relative paths of its files.
func Tree(root string, files int) ([]string, error) {
	var paths []string
	buf := make([]byte, 0, 4200)
	for i := 0; i < files; i++ {
		dir := fmt.Sprintf("pkg%03d/sub%02d", i/1000, (i/100)%10)
		if i%100 == 0 {
			if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
				return nil, err
			}
		}
		rel := fmt.Sprintf("%s/file%05d.go", dir, i)
		buf = buf[:0]
		buf = fmt.Appendf(buf, "package p%d\n\n// file %d\n", i/100, i)
		for len(buf) < 64+(i*7919)%4096 {
			buf = append(buf, "var x = 1 // filler line for a realistic size\n"...)
		}
		if err := os.WriteFile(filepath.Join(root, rel), buf, 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, rel)
	}
	return paths, nil
}

// Mutate applies n agent-like changes to the snapshot s of a Tree: modifications,
// additions, a deletion and a chmod, spread over the tree.
func Mutate(s string, paths []string, n int) error {
	for i := 0; i < n; i++ {
		p := filepath.Join(s, paths[(i*7717)%len(paths)])
		var err error
		switch i % 4 {
		case 0, 1:
			var f *os.File
			if f, err = os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0); err == nil {
				_, err = f.WriteString("// edited by the agent\n")
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		case 2:
			err = os.WriteFile(p+".new.go", []byte("package added\n"), 0o644)
		case 3:
			if i == 3 {
				err = os.Remove(p)
			} else {
				err = os.Chmod(p, 0o755)
			}
		}
		if err != nil {
			return fmt.Errorf("mutate %s: %w", p, err)
		}
	}
	return nil
}
