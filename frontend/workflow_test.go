package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/fakehelper"
	"brood.dev/brood/frontend/flush"
	"brood.dev/brood/frontend/helperclient"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/helper/api"
)

// The in-memory fake is a helper client.
var _ helperclient.Helper = (*fakehelper.Helper)(nil)

// recProgress records the progress lines of a run.
type recProgress struct {
	mu    sync.Mutex
	lines []string
}

func (p *recProgress) add(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines = append(p.lines, s)
}
func (p *recProgress) Start(step string)              { p.add("start " + step) }
func (p *recProgress) Done(result string)             { p.add("done " + result) }
func (p *recProgress) Fail(result string)             { p.add("fail " + result) }
func (p *recProgress) Printf(format string, a ...any) { p.add(fmt.Sprintf(format, a...)) }
func (p *recProgress) Warn(format string, a ...any)   { p.add("WARNING " + fmt.Sprintf(format, a...)) }
func (p *recProgress) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// countDiffs replaces computeDiff for the test with a wrapper that counts its calls.
func countDiffs(t *testing.T) *int {
	n := new(int)
	old := computeDiff
	computeDiff = func(ctx context.Context, w, s string, load func() (*manifest.Manifest, error), o diff.Options) ([]diff.Change, error) {
		*n++
		return old(ctx, w, s, load, o)
	}
	t.Cleanup(func() { computeDiff = old })
	return n
}

// rig is a fake helper whose "agent" edits README.md and adds new.txt in the snapshot,
// a workspace holding README.md, and a workflow on both.
type rig struct {
	fake *fakehelper.Helper
	wf   *Workflow
	prog *recProgress
	ws   string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	fake, err := fakehelper.New()
	if err != nil {
		t.Fatal(err)
	}
	fake.Agent = func(share, command string) {
		os.WriteFile(filepath.Join(share, "README.md"), []byte("changed by the agent\n"), 0o644)
		os.WriteFile(filepath.Join(share, "new.txt"), []byte("new\n"), 0o644)
	}
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "README.md"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := &recProgress{}
	return &rig{fake: fake, prog: prog, ws: ws, wf: &Workflow{Helper: fake, Progress: prog}}
}

func (r *rig) run(t *testing.T) (*RunResult, string) {
	t.Helper()
	var out, errb bytes.Buffer
	spec := RunSpec{Agent: "run-image", Describe: "the command", Workspace: r.ws,
		VM: api.StartVMArgs{Image: "test", TimeoutSec: 60}, Command: "exec make"}
	res, err := r.wf.Run(t.Context(), spec, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if err != nil {
		t.Fatalf("run: %v\nprogress:\n%s", err, r.prog)
	}
	return res, out.String()
}

func (r *rig) read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.ws, name))
	if errors.Is(err, os.ErrNotExist) {
		return "<absent>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRunReviewUndo drives Run -> Review -> Undo through the API against the in-memory
// helper: the agent's changes reach the workspace only through the review, the review
// uses the run's own diff (computed once: a file added to the snapshot after the run is
// not applied, and the counter stays at one), and the undo restores the workspace.
func TestRunReviewUndo(t *testing.T) {
	r := newRig(t)
	diffs := countDiffs(t)
	res, out := r.run(t)
	if out != "ran: exec make\n" {
		t.Errorf("agent output %q", out)
	}
	if !res.Stopped || res.Failed || res.Record.ExitStatus == nil || *res.Record.ExitStatus != 0 || res.Record.Outcome != api.OutcomePoweroff {
		t.Fatalf("result %+v record %+v", res, res.Record)
	}
	// The waiter's WaitVM and the run's Attach race; both come after StartVM.
	if got := r.fake.Calls(); !strings.HasPrefix(got, "hello create_session start_vm hello ") || !strings.Contains(got, "attach") ||
		!strings.Contains(got, "wait_vm") || !strings.HasSuffix(got, "destroy_session") || strings.Contains(got, "stop_vm") {
		t.Errorf("helper calls %s", got)
	}
	if res.Session.State != session.StateStopped || res.Session.HelperSession != fakehelper.SessionID {
		t.Errorf("session %+v", res.Session)
	}
	g := res.Gate
	if g == nil || len(g.Changes) != 2 || g.Manifest == nil || *diffs != 1 {
		t.Fatalf("gate %+v after %d diff(s)", g, *diffs)
	}
	if r.read(t, "README.md") != "hello\n" {
		t.Fatal("the run changed the workspace before the review")
	}
	// Changed after the run: a review that recomputed the diff would see it.
	os.WriteFile(filepath.Join(res.Session.SnapshotDir(), "late.txt"), []byte("late\n"), 0o644)

	rr, err := r.wf.Review(t.Context(), g, ReviewChoice{All: true})
	if err != nil || rr.Left != 0 || rr.Apply == nil || len(rr.Apply.Flush.Applied) != 2 || rr.Apply.Flush.Tx == "" {
		t.Fatalf("review: %v %+v", err, rr)
	}
	if *diffs != 1 {
		t.Errorf("the run and its review computed the diff %d times, want once", *diffs)
	}
	if r.read(t, "README.md") != "changed by the agent\n" || r.read(t, "new.txt") != "new\n" || r.read(t, "late.txt") != "<absent>" {
		t.Errorf("after the review: README %q new %q late %q", r.read(t, "README.md"), r.read(t, "new.txt"), r.read(t, "late.txt"))
	}

	ur, err := r.wf.Undo(t.Context(), res.Session, nil)
	if err != nil || len(ur.Applied) != 2 {
		t.Fatalf("undo: %v %+v", err, ur)
	}
	if r.read(t, "README.md") != "hello\n" || r.read(t, "new.txt") != "<absent>" {
		t.Errorf("after the undo: README %q new %q", r.read(t, "README.md"), r.read(t, "new.txt"))
	}
	if _, err := r.wf.Undo(t.Context(), res.Session, nil); !errors.Is(err, flush.ErrNothingToUndo) {
		t.Errorf("second undo: %v, want ErrNothingToUndo", err)
	}
}

// TestOpenGateApply: a kept session diffed (Diff) and opened again (OpenGate), each
// computing its own diff, then applied path by path through Apply; a refused flush is a
// *RefusedError.
func TestOpenGateApply(t *testing.T) {
	r := newRig(t)
	diffs := countDiffs(t)
	res, _ := r.run(t)
	if d, err := r.wf.Diff(t.Context(), res.Session); err != nil || len(d.Changes) != 2 || d.Manifest == nil {
		t.Fatalf("diff: %v %+v", err, d)
	}
	g, err := r.wf.OpenGate(t.Context(), "apply", res.Session)
	if err != nil || len(g.Changes) != 2 || *diffs != 3 || g.Recovered.Tx != "" { // run, Diff, OpenGate
		t.Fatalf("gate: %v %+v (%d diffs)", err, g, *diffs)
	}
	var items []flush.Item
	for _, c := range g.Changes {
		if c.Path == "new.txt" {
			items = append(items, flush.Item{Change: c})
		}
	}
	fr, err := r.wf.Apply(t.Context(), "apply session "+res.Session.ID, g, items, flush.Options{})
	if err != nil || len(fr.Applied) != 1 || r.read(t, "new.txt") != "new\n" || r.read(t, "README.md") != "hello\n" {
		t.Fatalf("apply new.txt: %v %+v", err, fr)
	}

	r.wf.Flush = func(context.Context, *session.Session, *manifest.Manifest, []flush.Item, flush.Options) (flush.Result, error) {
		perr := fmt.Errorf("apply README.md: %w", flush.ErrConflict)
		return flush.Result{Problems: []flush.Problem{{Path: "README.md", Err: perr}}}, perr
	}
	_, err = r.wf.Apply(t.Context(), "apply session "+res.Session.ID, g, items, flush.Options{})
	var refused *RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "1 change(s) not applied") {
		t.Errorf("refused flush: %v, want a *RefusedError", err)
	}
}

// TestRunStopsLingeringGuest: a guest that does not power off after the agent is stopped
// through the helper after PoweroffWait; the run still ends normally.
func TestRunStopsLingeringGuest(t *testing.T) {
	r := newRig(t)
	r.fake.Lingers = true
	r.wf.PoweroffWait = 1 // the waiter cannot see a lingering guest gone: ask at once
	res, _ := r.run(t)
	if !strings.Contains(r.fake.Calls(), "stop_vm") || res.Record.Outcome != api.OutcomeStopped || res.Gate == nil {
		t.Errorf("calls %s outcome %q gate %v", r.fake.Calls(), res.Record.Outcome, res.Gate)
	}
}

// TestRunStartRefused: StartVM's error ends the run with the hint and the snapshot kept
// (state ready); the helper session is destroyed again.
func TestRunStartRefused(t *testing.T) {
	r := newRig(t)
	r.fake.StartErr = &api.Error{Code: api.CodeUnavailable, Message: "image \"test\" is not built"}
	spec := RunSpec{Agent: "run-image", Describe: "the command", Workspace: r.ws, VM: api.StartVMArgs{Image: "test"},
		StartHint: func(err error, caps api.Capabilities) string { return "\nhint: build it" }}
	res, err := r.wf.Run(t.Context(), spec, Stdio{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}})
	if err == nil || !strings.Contains(err.Error(), "start VM: image \"test\" is not built\nhint: build it") {
		t.Fatalf("error %v", err)
	}
	if res == nil || res.Stopped || res.Session.State != session.StateReady || !strings.HasSuffix(r.fake.Calls(), "start_vm destroy_session") {
		t.Errorf("result %+v calls %s", res, r.fake.Calls())
	}
}

// TestSettleAndStop: a session marked running whose VM the helper no longer lists is
// only marked stopped; one the helper lists as running refuses a review and a discard
// (RefusedError) until Stop stops it; then Discard removes it.
func TestSettleAndStop(t *testing.T) {
	r := newRig(t)
	res, _ := r.run(t)
	s := res.Session
	if err := s.SetState(session.StateRunning); err != nil {
		t.Fatal(err)
	}
	if err := r.wf.Settle(t.Context(), s, "review", false); err != nil || s.State != session.StateStopped {
		t.Fatalf("settle a gone VM: %v, state %s", err, s.State)
	}
	s.SetState(session.StateRunning)
	r.fake.Sessions = []api.Session{{ID: fakehelper.SessionID, State: api.SessionRunning}}
	var refused *RefusedError
	if _, err := r.wf.OpenGate(t.Context(), "review", s); !errors.As(err, &refused) {
		t.Fatalf("gate of a running VM: %v, want a *RefusedError", err)
	}
	if _, err := r.wf.Discard(t.Context(), s, false); !errors.As(err, &refused) {
		t.Fatalf("discard of a running VM without force: %v, want a *RefusedError", err)
	}
	was, err := r.wf.Stop(t.Context(), s)
	if !was || err != nil || s.State != session.StateStopped || !strings.HasSuffix(r.fake.Calls(), "stop_vm") {
		t.Errorf("stop: %v %v state %s calls %s", was, err, s.State, r.fake.Calls())
	}
	if stopped, err := r.wf.Discard(t.Context(), s, false); stopped || err != nil {
		t.Fatalf("discard a stopped session: %v %v", stopped, err)
	}
	if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the session directory is still there: %v", err)
	}
}
