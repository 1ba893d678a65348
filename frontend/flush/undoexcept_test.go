package flush

import (
	"errors"
	"slices"
	"testing"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/session"
)

// TestUndoExcept: undo stays all or nothing by default; UndoExcept reverts every other
// path of the apply, keeps the named ones (and what lies below them) as they are, and
// refuses a path the apply did not change. After the undo the session is no longer
// applied.
func TestUndoExcept(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	put(t, f.S, "a.txt", "agent a\n", 0o644)
	put(t, f.S, "b.txt", "agent b\n", 0o644)
	put(t, f.S, "new/c.txt", "agent c\n", 0o644)
	if _, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindModified, "a.txt"), f.change(diff.KindModified, "b.txt"),
		f.change(diff.KindAdded, "new/c.txt")), Options{}); err != nil {
		t.Fatal(err)
	}
	if f.sess.State != session.StateApplied {
		t.Fatalf("state %s after apply", f.sess.State)
	}
	put(t, f.W, "a.txt", "mine after apply\n", 0o644)
	put(t, f.W, "new/c.txt", "mine too\n", 0o644)
	res, err := Undo(ctx, f.sess)
	if !errors.Is(err, ErrChangedSinceApply) || len(res.Problems) != 2 {
		t.Fatalf("Undo: %v %+v, want 2 changed paths", err, res.Problems)
	}
	if read(t, f.W, "b.txt") != "agent b\n" {
		t.Fatal("the refused undo reverted b.txt")
	}
	if _, err := UndoExcept(ctx, f.sess, []string{"a.txt", "nope.txt"}); !errors.Is(err, ErrNotInApply) {
		t.Fatalf("UndoExcept nope.txt: %v, want ErrNotInApply", err)
	}
	if read(t, f.W, "b.txt") != "agent b\n" {
		t.Fatal("a refused UndoExcept reverted b.txt")
	}
	res, err = UndoExcept(ctx, f.sess, []string{"a.txt", "new"})
	if err != nil {
		t.Fatalf("UndoExcept: %v %+v", err, res.Problems)
	}
	if !slices.Equal(res.Applied, []string{"b.txt"}) || !slices.Equal(res.Kept, []string{"a.txt", "new", "new/c.txt"}) {
		t.Errorf("reverted %q kept %q", res.Applied, res.Kept)
	}
	if read(t, f.W, "a.txt") != "mine after apply\n" || read(t, f.W, "b.txt") != "b\n" || read(t, f.W, "new/c.txt") != "mine too\n" {
		t.Error("workspace after UndoExcept")
	}
	if f.sess.State != session.StateReady {
		t.Errorf("state %s after undoing the only apply, want ready", f.sess.State)
	}
	if _, err := Undo(ctx, f.sess); !errors.Is(err, ErrNothingToUndo) {
		t.Errorf("second undo: %v", err)
	}
}
