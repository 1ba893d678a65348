package frontend

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCopyEgressLog: the copy keeps whole decision lines while they fit the quota and
// counts every other line as dropped (over the quota, too long, not JSON, cut off); it
// never follows a symlink at its destination.
func TestCopyEgressLog(t *testing.T) {
	line := `{"name":"a.example.","verdict":"allowed"}` + "\n"
	long := `{"name":"` + strings.Repeat("x", maxEgressLine) + `"}` + "\n"
	src := line + "not json\n" + long + line + line + line + `{"cut":`
	dir := t.TempDir()
	dst := filepath.Join(dir, "egress.jsonl")
	kept, dropped, err := CopyEgressLog(dst, strings.NewReader(src), int64(3*len(line)))
	if err != nil || kept != 3 || dropped != 4 {
		t.Fatalf("kept %d dropped %d (%v); want 3 and 4", kept, dropped, err)
	}
	if b, _ := os.ReadFile(dst); string(b) != strings.Repeat(line, 3) {
		t.Errorf("copy holds %q", b)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want 0600", fi.Mode(), err)
	}
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("keep\n"), 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(target, link)
	if _, _, err := CopyEgressLog(link, strings.NewReader(line), 1<<20); err == nil {
		t.Error("CopyEgressLog followed a symlink")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Errorf("symlink target now %q", b)
	}
}
