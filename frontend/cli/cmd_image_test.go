package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/helper/api"
)

// TestImageBuildPrintsHelperCommand: brood builds nothing; it checks the name against
// the helper's recipes and names the privileged command.
func TestImageBuildPrintsHelperCommand(t *testing.T) {
	f := newFakeHelper(t)
	f.Images = api.ImageList{Store: "/var/lib/brood", Recipes: []string{"codex", "test"}}
	code, _, stderr := broodCode(t, "image", "build", "test")
	if code != ExitUsage || !strings.Contains(stderr, "sudo broodd-helper image build test") {
		t.Errorf("build test: exit %d %q", code, stderr)
	}
	if code, _, stderr := broodCode(t, "image", "build", "nosuch"); code != ExitUsage || !strings.Contains(stderr, "codex, test") {
		t.Errorf("unknown recipe: exit %d %q", code, stderr)
	}
	if code, _, stderr := broodCode(t, "image", "build", "../x"); code != ExitUsage || !strings.Contains(stderr, "not an image name") {
		t.Errorf("path as name: exit %d %q", code, stderr)
	}
	// No helper: the command is printed all the same.
	err := runImageBuild(context.Background(), "nosuch", filepath.Join(t.TempDir(), "none.sock"))
	if err == nil || !strings.Contains(err.Error(), "sudo broodd-helper image build nosuch") {
		t.Errorf("no helper: %v", err)
	}
}

// TestImageListAsksHelper: the list is the helper's answer, with the recipes not built.
func TestImageListAsksHelper(t *testing.T) {
	f := newFakeHelper(t)
	built := time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local).Unix()
	f.Images = api.ImageList{Store: "/tmp/x/state", Recipes: []string{"codex", "test"}, Images: []api.Image{
		{Name: "my-img", File: "my-img-2222.erofs", Digest: "22222222222222222222222222222222", Size: 1 << 20, Built: built},
		{Name: "test", File: "test-1111.erofs", Digest: "11111111111111111111111111111111", Size: 3 << 20, Built: built},
	}}
	var out, errw bytes.Buffer
	if err := runImageList(context.Background(), &out, &errw, api.SocketPath()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "NAME") {
		t.Fatalf("list:\n%s", out.String())
	}
	for i, want := range []string{"my-img 2026-01-02 03:04:05 1 MiB 2222", "test 2026-01-02 03:04:05 3 MiB 1111",
		"codex not built - (sudo broodd-helper image build codex)"} {
		if got := strings.Join(strings.Fields(lines[i+1]), " "); !strings.HasPrefix(got, want) {
			t.Errorf("line %d = %q, want it to start with %q", i+1, got, want)
		}
	}
	if !strings.Contains(errw.String(), "/tmp/x/state") || !strings.Contains(f.Calls(), "list_images") {
		t.Errorf("stderr %q, calls %q", errw.String(), f.Calls())
	}
	// No helper: an error that says so, with the hint.
	err := runImageList(context.Background(), &out, &errw, filepath.Join(t.TempDir(), "none.sock"))
	if err == nil || !strings.Contains(err.Error(), "ask the helper") || !strings.Contains(err.Error(), "hint:") {
		t.Errorf("no helper: %v", err)
	}
}
