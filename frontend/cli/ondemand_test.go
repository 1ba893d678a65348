package cli

import (
	"context"
	"os"
	"strings"
	"testing"

	"brood.dev/brood/frontend/fakehelper"
	"brood.dev/brood/helper/api"
)

// TestRunBuildsMissingImage: brood run of an image the helper has a recipe for but has
// not built asks the helper to build it, shows the progress (queued, each phase, the
// result), and only then snapshots and boots.
func TestRunBuildsMissingImage(t *testing.T) {
	f := newFakeHelper(t)
	f.Caps.Images = []string{"test"}
	f.Images.Recipes = []string{"codex", "test"}
	f.Builds = []api.BuildStatus{
		{Name: "codex", State: api.BuildQueued, Progress: []api.BuildProgress{}},
		{Name: "codex", State: api.BuildRunning, Joined: true, Next: 3, Progress: []api.BuildProgress{
			{Seq: 1, Phase: "start"}, {Seq: 2, Phase: "kernel"}, {Seq: 3, Phase: "image", Text: "I: \x1b[2Jdownloading", Lines: 9}}},
		{Name: "codex", State: api.BuildDone, Next: 3, File: "codex-0123.erofs", Size: 200 << 20},
	}
	code, _, stderr, ss := fakeRun(t, "run-image", "codex", "--", "true")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"image codex is not built yet: the helper builds it now", "queued behind another image build",
		"following the build another user started", "building image codex: start", "building image codex: kernel",
		"building image codex: image", "image codex ready after", "codex-0123.erofs (200 MiB)"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	calls := f.Calls()
	if b, c := strings.Index(calls, "build_image"), strings.Index(calls, "create_session"); b < 0 || c < b || len(ss) != 1 {
		t.Errorf("calls %q: want the build before the session", calls)
	}
	if a := f.BuildArgs(); len(a) != 3 || a[0].Follow || !a[1].Follow || a[2].After != 3 {
		t.Errorf("build_image requests %+v", a)
	}
}

// TestRunBuildRefusedOrFailed: a policy that turns on-demand builds off ends the run
// (exit 3) with the helper's error naming on_demand_builds and the administrator's
// command; a failed build ends it with the last lines of the build log (escaped) and
// where the full log is; --no-build never asks; neither snapshots anything.
func TestRunBuildRefusedOrFailed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		setup func(f *fakehelper.Helper)
		code  int
		want  []string
		calls int // build_image requests
	}{
		{"policy off", []string{"run-image", "codex", "--", "true"}, func(f *fakehelper.Helper) {
			f.BuildErr = &api.Error{Code: api.CodePolicy, Message: "build image codex: on-demand builds are off ([images] on_demand_builds = false in /etc/brood/policy.toml); an administrator runs: sudo broodd-helper image build codex: egress policy refused"}
		}, ExitRefused, []string{`image not built: "codex"`, "on_demand_builds = false in /etc/brood/policy.toml", "an administrator runs: sudo broodd-helper image build codex"}, 1},
		{"failed", []string{"run-image", "codex", "--", "true"}, func(f *fakehelper.Helper) {
			f.Builds = []api.BuildStatus{{Name: "codex", State: api.BuildFailed, Error: "mmdebstrap image codex: exit status 1",
				Tail: []string{"E: Unable to locate package nodejs", "\x1b]0;owned\x07"}, Log: "/var/lib/brood/logs/build-codex.log"}}
		}, ExitError, []string{"build image codex failed: mmdebstrap image codex: exit status 1", "last lines of the build log:",
			"E: Unable to locate package nodejs", `\x1b]0;owned`, "full log: /var/lib/brood/logs/build-codex.log"}, 1},
		{"no-build", []string{"run-image", "--no-build", "codex", "--", "true"}, func(f *fakehelper.Helper) {}, ExitError,
			[]string{`image not built: "codex"`, "sudo broodd-helper image build codex"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHelper(t)
			f.Caps.Images = []string{"test"}
			f.Images.Recipes = []string{"codex", "test"}
			tc.setup(f)
			code, _, stderr, ss := fakeRun(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s", code, tc.code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, "\x1b") {
				t.Errorf("an escape byte from the helper reached the terminal:\n%q", stderr)
			}
			if len(ss) != 0 || strings.Contains(f.Calls(), "create_session") {
				t.Errorf("snapshotted anyway: sessions %d, calls %s", len(ss), f.Calls())
			}
			if n := len(f.BuildArgs()); n != tc.calls {
				t.Errorf("%d build_image requests, want %d", n, tc.calls)
			}
		})
	}
}

// TestRunPullsMissingDigestRef: run-image of a digest reference whose image the store
// lacks has the helper pull it (build_image with the reference, never a name), with
// progress; an allowed_images refusal ends the run before the snapshot; a helper without
// build_image gets the old refusal with the administrator's pull command.
func TestRunPullsMissingDigestRef(t *testing.T) {
	ref := "127.0.0.1:5000/tool@sha256:" + strings.Repeat("0f", 32)
	f := newFakeHelper(t)
	f.Caps.Images = []string{"test"}
	f.Builds = []api.BuildStatus{{Name: "oci-0f0f", State: api.BuildDone, Key: ref, Next: 2, File: "oci-0f0f-ab.erofs", Size: 1 << 20,
		Progress: []api.BuildProgress{{Seq: 1, Phase: "start"}, {Seq: 2, Phase: "pull"}}}}
	code, _, stderr, ss := fakeRun(t, "run-image", ref, "--", "true")
	if code != 0 || !strings.Contains(stderr, "is not pulled yet: the helper pulls it now") || !strings.Contains(stderr, ": pull") || len(ss) != 1 {
		t.Fatalf("exit %d, sessions %d\n%s", code, len(ss), stderr)
	}
	if a := f.BuildArgs(); len(a) != 1 || a[0].Ref != ref || a[0].Name != "" {
		t.Errorf("build_image requests %+v, want one pull of %s", a, ref)
	}

	f = newFakeHelper(t)
	f.Caps.Images = []string{"test"}
	f.BuildErr = &api.Error{Code: api.CodePolicy, Message: "pull image: image " + ref + " is not in allowed_images (system policy /etc/brood/policy.toml): egress policy refused"}
	code, _, stderr, ss = fakeRun(t, "run-image", ref, "--", "true")
	if code != ExitRefused || !strings.Contains(stderr, "allowed_images") || len(ss) != 0 {
		t.Errorf("refused pull: exit %d, sessions %d\n%s", code, len(ss), stderr)
	}

	f = newFakeHelper(t) // no Builds: build_image is an unknown call, as to an older helper
	f.Caps.Images = []string{"test"}
	code, _, stderr, ss = fakeRun(t, "run-image", ref, "--", "true")
	if code != ExitError || !strings.Contains(stderr, "sudo broodd-helper image pull") || len(ss) != 0 {
		t.Errorf("older helper: exit %d, sessions %d\n%s", code, len(ss), stderr)
	}
}

// TestRunAgentBuildsItsImage: brood run AGENT (not only run-image) builds the agent's
// missing image first.
func TestRunAgentBuildsItsImage(t *testing.T) {
	f := newFakeHelper(t)
	f.Caps.Images = []string{"test"}
	f.Images.Recipes = []string{"codex", "test"}
	f.Builds = []api.BuildStatus{{Name: "codex", State: api.BuildDone, File: "codex-0123.erofs"}}
	_, _, stderr, _ := fakeRun(t, "run", "codex", "--", "--version")
	if a := f.BuildArgs(); len(a) != 1 || a[0].Name != "codex" || !strings.Contains(stderr, "image codex ready after") {
		t.Errorf("build_image requests %+v\n%s", a, stderr)
	}
	if !strings.Contains(f.Calls(), "start_vm") || f.StartArgs().Image != "codex" {
		t.Errorf("calls %q, start image %q: want the run to go on with codex", f.Calls(), f.StartArgs().Image)
	}
}

// cancelOn cancels a context when a line with want is written.
type cancelOn struct {
	want   string
	cancel context.CancelFunc
	b      strings.Builder
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.b.Write(p)
	if strings.Contains(c.b.String(), c.want) {
		c.cancel()
	}
	return len(p), nil
}

// TestBuildStopsWaiting: when brood stops waiting (Ctrl-C), it says the helper finishes
// the build and keeps the image.
func TestBuildStopsWaiting(t *testing.T) {
	f := newFakeHelper(t)
	f.Builds = []api.BuildStatus{{Name: "codex", State: api.BuildRunning, Next: 1, Progress: []api.BuildProgress{{Seq: 1, Phase: "image"}}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancelOn{want: "building image codex: image", cancel: cancel}
	_, err := buildOnDemand(ctx, w, os.Getenv(api.SocketEnv), "codex")
	if err == nil || !strings.Contains(err.Error(), "stopped waiting") || !strings.Contains(err.Error(), "the helper finishes the build and keeps the image") {
		t.Errorf("cancelled wait: %v", err)
	}
}
