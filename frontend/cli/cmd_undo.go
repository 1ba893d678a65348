package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/flush"
)

func newUndoCommand() *cobra.Command {
	var except []string
	c := &cobra.Command{
		Use:   "undo ID [--except PATH]...",
		Short: "Revert the last apply of a session from its journal",
		Long: `Revert the last apply of session ID that is not undone yet: files get their prior
bytes and modes back, files it created are removed, deleted files come back.

All or nothing by default: if you changed a path after the apply, nothing is reverted,
each such path is printed and the exit status is 3. To revert the rest and keep those
paths as they are now, name them with --except (repeatable; a directory covers everything
below it; relative to the current directory when it is inside the workspace). The apply
then counts as undone. An interrupted apply or undo is completed by running brood undo
again. When no apply remains in effect the session is no longer "applied". Once the files
are reverted, the branches applies created (brood/ID/<ref>) are removed too and branches
brood ff moved go back, each only while it still points where brood put it. A session
whose VM is running is refused (exit 3) before anything is reverted: stop it first.`,
		Args: idArgs("undo", true),
		RunE: func(cmd *cobra.Command, args []string) error {
			nothing, err := runUndo(cmd.Context(), cmd.OutOrStdout(), args[0], except)
			return undoRefsAfter(cmd.OutOrStdout(), args[0], nothing, err) // gitcli.go
		},
	}
	c.Flags().StringArrayVar(&except, "except", nil, "leave this path (and everything below it) as it is now; revert the rest")
	return c
}

// runUndo is the file step of `brood undo ID`: it reverts the last apply of session id
// still in effect. nothing reports that no apply was left to revert (the refs step then
// says "nothing to undo" only when it has nothing to do either).
func runUndo(ctx context.Context, out io.Writer, id string, except []string) (nothing bool, err error) {
	if ctx == nil {
		ctx = context.Background()
	}
	sess, err := openReviewable("undo", id)
	if err != nil {
		return false, err
	}
	if except, err = workspacePaths("undo --except", sess.Workspace, except); err != nil {
		return false, err
	}
	res, err := newWorkflow(nil).Undo(ctx, sess, except)
	var running *frontend.RefusedError
	if errors.As(err, &running) && res.Tx == "" { // its VM is running: nothing was done
		return false, cliErr(err)
	}
	if errors.Is(err, flush.ErrNothingToUndo) {
		return true, nil
	}
	if errors.Is(err, flush.ErrNotInApply) {
		return false, usageErr("undo: %v", err)
	}
	if errors.Is(err, flush.ErrChangedSinceApply) {
		var args []string
		for _, p := range res.Problems {
			fmt.Fprintf(out, "changed since the apply: %s\n", diff.Escape(p.Path))
			args = append(args, "--except "+argQuote(p.Path))
		}
		fmt.Fprintf(out, "to revert everything else and keep these as they are: brood undo %s %s\n", id, strings.Join(args, " "))
		return false, refusedErr(fmt.Errorf("undo session %s: %d path(s) changed since apply %s; nothing reverted (undo is all or nothing unless --except)", id, len(res.Problems), res.Tx))
	}
	fmt.Fprintf(out, "reverted %d change(s) of apply %s in %s\n", len(res.Applied), res.Tx, diff.Escape(sess.Workspace))
	for _, p := range res.Kept {
		fmt.Fprintf(out, "kept as is (--except): %s\n", diff.Escape(p))
	}
	for _, p := range res.Problems {
		fmt.Fprintf(out, "left as is %s: %s\n", diff.Escape(p.Path), diff.Escape(p.Err.Error()))
	}
	if err != nil {
		return false, fmt.Errorf("undo session %s: %w", id, err)
	}
	return false, nil
}

// argQuote quotes a workspace path for a shell command line shown to the user; a name
// with control bytes is shown escaped (diff.Escape), never raw.
func argQuote(p string) string {
	if diff.CheckPath(p) != nil {
		return diff.Escape(p)
	}
	return shellQuote([]string{p})
}
