package review

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"brood.dev/brood/frontend/digest"
)

// MaxTextBytes is the default display limit per file (8 MiB): larger files are shown by
// size and hash only and cannot be hunk-selected or merged.
const MaxTextBytes = 8 << 20

// Trees locates the three versions of a path the review compares: W (the workspace now), S
// (the snapshot the agent edited) and the optional base copies kept at snapshot time
// (session.BaseDir, same relative paths). Paths are relative, '/'-separated, raw bytes.
//
// Every read goes through os.Root, which refuses to resolve outside the tree, and opens
// the final component with O_NOFOLLOW: a symlink the agent planted in S is never followed.
type Trees struct {
	W, S, Base string
	MaxBytes   int64 // display limit per file; 0 means MaxTextBytes
}

// Workspace reads W's current content of path. When want is non-nil the content must have
// that content digest (package digest; ErrChanged otherwise), so what is shown is what the diff saw.
func (t Trees) Workspace(path string, want []byte) ([]byte, error) {
	return t.readWant(t.W, path, want)
}

// Snapshot reads S's content of path, checked against want like Workspace.
func (t Trees) Snapshot(path string, want []byte) ([]byte, error) {
	return t.readWant(t.S, path, want)
}

func (t Trees) readWant(dir, path string, want []byte) ([]byte, error) {
	b, err := t.read(dir, path)
	if err != nil || want == nil {
		return b, err
	}
	if !bytes.Equal(digest.Bytes(b), want) {
		return nil, fmt.Errorf("read %s: %w", EscapeName(path), ErrChanged)
	}
	return b, nil
}

// BaseCopy reads the base copy of path kept at snapshot time and checks it against want
// (the content digest recorded in the manifest / Change.OldHash, package digest) when want is non-nil. It returns
// ErrNoBase when no copy was kept and ErrBaseMismatch when the copy was altered.
func (t Trees) BaseCopy(path string, want []byte) ([]byte, error) {
	if t.Base == "" {
		return nil, fmt.Errorf("read base of %s: %w", EscapeName(path), ErrNoBase)
	}
	b, err := t.readWant(t.Base, path, want)
	if errors.Is(err, ErrChanged) {
		return nil, fmt.Errorf("read base of %s: %w", EscapeName(path), ErrBaseMismatch)
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrNotRegular) {
		return nil, fmt.Errorf("read base of %s: %w", EscapeName(path), ErrNoBase)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Lstat returns the lstat(2) information of path in the tree dir (t.W or t.S).
func (t Trees) Lstat(dir, path string) (fs.FileInfo, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open tree %q: %w", dir, err)
	}
	defer r.Close()
	return r.Lstat(path)
}

// Readlink returns the target of the symlink path in the tree dir, never following it.
func (t Trees) Readlink(dir, path string) (string, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return "", fmt.Errorf("open tree %q: %w", dir, err)
	}
	defer r.Close()
	return r.Readlink(path)
}

func (t Trees) read(dir, path string) ([]byte, error) {
	max := t.MaxBytes
	if max <= 0 {
		max = MaxTextBytes
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open tree %q: %w", dir, err)
	}
	defer r.Close()
	fi, err := r.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", EscapeName(path), err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s (%s): %w", EscapeName(path), fi.Mode().Type(), ErrNotRegular)
	}
	// O_NONBLOCK: should the entry be swapped for a FIFO after the Lstat, open does not hang.
	f, err := r.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", EscapeName(path), err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("read %s: %w", EscapeName(path), err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s (%s): %w", EscapeName(path), fi.Mode().Type(), ErrNotRegular)
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("read %s (%d bytes): %w", EscapeName(path), fi.Size(), ErrTooLarge)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", EscapeName(path), err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("read %s (grew past %d bytes): %w", EscapeName(path), max, ErrTooLarge)
	}
	return b, nil
}
