package frontend

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestImageBuildNeedsRoot(t *testing.T) {
	var out, errw bytes.Buffer
	err := runImageBuild(context.Background(), &out, &errw, "test", 1000)
	if err == nil || !strings.Contains(err.Error(), "needs root") || !strings.Contains(err.Error(), "sudo brood image build test") {
		t.Errorf("non-root build: %v", err)
	}
	if out.Len() != 0 || errw.Len() != 0 {
		t.Errorf("non-root build wrote %q %q", out.String(), errw.String())
	}
	if code, _, stderr := broodCode(t, "image", "build", "nosuch"); code != ExitUsage || !strings.Contains(stderr, "codex, test") {
		t.Errorf("unknown recipe: exit %d %q", code, stderr)
	}
}

func TestImageListNewestPerName(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, age time.Duration) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, 3<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		mt := time.Now().Add(-age)
		os.Chtimes(p, mt, mt)
		return p
	}
	write("test-00000000000000000000000000000000.ext4", time.Hour)
	newest := write("test-11111111111111111111111111111111.erofs", time.Minute)
	mine := write("my-img-22222222222222222222222222222222.erofs", time.Minute)
	write("notanimage.txt", 0)
	write(".build-test-123", 0)
	var out bytes.Buffer
	if err := runImageList(&out, dir); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "NAME") {
		t.Fatalf("list:\n%s", out.String())
	}
	for i, want := range [][]string{{"codex", "not", "built"}, {"my-img"}, {"test"}} {
		if f := strings.Fields(lines[i+1]); len(f) < len(want) || strings.Join(f[:len(want)], " ") != strings.Join(want, " ") {
			t.Errorf("line %d = %q, want it to start with %q", i+1, lines[i+1], want)
		}
	}
	if !strings.HasSuffix(lines[2], mine) || !strings.HasSuffix(lines[3], newest) || !strings.Contains(lines[3], "3 MiB") {
		t.Errorf("list:\n%s", out.String())
	}
	// A missing cache lists the recipes as not built.
	out.Reset()
	if err := runImageList(&out, filepath.Join(dir, "none")); err != nil || strings.Count(out.String(), "not built") != 2 {
		t.Errorf("missing dir: %v\n%s", err, out.String())
	}
}
