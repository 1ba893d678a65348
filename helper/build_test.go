//go:build linux

package helper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/sandbox/image"
	"brood.dev/brood/sandbox/ociref"
	"brood.dev/brood/sandbox/store"
)

// fakeBuilder stands in for the spawner's build children: each Build writes the records
// of script on the progress pipe from a goroutine, after release is closed for any
// record past the first (so a test decides when a build may end, without sleeping).
type fakeBuilder struct {
	state   string // the store the image is written to on success
	release chan struct{}
	hang    chan struct{}              // a "HANG" line blocks the child until it is closed
	script  func(name string) []string // the lines to write; "IMAGE" makes the image first

	mu     sync.Mutex
	names  []string
	killed []int
}

func newFakeBuilder(state string) *fakeBuilder {
	return &fakeBuilder{state: state, release: make(chan struct{}), script: func(string) []string {
		return []string{`{"phase":"kernel"}`, `{"phase":"image","text":"I: running apt","bytes":100,"lines":3}`,
			"IMAGE", `{"phase":"done","file":"x","size":1}`}
	}}
}

func (f *fakeBuilder) Build(req spawner.Request, progress *os.File) (int, *os.File, error) {
	if req.StateDir != f.state {
		return 0, nil, fmt.Errorf("build into %q, want %q", req.StateDir, f.state)
	}
	name := req.Name
	if req.Ref != "" {
		name = req.Ref
	}
	f.mu.Lock()
	f.names = append(f.names, name)
	f.mu.Unlock()
	w, err := dupFile(progress)
	if err != nil {
		return 0, nil, err
	}
	go func() {
		defer w.Close()
		for i, line := range f.script(name) {
			if i == 1 {
				<-f.release
			}
			if line == "HANG" {
				<-f.hang
				return
			}
			if line == "IMAGE" {
				writeStoreImage(f.state, name)
				continue
			}
			fmt.Fprintln(w, line)
		}
	}()
	pidfd, _ := os.Open(os.DevNull)
	return 4242, pidfd, nil
}

func (f *fakeBuilder) Kill(pid int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed = append(f.killed, pid)
	return nil
}

func (f *fakeBuilder) kills() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.killed)
}

func (f *fakeBuilder) built() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.names)
}

func dupFile(f *os.File) (*os.File, error) {
	n, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(n), f.Name()), nil
}

// writeStoreImage writes the image file recipe name's key names into state's store, or
// for a digest reference the image of its pulled name.
func writeStoreImage(state, name string) {
	file := ""
	if n, err := ociref.RefImageName(name); err == nil {
		file = store.ImageFile(n, strings.Repeat("ab", 16))
	} else {
		key, _ := image.Recipes[name].Key()
		file = store.ImageFile(name, key[:store.DigestLen])
	}
	dir := store.New(state).Images()
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, file), []byte("image"), 0o644)
}

// buildServer is an in-process helper whose builds run on a fakeBuilder, with a store in
// a temporary directory and a system policy file (policy; "": none).
func buildServer(t *testing.T, policy string) (*testServer, *fakeBuilder) {
	t.Helper()
	requireRoot(t) // the store and the policy file must be root's
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	pol := filepath.Join(dir, "policy.toml")
	if policy != "" {
		if err := os.WriteFile(pol, []byte(policy), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fb := newFakeBuilder(state)
	ts := startServerWith(t, func(c *Config) { c.StateDir, c.Egress.PolicyPath = state, pol },
		func(s *Server) { s.EnableBuilds(fb) })
	return ts, fb
}

// TestBuildImageProgress: build_image starts a build of a recipe, the caller sees every
// progress record in order and the image the store holds afterwards; a second request
// for the built recipe is done at once, with no build.
func TestBuildImageProgress(t *testing.T) {
	ts, fb := buildServer(t, "")
	close(fb.release)
	c := ts.dial(t)
	var phases []string
	var states []string
	st, err := c.BuildImage(context.Background(), "test", func(s api.BuildStatus, p *api.BuildProgress) {
		if p != nil {
			phases = append(phases, fmt.Sprintf("%d:%s:%s:%d", p.Seq, p.Phase, p.Text, p.Lines))
		} else {
			states = append(states, s.State)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := image.Recipes["test"].Key()
	if want := []string{"1:kernel::0", "2:image:I: running apt:3"}; !slices.Equal(phases, want) {
		t.Errorf("progress %q, want %q", phases, want)
	}
	if st.State != api.BuildDone || st.File != store.ImageFile("test", key[:32]) || st.Size != 5 || st.Key != key[:32] ||
		st.Log != filepath.Join(ts.cfg.StateDir, "logs", "build-test.log") || states[len(states)-1] != api.BuildDone {
		t.Errorf("final status %+v (states %v)", st, states)
	}
	again, err := c.BuildImage(context.Background(), "test", nil)
	if err != nil || again.State != api.BuildDone || again.File != st.File || len(again.Progress) != 0 {
		t.Errorf("second build_image = %+v, %v: want done at once", again, err)
	}
	if got := fb.built(); !slices.Equal(got, []string{"test"}) || ts.srv.builds.started.Load() != 1 {
		t.Errorf("builds started: %v (%d), want one of test", got, ts.srv.builds.started.Load())
	}
}

// TestBuildImageShared: two callers of the same recipe while its build runs follow one
// build (the second is told it joined) and both get its image; a caller that hangs up
// does not stop the build, whose image is kept.
func TestBuildImageShared(t *testing.T) {
	ts, fb := buildServer(t, "")
	a, b := ts.dial(t), ts.dial(t)
	ctx := context.Background()
	var first, second api.BuildStatus
	if err := a.Call(ctx, api.CallBuildImage, api.BuildImageArgs{Name: "test"}, &first); err != nil {
		t.Fatal(err)
	}
	if err := b.Call(ctx, api.CallBuildImage, api.BuildImageArgs{Name: "test"}, &second); err != nil {
		t.Fatal(err)
	}
	if first.Key == "" || first.Key != second.Key || second.Ended() {
		t.Errorf("first %+v, second %+v: want the same build, not ended", first, second)
	}
	a.Close() // the starter goes away; the build goes on
	close(fb.release)
	st, err := b.BuildImage(ctx, "test", nil)
	if err != nil || st.State != api.BuildDone {
		t.Fatalf("follower: %+v, %v", st, err)
	}
	if got := fb.built(); len(got) != 1 || ts.srv.builds.started.Load() != 1 {
		t.Errorf("builds started %v, want exactly one for two callers", got)
	}
	if _, ok := ts.srv.storedImage(&build{name: "test", key: first.Key}); !ok {
		t.Errorf("the image of the abandoned build is not in the store")
	}
}

// TestBuildImagePolicyOff: with on_demand_builds = false in the system policy,
// build_image is a policy error naming the key, the file and the administrator's command,
// and nothing is built.
func TestBuildImagePolicyOff(t *testing.T) {
	ts, fb := buildServer(t, "[images]\non_demand_builds = false\n")
	_, err := ts.dial(t).BuildImage(context.Background(), "codex", nil)
	for _, want := range []string{"on_demand_builds = false", ts.cfg.Egress.PolicyPath, "sudo broodd-helper image build codex"} {
		if !api.IsCode(err, api.CodePolicy) || !strings.Contains(err.Error(), want) {
			t.Errorf("build with on_demand_builds = false: %v, want a policy error with %q", err, want)
		}
	}
	if got := fb.built(); len(got) != 0 {
		t.Errorf("builds started under the policy: %v", got)
	}
	// A policy file others may write is not read, and refuses too.
	os.Chmod(ts.cfg.Egress.PolicyPath, 0o666)
	if _, err := ts.dial(t).BuildImage(context.Background(), "codex", nil); !api.IsCode(err, api.CodePolicy) || !strings.Contains(err.Error(), "read the system policy") {
		t.Errorf("build with an insecure policy file: %v, want a policy error", err)
	}
	if got := fb.built(); len(got) != 0 {
		t.Errorf("builds started under an unreadable policy: %v", got)
	}
}

// TestBuildImageRefusals: only recipe names of the helper's own table are built (no
// path, no unknown name); a uid gets at most maxBuildsPerUser builds queued or running;
// builds run one at a time (the second is queued); a helper without a builder answers
// unavailable.
func TestBuildImageRefusals(t *testing.T) {
	ts, fb := buildServer(t, "")
	c := ts.dial(t)
	ctx := context.Background()
	for _, name := range []string{"nosuch", "../test", "/var/lib/brood/images/test", ""} {
		var st api.BuildStatus
		if err := c.Call(ctx, api.CallBuildImage, api.BuildImageArgs{Name: name}, &st); !api.IsCode(err, api.CodeBadRequest) {
			t.Errorf("build_image %q = %v, want bad_request", name, err)
		}
	}
	var st1, st2, st3 api.BuildStatus
	if err := c.Call(ctx, api.CallBuildImage, api.BuildImageArgs{Name: "test"}, &st1); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, api.CallBuildImage, api.BuildImageArgs{Name: "codex"}, &st2); err != nil || st2.State != api.BuildQueued {
		t.Errorf("second recipe while one builds: %+v, %v, want queued", st2, err)
	}
	err := c.Call(ctx, api.CallBuildImage, api.BuildImageArgs{Name: "gemini"}, &st3)
	if !api.IsCode(err, api.CodeLimit) {
		t.Errorf("third build of one uid = %v, want limit", err)
	}
	close(fb.release)
	for _, n := range []string{"test", "codex"} {
		if st, err := c.BuildImage(ctx, n, nil); err != nil || st.State != api.BuildDone {
			t.Errorf("build %s: %+v, %v", n, st, err)
		}
	}
	if got := fb.built(); !slices.Equal(got, []string{"test", "codex"}) {
		t.Errorf("built %v, want test then codex", got)
	}
	plain := startServer(t, nil)
	if _, err := plain.dial(t).BuildImage(ctx, "test", nil); !api.IsCode(err, api.CodeUnavailable) {
		t.Errorf("helper without builder: %v, want unavailable", err)
	}
}

// TestBuildImageFailures: a failed build returns the child's error, the last lines of
// its log and where the full log is; a child that claims an image the store does not
// hold, ends without a final record, or writes an oversized or malformed record fails.
func TestBuildImageFailures(t *testing.T) {
	long := strings.Repeat("x", maxRecordLine+1)
	tail, _ := json.Marshal(buildRecord{Phase: phaseFailed, Error: "mmdebstrap image test: exit status 1",
		Tail: []string{"E: Unable to locate package nosuch", strings.Repeat("y", 1000)}})
	for _, tc := range []struct {
		name   string
		lines  []string
		want   string
		killed bool // the helper kills the child
	}{
		{"failed", []string{`{"phase":"kernel"}`, string(tail)}, "Unable to locate package nosuch", false},
		{"no image", []string{`{"phase":"kernel"}`, `{"phase":"done","file":"test-0.erofs","size":1}`}, "without an image in the store", false},
		{"no final", []string{`{"phase":"kernel"}`, `{"phase":"image"}`}, "ended without a result", true},
		{"oversized", []string{`{"phase":"kernel"}`, long}, "over 8192 bytes", true},
		{"malformed", []string{`{"phase":"kernel"}`, `{"phase":"image","uid":0}`}, "malformed progress record", true},
		{"silent", []string{`{"phase":"kernel"}`, "HANG"}, "i/o timeout", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, fb := buildServer(t, "")
			fb.script = func(string) []string { return tc.lines }
			if tc.name == "silent" {
				defer func(d time.Duration) { buildChildTimeout = d }(buildChildTimeout)
				buildChildTimeout = 200 * time.Millisecond // the child writes nothing more and never exits
				hang := make(chan struct{})
				t.Cleanup(func() { close(hang) })
				fb.hang = hang
			}
			close(fb.release)
			st, err := ts.dial(t).BuildImage(context.Background(), "test", nil)
			var bf *api.ErrBuildFailed
			if !errors.As(err, &bf) || st.State != api.BuildFailed || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), "full log: "+filepath.Join(ts.cfg.StateDir, "logs", "build-test.log")) {
				t.Fatalf("build = %+v, %v; want failed with %q and the log's path", st, err, tc.want)
			}
			for _, l := range st.Tail {
				if len(l) > api.MaxProgressText {
					t.Errorf("tail line of %d bytes passed (max %d)", len(l), api.MaxProgressText)
				}
			}
			if k := fb.kills(); (len(k) == 1 && k[0] == 4242) != tc.killed {
				t.Errorf("children killed: %v, want killed=%v", k, tc.killed)
			}
		})
	}
}

// TestBuildStatusBounds: a caller far behind gets at most api.MaxBuildRecords records
// per answer, and the end of the build only with its last record.
func TestBuildStatusBounds(t *testing.T) {
	b := &build{name: "test", status: api.BuildStatus{State: api.BuildRunning}, changed: make(chan struct{})}
	b.owner = 1000
	for range maxKeptRecords + 10 {
		b.add(buildRecord{Phase: "image\x1b[2J", Text: "\x1b]0;t\x07" + strings.Repeat("z", 500)})
	}
	if st := b.statusAfter(0, 1000); st.Joined || !b.statusAfter(0, 1001).Joined {
		t.Errorf("joined: the owner %v, another uid %v; want false, true", st.Joined, b.statusAfter(0, 1001).Joined)
	}
	if r := b.recs[0]; strings.ContainsAny(r.Phase+r.Text, "\x1b\x07") {
		t.Errorf("control bytes kept: %q %q", r.Phase, r.Text[:10])
	}
	b.status.State = api.BuildDone
	st := b.statusAfter(0, 0)
	if len(st.Progress) != api.MaxBuildRecords || st.Progress[0].Seq != 11 || st.State != api.BuildRunning ||
		len(st.Progress[0].Text) != api.MaxProgressText {
		t.Errorf("first answer: %d records from %d, state %s, text %d bytes", len(st.Progress), st.Progress[0].Seq, st.State, len(st.Progress[0].Text))
	}
	for st.State != api.BuildDone {
		st = b.statusAfter(st.Next, 0)
	}
	if st.Next != maxKeptRecords+10 {
		t.Errorf("done at record %d, want %d", st.Next, maxKeptRecords+10)
	}
	body, _ := json.Marshal(api.Response{Result: mustJSON(b.statusAfter(0, 0))})
	if len(body) > api.MaxFrame/2 {
		t.Errorf("a full answer is %d bytes, too close to the frame limit %d", len(body), api.MaxFrame)
	}
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// TestRecorder: the build child's log writer copies everything to the log, counts bytes
// and lines, keeps the last api.MaxBuildTail lines clipped and free of control bytes,
// and sends a record at each phase.
func TestRecorder(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var log strings.Builder
	rec := &recorder{out: w, log: &log, sent: time.Now().Add(time.Hour)} // no timed records
	rec.phase("image")
	for i := range 30 {
		fmt.Fprintf(rec, "line %d \x1b[31m%s\n", i, strings.Repeat("q", 300))
	}
	tl := rec.tail()
	rec.final(buildRecord{Phase: phaseDone, File: "f", Size: 1})
	if len(tl) != api.MaxBuildTail || !strings.HasPrefix(tl[0], "line 10  [31m") || len(tl[0]) != api.MaxProgressText {
		t.Errorf("tail: %d lines, first %q", len(tl), tl[0])
	}
	if strings.Count(log.String(), "\n") != 30 {
		t.Errorf("log has %d lines, want 30", strings.Count(log.String(), "\n"))
	}
	var got []buildRecord
	final, err := readBuildRecords(r, func(b buildRecord) { got = append(got, b) })
	if err != nil || final.Phase != phaseDone || len(got) != 1 || got[0].Phase != "image" || final.Lines != 30 || final.Bytes != int64(len(log.String())) {
		t.Errorf("records %+v final %+v err %v", got, final, err)
	}
}

// TestPullImageOnDemand: build_image with a digest reference pulls it (the builder gets
// the reference and the system policy file, never a recipe), into the name the
// reference maps to; a second request is done at once. A tag, a name with a reference,
// a reference allowed_images does not list, a policy without allowed_images and
// on_demand_builds = false are refused before anything runs.
func TestPullImageOnDemand(t *testing.T) {
	ref := "127.0.0.1:5000/tool@sha256:" + strings.Repeat("0f", 32)
	n, _ := ociref.RefImageName(ref)
	ts, fb := buildServer(t, "[images]\nallowed_images = [\"127.0.0.1:5000\"]\n")
	close(fb.release)
	c := ts.dial(t)
	ctx := context.Background()
	st, err := c.PullImage(ctx, ref, nil)
	if err != nil || st.State != api.BuildDone || st.Name != n || !strings.HasPrefix(st.File, n+"-") || st.Key != ref {
		t.Fatalf("pull on demand: %+v, %v", st, err)
	}
	if again, err := c.PullImage(ctx, ref, nil); err != nil || again.State != api.BuildDone || len(fb.built()) != 1 {
		t.Errorf("second pull: %+v, %v; builds %v", again, err, fb.built())
	}
	for _, tc := range []struct {
		args api.BuildImageArgs
		code api.Code
	}{
		{api.BuildImageArgs{Ref: "127.0.0.1:5000/tool:v1"}, api.CodeBadRequest},
		{api.BuildImageArgs{Name: "test", Ref: ref}, api.CodeBadRequest},
		{api.BuildImageArgs{Ref: "ghcr.io/corp/tool@sha256:" + strings.Repeat("0f", 32)}, api.CodePolicy},
	} {
		var st api.BuildStatus
		if err := c.Call(ctx, api.CallBuildImage, tc.args, &st); !api.IsCode(err, tc.code) {
			t.Errorf("build_image %+v = %v, want %s", tc.args, err, tc.code)
		}
	}
	none, fbNone := buildServer(t, "")
	if _, err := none.dial(t).PullImage(ctx, ref, nil); !api.IsCode(err, api.CodePolicy) || !strings.Contains(err.Error(), "need [images] allowed_images") ||
		!strings.Contains(err.Error(), "sudo broodd-helper image pull "+ref) {
		t.Errorf("pull without allowed_images: %v", err)
	}
	if got := fbNone.built(); len(got) != 0 {
		t.Errorf("pulled without allowed_images: %v", got)
	}
	off, fbOff := buildServer(t, "[images]\non_demand_builds = false\n")
	_, err = off.dial(t).PullImage(ctx, ref, nil)
	if !api.IsCode(err, api.CodePolicy) || !strings.Contains(err.Error(), "on_demand_builds = false") || !strings.Contains(err.Error(), "sudo broodd-helper image pull "+ref) {
		t.Errorf("pull with on_demand_builds = false: %v", err)
	}
	if got := append(fb.built(), fbOff.built()...); len(got) != 1 {
		t.Errorf("builds %v, want only the first pull", got)
	}
}

// TestBuildTableBounded: pulls of ever new references leave at most maxEndedBuilds ended
// builds in the table (a failing pull is remembered only until newer ones push it out).
func TestBuildTableBounded(t *testing.T) {
	ts, fb := buildServer(t, "[images]\nallowed_images = [\"127.0.0.1:5000\"]\n")
	fb.script = func(string) []string {
		return []string{`{"phase":"pull"}`, `{"phase":"failed","error":"manifest unknown"}`}
	}
	close(fb.release)
	c := ts.dial(t)
	for i := range maxEndedBuilds + 8 {
		ref := fmt.Sprintf("127.0.0.1:5000/t%d@sha256:%s", i, strings.Repeat("0f", 32))
		var bf *api.ErrBuildFailed
		if _, err := c.PullImage(context.Background(), ref, nil); !errors.As(err, &bf) {
			t.Fatalf("pull %d: %v, want a failed build", i, err)
		}
	}
	b := ts.srv.builds
	b.mu.Lock()
	n, e := len(b.byKey), len(b.ended)
	b.mu.Unlock()
	if n != maxEndedBuilds || e != maxEndedBuilds {
		t.Errorf("table holds %d builds (%d ended), want %d", n, e, maxEndedBuilds)
	}
}
