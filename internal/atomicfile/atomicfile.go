// Package atomicfile writes a file so that a crash at any point leaves either the old file
// or the complete new one, never a partial one: temp file in the same directory, fsync,
// rename(2), fsync of the directory. brood's manifests, flush journals, review records and
// session.json all go through it.
//
// Privilege: none; linked into brood.
package atomicfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Write creates or replaces path (mode 0600) with what fill writes (buffered, 64 KiB).
// Errors name the step and path (*os.PathError or a wrapped error from fill); on any error
// the temp file is removed and path is unchanged.
func Write(path string, fill func(w io.Writer) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	bw := bufio.NewWriterSize(tmp, 64<<10)
	if err := fill(bw); err != nil {
		tmp.Close()
		return fmt.Errorf("write %q: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %q: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("fsync %q: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %q: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename into %q: %w", path, err)
	}
	return SyncDir(dir)
}

// WriteBytes is Write of b.
func WriteBytes(path string, b []byte) error {
	return Write(path, func(w io.Writer) error { _, err := w.Write(b); return err })
}

// SyncDir fsyncs directory dir so that renames and creations in it are durable.
func SyncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open for fsync", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return &os.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}
