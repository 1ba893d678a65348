package frontend

import (
	"context"
	"errors"
	"fmt"

	"brood.dev/brood/frontend/flush"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/session"
)

// flushApply is flush.Apply; tests replace it to feed both commands one result.
var flushApply = flush.Apply

// refusalErrs are the flush sentinels (frontend/flush/errors.go) that mean "a change was
// refused or in conflict" rather than "the flush failed": a result whose problems wrap one
// of them exits ExitRefused (3), any other error exits ExitError (1).
var refusalErrs = []error{flush.ErrConflict, flush.ErrRefused, flush.ErrUnsafePath, flush.ErrSymlinkTarget,
	flush.ErrNoReviewedHash, flush.ErrHashMismatch, flush.ErrChangedSinceApply, flush.ErrMetadata}

// flushRefusal reports whether err wraps one of refusalErrs.
func flushRefusal(err error) bool {
	for _, s := range refusalErrs {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// flushResultErr is the one classifier of a flush result for `brood apply` and `brood
// review` (op names the command and session, "apply session ID"): nil without an error;
// an ExitRefused error counting the changes not applied when the flush reported per-path
// problems and err is a refusal (flushRefusal); otherwise err wrapped with op (ExitError).
// An error without problems (journal lock, interrupted apply, unsafe session directory)
// is a failure of the whole flush, not a refusal of a change.
func flushResultErr(op string, res flush.Result, err error) error {
	if err == nil {
		return nil
	}
	if len(res.Problems) > 0 && flushRefusal(err) {
		return refusedErr(fmt.Errorf("%s: %d change(s) not applied", op, len(res.Problems)))
	}
	return fmt.Errorf("%s: %w", op, err)
}

// applyFlush runs the flush of items for op and classifies its error (flushResultErr).
func applyFlush(ctx context.Context, op string, sess *session.Session, m *manifest.Manifest, items []flush.Item, opts flush.Options) (flush.Result, error) {
	res, err := flushApply(ctx, sess, m, items, opts)
	return res, flushResultErr(op, res, err)
}
