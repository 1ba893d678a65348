package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/flush"
	"brood.dev/brood/frontend/gitreview"
)

// newFFCommand is `brood ff ID BRANCH`: the explicit step that moves one of the
// developer's branches to the agent's commits once they are applied as brood/ID/BRANCH.
func newFFCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "ff ID BRANCH",
		Short: "Fast-forward one of your branches to the agent's commits applied as brood/ID/BRANCH",
		Long: `Move BRANCH of the workspace's repository to the commit brood apply ID --all created
as brood/ID/BRANCH. Refused unless it is a fast-forward (the agent's commits descend from
BRANCH as it is now) and BRANCH is not checked out in the workspace or one of its linked
worktrees (moving a checked-out branch needs the index and the files updated, which
brood never writes: use git merge --ff-only brood/ID/BRANCH there). Journaled: brood undo
ID moves BRANCH back when it still points where brood put it. Exit status 3 when refused.`,
		Args: namedArgs(2, 2, "ID", "BRANCH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFF(cmd.OutOrStdout(), args[0], args[1])
		},
	}
}

func runFF(out io.Writer, id, name string) error {
	sess, err := openReviewable("ff", id)
	if err != nil {
		return err
	}
	full := name
	if !strings.HasPrefix(full, "refs/") {
		full = "refs/heads/" + name
	}
	applied := gitreview.BranchName(sess.ID, full)
	target, err := gitreview.RefValue(sess.Workspace, applied)
	if err != nil {
		return usageErr("ff session %s: no branch %s: apply the commits first (brood apply %s --all)",
			id, diff.Escape(strings.TrimPrefix(applied, "refs/heads/")), id)
	}
	old, err := gitreview.RefValue(sess.Workspace, full)
	if err != nil {
		return usageErr("ff session %s: %v", id, err)
	}
	if old == target {
		fmt.Fprintf(out, "%s is already at %s\n", diff.Escape(name), short(target))
		return nil
	}
	if err := flush.JournalRefUpdate(sess, flush.RefRecord{Ref: full, Value: target, Old: old}); err != nil {
		return fmt.Errorf("ff session %s: journal: %w", id, err)
	}
	if err := gitreview.FastForward(sess.Workspace, full, old, target); err != nil {
		if cerr := flush.CancelRef(sess, full, target); cerr != nil {
			err = errors.Join(err, cerr)
		}
		if errors.Is(err, gitreview.ErrCheckedOut) || errors.Is(err, gitreview.ErrNotFastForward) {
			return refusedErr(fmt.Errorf("ff session %s: %w", id, err))
		}
		return fmt.Errorf("ff session %s: %w", id, err)
	}
	fmt.Fprintf(out, "fast-forwarded %s from %s to %s (brood undo %s moves it back)\n", diff.Escape(name), short(old), short(target), id)
	return nil
}
