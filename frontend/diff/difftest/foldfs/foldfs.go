//go:build linux

// Package foldfs mounts a case-insensitive, case-preserving, normalization-insensitive
// view of a directory with FUSE, the way APFS (macOS's default volume format) compares
// names, for tests on kernels without ext4 casefold or vfat.
//
// Every path a FUSE request names is resolved component by component against the
// backing directory: a component that does not exist there spelled exactly resolves to
// the existing entry whose folded name (Unicode full case folding, then NFC) is equal.
// So creating "README" where "readme" exists opens "readme", and "ReadMe" and
// "re\u0301adme"-style spellings find it. New names are stored as spelled. The backing
// directory must not already hold two names that fold to one.
//
// It is built on go-fuse's path API (github.com/hanwen/go-fuse/v2/fuse/pathfs) over its
// loopback file system, and mounts with mount(2) directly (DirectMountStrict), so it needs
// root and /dev/fuse but no fusermount.
//
// Privilege: tests only; mounting needs root (or /dev/fuse access), so its tests are
// gated by testenv.
package foldfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hanwen/go-fuse/v2/fuse/nodefs"
	"github.com/hanwen/go-fuse/v2/fuse/pathfs"
	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Mount mounts a folding view of backing on mountpoint (both existing directories) and
// returns a function that unmounts it. Errors name the mount point.
func Mount(backing, mountpoint string) (unmount func() error, err error) {
	backing, err = filepath.Abs(backing)
	if err != nil {
		return nil, fmt.Errorf("foldfs mount %q: %w", mountpoint, err)
	}
	fs := &foldFS{FileSystem: pathfs.NewLoopbackFileSystem(backing), root: backing}
	pfs := pathfs.NewPathNodeFs(fs, nil)
	srv, _, err := nodefs.Mount(mountpoint, pfs.Root(), &fuse.MountOptions{
		DirectMountStrict: true,
		FsName:            "foldfs",
		Name:              "foldfs",
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("foldfs mount %q: %w", mountpoint, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		return nil, fmt.Errorf("foldfs mount %q: %w", mountpoint, err)
	}
	return srv.Unmount, nil
}

// Fold returns the key two names share when the mount treats them as one.
func Fold(name string) string { return norm.NFC.String(cases.Fold().String(name)) }

// foldFS maps every name to its backing spelling, then calls the loopback.
type foldFS struct {
	pathfs.FileSystem
	root string
}

// real returns the backing spelling of the slash-separated relative path name.
func (f *foldFS) real(name string) string {
	if name == "" {
		return ""
	}
	var out []string
	dir := f.root
	for _, c := range strings.Split(name, "/") {
		c = f.component(dir, c)
		out = append(out, c)
		dir = filepath.Join(dir, c)
	}
	return strings.Join(out, "/")
}

// component returns the entry of the backing directory dir that c names: c itself when
// it exists, else the entry folding to the same key, else c (a name to create).
func (f *foldFS) component(dir, c string) string {
	if _, err := os.Lstat(filepath.Join(dir, c)); err == nil {
		return c
	}
	names, err := readDirNames(dir)
	if err != nil {
		return c
	}
	k := Fold(c)
	for _, n := range names {
		if Fold(n) == k {
			return n
		}
	}
	return c
}

func readDirNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// renameTarget returns the backing spelling for a rename's new name: the existing entry
// it folds to (replaced, as on APFS), or, for a case-only rename of the same entry, the
// new spelling.
func (f *foldFS) renameTarget(oldReal, newName string) string {
	r := f.real(newName)
	if r == oldReal {
		dir, _ := filepath.Split(r)
		return dir + filepath.Base(newName)
	}
	return r
}

func (f *foldFS) String() string { return "foldfs(" + f.root + ")" }

func (f *foldFS) GetAttr(name string, ctx *fuse.Context) (*fuse.Attr, fuse.Status) {
	return f.FileSystem.GetAttr(f.real(name), ctx)
}

func (f *foldFS) Chmod(name string, mode uint32, ctx *fuse.Context) fuse.Status {
	return f.FileSystem.Chmod(f.real(name), mode, ctx)
}

func (f *foldFS) Chown(name string, uid, gid uint32, ctx *fuse.Context) fuse.Status {
	return f.FileSystem.Chown(f.real(name), uid, gid, ctx)
}

func (f *foldFS) Utimens(name string, atime, mtime *time.Time, ctx *fuse.Context) fuse.Status {
	return f.FileSystem.Utimens(f.real(name), atime, mtime, ctx)
}

func (f *foldFS) Truncate(name string, size uint64, ctx *fuse.Context) fuse.Status {
	return f.FileSystem.Truncate(f.real(name), size, ctx)
}

func (f *foldFS) Access(name string, mode uint32, ctx *fuse.Context) fuse.Status {
	return f.FileSystem.Access(f.real(name), mode, ctx)
}

func (f *foldFS) Link(oldName, newName string, ctx *fuse.Context) fuse.Status {
	return f.FileSystem.Link(f.real(oldName), f.real(newName), ctx)
}

func (f *foldFS) Mkdir(name string, mode uint32, ctx *fuse.Context) fuse.Status {
	return f.FileSystem.Mkdir(f.real(name), mode, ctx)
}

func (f *foldFS) Mknod(name string, mode, dev uint32, ctx *fuse.Context) fuse.Status {
	return f.FileSystem.Mknod(f.real(name), mode, dev, ctx)
}

func (f *foldFS) Rename(oldName, newName string, ctx *fuse.Context) fuse.Status {
	o := f.real(oldName)
	return f.FileSystem.Rename(o, f.renameTarget(o, newName), ctx)
}

func (f *foldFS) Rmdir(name string, ctx *fuse.Context) fuse.Status {
	return f.FileSystem.Rmdir(f.real(name), ctx)
}

func (f *foldFS) Unlink(name string, ctx *fuse.Context) fuse.Status {
	return f.FileSystem.Unlink(f.real(name), ctx)
}

func (f *foldFS) GetXAttr(name, attr string, ctx *fuse.Context) ([]byte, fuse.Status) {
	return f.FileSystem.GetXAttr(f.real(name), attr, ctx)
}

func (f *foldFS) ListXAttr(name string, ctx *fuse.Context) ([]string, fuse.Status) {
	return f.FileSystem.ListXAttr(f.real(name), ctx)
}

func (f *foldFS) RemoveXAttr(name, attr string, ctx *fuse.Context) fuse.Status {
	return f.FileSystem.RemoveXAttr(f.real(name), attr, ctx)
}

func (f *foldFS) SetXAttr(name, attr string, data []byte, flags int, ctx *fuse.Context) fuse.Status {
	return f.FileSystem.SetXAttr(f.real(name), attr, data, flags, ctx)
}

func (f *foldFS) Open(name string, flags uint32, ctx *fuse.Context) (nodefs.File, fuse.Status) {
	return f.FileSystem.Open(f.real(name), flags, ctx)
}

func (f *foldFS) Create(name string, flags, mode uint32, ctx *fuse.Context) (nodefs.File, fuse.Status) {
	return f.FileSystem.Create(f.real(name), flags, mode, ctx)
}

func (f *foldFS) OpenDir(name string, ctx *fuse.Context) ([]fuse.DirEntry, fuse.Status) {
	return f.FileSystem.OpenDir(f.real(name), ctx)
}

func (f *foldFS) Symlink(value, linkName string, ctx *fuse.Context) fuse.Status {
	return f.FileSystem.Symlink(value, f.real(linkName), ctx)
}

func (f *foldFS) Readlink(name string, ctx *fuse.Context) (string, fuse.Status) {
	return f.FileSystem.Readlink(f.real(name), ctx)
}

func (f *foldFS) StatFs(name string) *fuse.StatfsOut { return f.FileSystem.StatFs(f.real(name)) }

var _ pathfs.FileSystem = (*foldFS)(nil)
