package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/flush"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/review"
	"brood.dev/brood/frontend/session"
)

func init() { commands = append(commands, newReviewCommand) }

// reviewFlags are the choices of `brood review`.
type reviewFlags struct {
	all, includeRisky, rejectAll bool
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
conflict or high-risk, or could not be applied.`,
		Args: idArgs("review", false),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := runReview(cmd, args[0], args[1:], f)
			return reviewCommitsAfter(cmd, args[0], f.all, f.rejectAll, args[1:], err) // gitcli.go
		},
	}
	c.Flags().BoolVar(&f.all, "all", false, "accept every change that is not refused, in conflict or high-risk, without prompts")
	c.Flags().BoolVar(&f.includeRisky, "include-risky", false, "with PATH: accept high-risk changes below named directories too")
	c.Flags().BoolVar(&f.rejectAll, "reject-all", false, "reject every change (recorded) and change nothing")
	return c
}

func runReview(cmd *cobra.Command, id string, paths []string, f reviewFlags) error {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	out := cmd.OutOrStdout()
	in, inFile := cmd.InOrStdin().(*os.File)
	outFile, outIsFile := out.(*os.File)
	tty := inFile && outIsFile && review.IsTerminal(in) && review.IsTerminal(outFile)
	switch {
	case f.rejectAll && (f.all || len(paths) > 0 || f.includeRisky):
		return usageErr("review: --reject-all cannot be combined with --all, --include-risky or PATH")
	case f.includeRisky && f.all:
		return usageErr("review: --all never accepts high-risk changes: name each one as PATH")
	case f.includeRisky && len(paths) == 0:
		return usageErr("review: --include-risky needs PATH")
	case !tty && !f.all && !f.rejectAll && len(paths) == 0:
		return usageErr("review: not a terminal: choose with --all, --reject-all or PATH... (see brood review --help)")
	}

	sess, m, changes, paths, err := gateChanges(ctx, "review", id, paths, out)
	if err != nil {
		return err
	}
	if len(changes) == 0 {
		fmt.Fprintln(out, "no changes")
		return nil
	}
	if tty && !f.all && !f.rejectAll {
		return reviewInteractive(ctx, sess, m, changes, paths, in, outFile)
	}
	return reviewAuto(ctx, out, sess, m, changes, paths, f)
}

// reviewAuto applies the explicit non-interactive choice and prints one line per change.
func reviewAuto(ctx context.Context, out io.Writer, sess *session.Session, m *manifest.Manifest, changes []diff.Change, paths []string, f reviewFlags) error {
	ds, err := review.Auto(changes, review.AutoOptions{All: f.all, IncludeRisky: f.includeRisky, RejectAll: f.rejectAll, Paths: paths})
	if errors.Is(err, review.ErrUnknownPath) {
		return usageErr("review session %s: %v", sess.ID, err)
	}
	if err != nil {
		return err
	}
	mode := "paths"
	switch {
	case f.rejectAll:
		mode = "reject-all"
	case f.all:
		mode = "all"
	}
	var b strings.Builder
	left := 0 // named or --all changes not accepted: refused, conflict, high risk
	for _, d := range ds {
		if d.Verdict == review.Skip && d.Note == "not named" {
			continue
		}
		if d.Verdict == review.Skip {
			left++
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
	if _, err := io.WriteString(out, b.String()); err != nil {
		return err
	}
	items := review.Accepted(ds)
	if len(items) == 0 {
		if _, err := review.WriteRecord(sess.Dir, review.NewRecord(mode, ds, false)); err != nil {
			return err
		}
		fmt.Fprintf(out, "nothing applied; the workspace is unchanged (%d rejected, %d left out)\n",
			review.Count(ds, review.Reject), left)
		if left > 0 {
			return refusedErr(fmt.Errorf("review session %s: %d change(s) left out (refused, conflict or high risk)", sess.ID, left))
		}
		return nil
	}
	applyErr := applyItems(ctx, out, sess, m, items)
	if _, err := review.WriteRecord(sess.Dir, review.NewRecord(mode, ds, applyErr == nil)); err != nil && applyErr == nil {
		applyErr = err
	}
	if applyErr != nil {
		return applyErr
	}
	if left > 0 {
		return refusedErr(fmt.Errorf("review session %s: %d change(s) left out (refused, conflict or high risk)", sess.ID, left))
	}
	return nil
}

// reviewInteractive runs the terminal review, then applies what was accepted and confirmed.
func reviewInteractive(ctx context.Context, sess *session.Session, m *manifest.Manifest, changes []diff.Change, paths []string, in, out *os.File) error {
	if len(paths) > 0 {
		var err error
		if changes, err = review.Filter(changes, paths); err != nil {
			return usageErr("review session %s: %v", sess.ID, err)
		}
	}
	notes, err := metaNotes(sess, m, changes)
	if err != nil {
		return fmt.Errorf("review session %s: %w", sess.ID, err)
	}
	term, err := review.OpenTerminal(in, out)
	if err != nil {
		return err
	}
	s := &review.Session{
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
	if !ok {
		_, err := review.WriteRecord(sess.Dir, review.NewRecord("interactive", ds, false))
		return err
	}
	applyErr := applyItems(ctx, out, sess, m, review.Accepted(ds))
	if _, err := review.WriteRecord(sess.Dir, review.NewRecord("interactive", ds, applyErr == nil)); err != nil && applyErr == nil {
		applyErr = err
	}
	return applyErr
}

// applyItems flushes items into the workspace and reports what happened: first the
// extended attributes of replaced files that will not be kept (a change that would lose
// one the flush keeps is not applied: review has no --drop-metadata), then the paths the
// flush left alone with their reason (exit 3 when they were refused or in conflict).
func applyItems(ctx context.Context, out io.Writer, sess *session.Session, m *manifest.Manifest, items []review.Item) error {
	fi := make([]flush.Item, len(items))
	for i, it := range items {
		fi[i] = flush.Item{Change: it.Change, Content: it.Content}
	}
	losses, err := flush.CheckMetadata(sess, m, fi)
	if err != nil {
		return fmt.Errorf("review session %s: %w", sess.ID, err)
	}
	printMetaLosses(out, losses, false, "not applied by review (brood apply "+sess.ID+" PATH --drop-metadata applies it)")
	res, err := applyFlush(ctx, "review session "+sess.ID, sess, m, fi, flush.Options{})
	fmt.Fprintf(out, "applied %d change(s) to %s", len(res.Applied), review.EscapeName(sess.Workspace))
	if res.Tx != "" {
		fmt.Fprintf(out, " (journal %s; brood undo %s reverts it)", res.Tx, sess.ID)
	}
	fmt.Fprintln(out)
	for _, p := range res.Problems {
		fmt.Fprintf(out, "not applied %s: %s\n", review.EscapeName(p.Path), review.EscapeLine(p.Err.Error()))
	}
	return err
}
