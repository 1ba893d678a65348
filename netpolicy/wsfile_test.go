package netpolicy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadWorkspaceFile: a plain file is read; a linked file, a file under a linked
// directory inside the workspace, a directory, a longer file and a ".." path are refused
// naming the path; a missing file wraps fs.ErrNotExist.
func TestReadWorkspaceFile(t *testing.T) {
	ws, out := t.TempDir(), t.TempDir()
	writeTestFile(t, filepath.Join(ws, "d/plain.toml"), "a = 1\n", 0o644)
	writeTestFile(t, filepath.Join(out, "secret"), "secret = 1\n", 0o600)
	os.Symlink(filepath.Join(out, "secret"), filepath.Join(ws, "link.toml"))
	os.Symlink(out, filepath.Join(ws, "dirlink"))
	os.Symlink(filepath.Join(ws, "d"), filepath.Join(ws, "inner"))
	if b, err := ReadWorkspaceFile(ws, "d/plain.toml", 100); err != nil || string(b) != "a = 1\n" {
		t.Errorf("plain file: %q %v", b, err)
	}
	for _, rel := range []string{"link.toml", "dirlink/secret", "inner/plain.toml"} {
		_, err := ReadWorkspaceFile(ws, rel, 100)
		if !errors.Is(err, ErrWorkspaceSymlink) || !strings.Contains(err.Error(), filepath.Join(ws, strings.Split(rel, "/")[0])) {
			t.Errorf("%s: %v, want %v naming the link", rel, err, ErrWorkspaceSymlink)
		}
	}
	if _, err := ReadWorkspaceFile(ws, "d", 100); !errors.Is(err, ErrWorkspaceNotRegular) {
		t.Errorf("directory: %v", err)
	}
	if _, err := ReadWorkspaceFile(ws, "d/plain.toml", 3); err == nil || !strings.Contains(err.Error(), "longer than 3 bytes") {
		t.Errorf("longer file: %v", err)
	}
	if _, err := ReadWorkspaceFile(ws, "../x", 100); err == nil {
		t.Error("a .. path was accepted")
	}
	if _, err := ReadWorkspaceFile(ws, "missing.toml", 100); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
