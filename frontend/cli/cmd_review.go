package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/review"
	"brood.dev/brood/frontend/session"
)

// reviewFlags are the choices of `brood review`.
type reviewFlags struct {
	all, includeRisky, rejectAll bool
	branch                       string // --branch (gitcli.go)
}

func newReviewCommand() *cobra.Command {
	var f reviewFlags
	c := &cobra.Command{
		Use:   "review ID [PATH...]",
		Short: "Review the agent's changes and apply the accepted ones to the workspace",
		Long: `Review every change the agent made in the snapshot of session ID and apply the
accepted ones to the workspace (journaled: brood undo ID reverts them).

On a terminal each change is shown with its kind, escaped path, risk flag and reason and a
colored diff; keys: a accept, r reject, s skip, h hunk-select (y/n per hunk), v view all,
q quit, ? help. Conflicts (you changed the file too) offer a three-way merge (m) or keep
yours (w) / take the agent's (t). High-risk changes need a second confirmation; refused
changes cannot be accepted. A summary and a confirmation come before anything is written.

Without a terminal, choose explicitly: --all (every change that is not refused, in
conflict or high-risk), PATH... (only these paths or everything below these directories;
relative to the current directory when it is inside the workspace),
or --reject-all (record a rejection of everything and change nothing). --all never takes
a high-risk change; PATH takes one when its path is named exactly, or below a named
directory with --include-risky; a refused change or a conflict never is taken. Exit status 3 when a change was left out because it is refused, in
conflict or high-risk, or could not be applied.

The agent's commits are created as branches brood/ID/<ref> with --all or when accepted
interactively; --branch NAME names them NAME instead (NAME/<ref> for each ref when
several changed), refused before anything is written when NAME is not a valid branch
name or exists (docs/git-review.md).`,
		Args: idArgs("review", false),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := runReview(cmd, args[0], args[1:], f)
			return reviewCommitsAfter(cmd, args[0], f.branch, f.all, f.rejectAll, args[1:], err) // gitcli.go
		},
	}
	c.Flags().BoolVar(&f.all, "all", false, "accept every change that is not refused, in conflict or high-risk, without prompts")
	c.Flags().BoolVar(&f.includeRisky, "include-risky", false, "with PATH: accept high-risk changes below named directories too")
	c.Flags().StringVar(&f.branch, "branch", "", "create the accepted commits as branch NAME (NAME/<ref> for each ref when several changed) instead of brood/ID/<ref>")
	c.Flags().BoolVar(&f.rejectAll, "reject-all", false, "reject every change (recorded) and change nothing")
	return c
}

func runReview(cmd *cobra.Command, id string, paths []string, f reviewFlags) error {
	ctx := cmdContext(cmd)
	out := cmd.OutOrStdout()
	in, inFile := cmd.InOrStdin().(*os.File)
	outFile, outIsFile := out.(*os.File)
	tty := inFile && outIsFile && review.IsTerminal(in) && review.IsTerminal(outFile)
	sess, err := openReviewable("review", id)
	if err != nil {
		return err // a direct session, before the flags are judged
	}
	switch {
	case f.rejectAll && (f.all || len(paths) > 0 || f.includeRisky):
		return usageErr("review: --reject-all cannot be combined with --all, --include-risky or PATH")
	case f.includeRisky && f.all:
		return usageErr("review: --all never accepts high-risk changes: name each one as PATH")
	case f.includeRisky && len(paths) == 0:
		return usageErr("review: --include-risky needs PATH")
	case !tty && !f.all && !f.rejectAll && len(paths) == 0:
		return usageErr("review: not a terminal: choose with --all, --reject-all or PATH... (see brood review --help)")
	case f.branch != "" && (f.rejectAll || len(paths) > 0):
		return usageErr("review: --branch needs --all or the interactive review of everything (commits are not applied with --reject-all or PATH)")
	}
	if err := checkBranchFlag("review", sess, f.branch); err != nil { // gitcli.go
		return err
	}

	wf := newWorkflow(nil)
	g, paths, err := openGate(ctx, wf, "review", id, paths, out)
	if err != nil {
		return err
	}
	if len(g.Changes) == 0 {
		gr := gitReviewOf(g.Session) // gitcli.go: with commits, the commits step follows
		commits := hasCommits(gr)
		gr.Close()
		if !commits {
			fmt.Fprintln(out, "no changes")
		}
		return nil
	}
	if tty && !f.all && !f.rejectAll {
		return reviewInteractive(ctx, wf, g, paths, in, outFile)
	}
	return reviewAuto(ctx, out, wf, g, frontend.ReviewChoice{All: f.all, IncludeRisky: f.includeRisky, RejectAll: f.rejectAll, Paths: paths})
}

// reviewAuto applies the explicit non-interactive choice and prints one line per change,
// then what the apply did.
func reviewAuto(ctx context.Context, out io.Writer, wf *frontend.Workflow, g *frontend.Gate, c frontend.ReviewChoice) error {
	res, err := wf.Review(ctx, g, c)
	if res == nil {
		return cliErr(err)
	}
	var b strings.Builder
	for _, d := range res.Decisions {
		if d.Verdict == review.Skip && d.Note == "not named" {
			continue
		}
		fmt.Fprintf(&b, "%-6s %-9s %s", d.Verdict, d.Change.Kind, review.EscapeName(d.Change.Path))
		if d.Verdict != review.Accept {
			fmt.Fprintf(&b, ": %s", review.EscapeLine(d.Note))
		}
		if n := diff.ModeNote(d.Change); n != "" {
			fmt.Fprintf(&b, " [%s]", n)
		}
		b.WriteByte('\n')
	}
	if _, werr := io.WriteString(out, b.String()); werr != nil {
		return werr
	}
	if len(review.Accepted(res.Decisions)) == 0 {
		var refused *frontend.RefusedError
		if err == nil || errors.As(err, &refused) {
			fmt.Fprintf(out, "nothing applied; the workspace is unchanged (%d rejected, %d left out)\n",
				review.Count(res.Decisions, review.Reject), res.Left)
		}
		return cliErr(err)
	}
	printApplied(out, g.Session, res.Apply)
	return cliErr(err)
}

// reviewInteractive runs the terminal review of g (only paths, when named), then applies
// what was accepted and confirmed.
func reviewInteractive(ctx context.Context, wf *frontend.Workflow, g *frontend.Gate, paths []string, in, out *os.File) error {
	sess, changes := g.Session, g.Changes
	if len(paths) > 0 {
		var err error
		if changes, err = review.Filter(changes, paths); err != nil {
			return usageErr("review session %s: %v", sess.ID, err)
		}
	}
	notes, err := metaNotes(sess, g.Manifest, changes)
	if err != nil {
		return fmt.Errorf("review session %s: %w", sess.ID, err)
	}
	term, err := review.OpenTerminal(in, out)
	if err != nil {
		return err
	}
	s := &review.Interactive{
		Changes: changes, In: term, Out: term.Out, Color: review.ColorOK(out), Workspace: sess.Workspace, Notes: notes,
		Trees: review.Trees{W: sess.Workspace, S: sess.SnapshotDir(), Base: sess.BaseDir()},
	}
	ds, ok, err := s.Run()
	if rerr := term.Restore(); err == nil {
		err = rerr
	}
	if errors.Is(err, review.ErrAborted) {
		return fmt.Errorf("review session %s: %w; nothing applied", sess.ID, err)
	}
	if err != nil {
		return err
	}
	res, err := wf.Commit(ctx, g, "interactive", ds, ok)
	if ok {
		printApplied(out, sess, res)
	}
	return cliErr(err)
}

// printApplied reports a review's flush: first the extended attributes of replaced files
// that will not be kept (a change that would lose one the flush keeps is not applied:
// review has no --drop-metadata), then what was applied and the paths the flush left
// alone with their reason. A nil res (the metadata check failed) prints nothing.
func printApplied(out io.Writer, sess *session.Session, res *frontend.ApplyResult) {
	if res == nil {
		return
	}
	printMetaLosses(out, res.Losses, false, "not applied by review (brood apply "+sess.ID+" PATH --drop-metadata applies it)")
	printFlushResult(out, res.Flush, sess.Workspace, sess.ID) // cmd_apply.go
}
