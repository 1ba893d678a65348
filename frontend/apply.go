package frontend

import (
	"context"
	"errors"
	"fmt"

	"brood.dev/brood/frontend/flush"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/review"
	"brood.dev/brood/frontend/session"
)

// FlushFunc is the signature of flush.Apply.
type FlushFunc func(ctx context.Context, sess *session.Session, m *manifest.Manifest, items []flush.Item, opts flush.Options) (flush.Result, error)

// ReviewChoice is an explicit, non-interactive review: accept every change that is not
// refused, in conflict or high-risk (All), only the named workspace-relative Paths
// (IncludeRisky: high-risk ones below named directories too), or reject everything.
type ReviewChoice struct {
	All, IncludeRisky, RejectAll bool
	Paths                        []string
}

// mode is the review record's name of the choice.
func (c ReviewChoice) mode() string {
	switch {
	case c.RejectAll:
		return "reject-all"
	case c.All:
		return "all"
	}
	return "paths"
}

// ReviewResult is a review's decisions and what applying the accepted ones did.
type ReviewResult struct {
	// Decisions has one decision per change (Skip with Note "not named" for a change a
	// PATH choice did not name).
	Decisions []review.Decision
	// Left counts named (or, with All, any) changes not accepted: refused, in conflict
	// or high-risk.
	Left int
	// Apply is the flush of the accepted changes (nil: nothing was accepted).
	Apply *ApplyResult
}

// ApplyResult is a review's flush into the workspace: the extended attributes of
// replaced files that are not kept (checked before anything is written) and what the
// flush did.
type ApplyResult struct {
	Losses []flush.MetaLoss
	Flush  flush.Result
}

// Review decides g's changes by c (review.Auto) and applies the accepted ones (Commit).
// An unknown PATH is an *InvalidError wrapping review.ErrUnknownPath; a change left out
// (Left > 0) makes the error a *RefusedError once the rest is applied.
func (w *Workflow) Review(ctx context.Context, g *Gate, c ReviewChoice) (*ReviewResult, error) {
	ds, err := review.Auto(g.Changes, review.AutoOptions{All: c.All, IncludeRisky: c.IncludeRisky, RejectAll: c.RejectAll, Paths: c.Paths})
	if errors.Is(err, review.ErrUnknownPath) {
		return nil, &InvalidError{fmt.Errorf("review session %s: %v", g.Session.ID, err)}
	}
	if err != nil {
		return nil, err
	}
	res := &ReviewResult{Decisions: ds}
	for _, d := range ds {
		if d.Verdict == review.Skip && d.Note != "not named" {
			res.Left++
		}
	}
	res.Apply, err = w.Commit(ctx, g, c.mode(), ds, true)
	if err == nil && res.Left > 0 {
		err = &RefusedError{fmt.Errorf("review session %s: %d change(s) left out (refused, conflict or high risk)", g.Session.ID, res.Left)}
	}
	return res, err
}

// Commit ends a review of g whose decisions are ds (mode names how they were made:
// "interactive", "all", "paths", "reject-all"): when confirmed it checks the metadata of
// the accepted changes and applies them (CheckMetadata, Apply without dropping metadata),
// then records the review in the session
// directory either way. The ApplyResult is nil when nothing was applied.
func (w *Workflow) Commit(ctx context.Context, g *Gate, mode string, ds []review.Decision, confirmed bool) (*ApplyResult, error) {
	items := review.Accepted(ds)
	if !confirmed || len(items) == 0 {
		_, err := review.WriteRecord(g.Session.Dir, review.NewRecord(mode, ds, false))
		return nil, err
	}
	fi := make([]flush.Item, len(items))
	for i, it := range items {
		fi[i] = flush.Item{Change: it.Change, Content: it.Content}
	}
	op := "review session " + g.Session.ID
	losses, applyErr := w.CheckMetadata(op, g, fi)
	var res *ApplyResult
	if applyErr == nil {
		res = &ApplyResult{Losses: losses}
		res.Flush, applyErr = w.Apply(ctx, op, g, fi, flush.Options{})
	}
	if _, err := review.WriteRecord(g.Session.Dir, review.NewRecord(mode, ds, applyErr == nil)); err != nil && applyErr == nil {
		applyErr = err
	}
	return res, applyErr
}

// CheckMetadata returns, before anything is written, the extended attributes of the
// files items replace that the new files will not get (flush.CheckMetadata; op names the
// command and session in errors, "apply session ID"). The flush refuses a change losing
// one it keeps (MetaLoss.Refused) unless flush.Options.DropMetadata.
func (w *Workflow) CheckMetadata(op string, g *Gate, items []flush.Item) ([]flush.MetaLoss, error) {
	losses, err := flush.CheckMetadata(g.Session, g.Manifest, items)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return losses, nil
}

// Apply flushes items of g into the workspace, journaled (op names the command and
// session in errors). The result is what the flush did even on error; the error is
// classified by FlushError.
func (w *Workflow) Apply(ctx context.Context, op string, g *Gate, items []flush.Item, opts flush.Options) (flush.Result, error) {
	apply := w.Flush
	if apply == nil {
		apply = flush.Apply
	}
	res, err := apply(ctx, g.Session, g.Manifest, items, opts)
	return res, FlushError(op, res, err)
}

// refusalErrs are the flush sentinels (frontend/flush/errors.go) that mean "a change was
// refused or in conflict" rather than "the flush failed".
var refusalErrs = []error{flush.ErrConflict, flush.ErrRefused, flush.ErrUnsafePath, flush.ErrSymlinkTarget,
	flush.ErrNoReviewedHash, flush.ErrHashMismatch, flush.ErrChangedSinceApply, flush.ErrMetadata}

// flushRefusal reports whether err wraps one of the flush's refusal sentinels.
func flushRefusal(err error) bool {
	for _, s := range refusalErrs {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// FlushError is the one classifier of a flush result for apply and review (op names
// the command and session, "apply session ID"): nil without an error; a *RefusedError
// counting the changes not applied when the flush reported per-path problems and err is
// a refusal (flushRefusal); otherwise err wrapped with op. An error without problems
// (journal lock, interrupted apply, unsafe session directory) is a failure of the whole
// flush, not a refusal of a change.
func FlushError(op string, res flush.Result, err error) error {
	if err == nil {
		return nil
	}
	if len(res.Problems) > 0 && flushRefusal(err) {
		return &RefusedError{fmt.Errorf("%s: %d change(s) not applied", op, len(res.Problems))}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Undo reverts the last apply of sess except the workspace-relative paths except
// (flush.UndoExcept). Errors wrap flush.ErrNothingToUndo, flush.ErrNotInApply (an
// except path the apply did not touch) or flush.ErrChangedSinceApply (nothing reverted;
// the result's Problems name the paths) unchanged, so the caller can tell them apart. A
// session that ran in direct mode is refused (RefuseDirect), one whose VM is running too
// (Settle: a *RefusedError naming brood session stop).
func (w *Workflow) Undo(ctx context.Context, sess *session.Session, except []string) (flush.Result, error) {
	if err := RefuseDirect("undo", sess); err != nil {
		return flush.Result{}, err
	}
	if err := w.Settle(ctx, sess, "undo", false); err != nil { // a live VM still writes S
		return flush.Result{}, err
	}
	return flush.UndoExcept(ctx, sess, except)
}
