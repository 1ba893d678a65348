package cli

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/helper/api"
)

// TestImageBuild: brood image build asks the helper to build one of its recipes and
// shows the progress; an unknown recipe, a path, a policy that turns on-demand builds off
// and a missing helper each end with the precise error (the last two name the
// administrator's command).
func TestImageBuild(t *testing.T) {
	f := newFakeHelper(t)
	f.Images = api.ImageList{Store: "/var/lib/brood", Recipes: []string{"codex", "test"}}
	f.Builds = []api.BuildStatus{
		{Name: "test", State: api.BuildRunning, Progress: []api.BuildProgress{{Seq: 1, Phase: "start"}, {Seq: 2, Phase: "image", Lines: 4}}, Next: 2},
		{Name: "test", State: api.BuildDone, Next: 2, File: "test-0123.erofs", Size: 3 << 20},
	}
	code, out, _ := broodCode(t, "image", "build", "test")
	for _, want := range []string{"building image test: start", "building image test: image", "image test ready after", "test-0123.erofs (3 MiB)"} {
		if code != ExitOK || !strings.Contains(out, want) {
			t.Errorf("build test: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	if a := f.BuildArgs(); len(a) != 2 || a[0] != (api.BuildImageArgs{Name: "test"}) || a[1] != (api.BuildImageArgs{Name: "test", Follow: true, After: 2}) {
		t.Errorf("build_image requests %+v", a)
	}
	if code, _, stderr := broodCode(t, "image", "build", "nosuch"); code != ExitUsage || !strings.Contains(stderr, "codex, test") {
		t.Errorf("unknown recipe: exit %d %q", code, stderr)
	}
	if code, _, stderr := broodCode(t, "image", "build", "../x"); code != ExitUsage || !strings.Contains(stderr, "not an image name") {
		t.Errorf("path as name: exit %d %q", code, stderr)
	}
	f.BuildErr = &api.Error{Code: api.CodePolicy, Message: "build image codex: on-demand builds are off ([images] on_demand_builds = false in /etc/brood/policy.toml); an administrator runs: sudo broodd-helper image build codex: egress policy refused"}
	if code, _, stderr := broodCode(t, "image", "build", "codex"); code != ExitRefused || !strings.Contains(stderr, "on_demand_builds = false") ||
		!strings.Contains(stderr, "sudo broodd-helper image build codex") {
		t.Errorf("policy off: exit %d %q", code, stderr)
	}
	// No helper: the command is printed.
	err := runImageBuild(context.Background(), io.Discard, "nosuch", filepath.Join(t.TempDir(), "none.sock"))
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
