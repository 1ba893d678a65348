package cli

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"

	"brood.dev/brood/frontend/flush"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/session"
)

// flushKinds is every sentinel of frontend/flush/errors.go with the exit status a flush
// result carrying it (as a per-path problem) must give.
var flushKinds = map[string]struct {
	err  error
	code int
}{
	"ErrUnsafePath":        {flush.ErrUnsafePath, ExitRefused},
	"ErrSymlinkTarget":     {flush.ErrSymlinkTarget, ExitRefused},
	"ErrRefused":           {flush.ErrRefused, ExitRefused},
	"ErrConflict":          {flush.ErrConflict, ExitRefused},
	"ErrNoReviewedHash":    {flush.ErrNoReviewedHash, ExitRefused},
	"ErrHashMismatch":      {flush.ErrHashMismatch, ExitRefused},
	"ErrMetadata":          {flush.ErrMetadata, ExitRefused},
	"ErrChangedSinceApply": {flush.ErrChangedSinceApply, ExitRefused},
	"ErrNotInApply":        {flush.ErrNotInApply, ExitError},
	"ErrNothingToUndo":     {flush.ErrNothingToUndo, ExitError},
	"ErrInterrupted":       {flush.ErrInterrupted, ExitError},
	"ErrBusy":              {flush.ErrBusy, ExitError},
	"ErrJournal":           {flush.ErrJournal, ExitError},
}

// TestFlushKindsCoverErrorsGo fails when frontend/flush/errors.go gains a sentinel that
// flushKinds does not classify.
func TestFlushKindsCoverErrorsGo(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../flush/errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			for _, n := range s.(*ast.ValueSpec).Names {
				names = append(names, n.Name)
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("no sentinels found in flush/errors.go")
	}
	for _, n := range names {
		if _, ok := flushKinds[n]; !ok {
			t.Errorf("flush.%s has no exit status in flushKinds", n)
		}
	}
	if len(names) != len(flushKinds) {
		t.Errorf("errors.go declares %d sentinels, flushKinds classifies %d", len(names), len(flushKinds))
	}
}

// exitCodeOf is the status Main gives err.
func exitCodeOf(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ee):
		return ee.code
	default:
		return ExitError
	}
}

// TestFlushResultErr: the classifier itself, per kind, with and without per-path problems
// (an error with no problem is a failure of the whole flush).
func TestFlushResultErr(t *testing.T) {
	if err := flushResultErr("apply session x", flush.Result{}, nil); err != nil {
		t.Errorf("no error: %v", err)
	}
	for name, k := range flushKinds {
		perr := fmt.Errorf("apply a.txt: %w", k.err)
		res := flush.Result{Problems: []flush.Problem{{Path: "a.txt", Err: perr}}}
		if got := exitCodeOf(flushResultErr("apply session x", res, perr)); got != k.code {
			t.Errorf("%s with a problem: exit %d, want %d", name, got, k.code)
		}
		err := flushResultErr("apply session x", flush.Result{}, perr)
		if got := exitCodeOf(err); got != ExitError || !errors.Is(err, k.err) {
			t.Errorf("%s without problems: exit %d (%v), want %d wrapping it", name, got, err, ExitError)
		}
	}
}

// TestApplyAndReviewExitAlike runs the real `brood apply` and `brood review` commands on
// one session with the flush replaced by a result carrying each flush error kind, and
// requires both to exit with the kind's status and to print the problem.
func TestApplyAndReviewExitAlike(t *testing.T) {
	sess := reviewSession(t, map[string]string{"a.txt": "a\n"}, map[string]string{"a.txt": "A\n"})
	old := flushApply
	t.Cleanup(func() { flushApply = old })
	names := make([]string, 0, len(flushKinds))
	for n := range flushKinds {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		k := flushKinds[name]
		calls := 0
		flushApply = func(_ context.Context, _ *session.Session, _ *manifest.Manifest, items []flush.Item, _ flush.Options) (flush.Result, error) {
			calls++
			if len(items) != 1 || items[0].Change.Path != "a.txt" {
				t.Errorf("%s: flushed %+v, want a.txt", name, items)
			}
			perr := fmt.Errorf("apply a.txt: %w", k.err)
			return flush.Result{Problems: []flush.Problem{{Path: "a.txt", Err: perr}}}, perr
		}
		aout, acode := applyCLI(t, nil, "apply", sess.ID, "a.txt", "--yes")
		rout, _, rcode := reviewCmd(t, sess.ID, "a.txt")
		if acode != rcode || acode != k.code || calls != 2 {
			t.Errorf("%s: apply exit %d, review exit %d, want both %d (%d flushes)\napply:\n%s\nreview:\n%s", name, acode, rcode, k.code, calls, aout, rout)
		}
		for _, out := range []string{aout, rout} {
			if !strings.Contains(out, "not applied a.txt: apply a.txt: "+k.err.Error()) {
				t.Errorf("%s: the problem is not printed:\n%s", name, out)
			}
		}
	}
}

// TestApplyAndReviewRefuseMetadataAlike: a real flush (nothing replaced) refuses a change
// that would lose an extended attribute; `brood apply PATH --yes` and `brood review PATH`
// exit with the same status (ExitRefused) and leave W unchanged.
func TestApplyAndReviewRefuseMetadataAlike(t *testing.T) {
	sess := metadataSession(t)
	aout, acode := applyCLI(t, nil, "apply", sess.ID, "a.txt", "--yes")
	rout, _, rcode := reviewCmd(t, sess.ID, "a.txt")
	if acode != ExitRefused || rcode != acode {
		t.Fatalf("apply exit %d, review exit %d, want both %d\napply:\n%s\nreview:\n%s", acode, rcode, ExitRefused, aout, rout)
	}
	for _, out := range []string{aout, rout} {
		if !strings.Contains(out, "not applied a.txt") || !strings.Contains(out, flush.ErrMetadata.Error()) {
			t.Errorf("output does not name the refused change:\n%s", out)
		}
	}
	if got := wFile(t, sess, "a.txt"); got != "a\n" {
		t.Errorf("a.txt = %q after refused flushes", got)
	}
}
