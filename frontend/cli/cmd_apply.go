package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/flush"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/session"
)

type applyFlags struct {
	all, includeRisky, yes, dropMetadata bool
	branch                               string // --branch (gitcli.go)
}

func newApplyCommand() *cobra.Command {
	var f applyFlags
	c := &cobra.Command{
		Use:   "apply ID (--all | PATH...)",
		Short: "Apply the agent's changes to the workspace without the interactive review",
		Long: `Apply changes of session ID to the workspace, journaled (brood undo ID reverts them).

--all selects every change except refused ones, conflicts (you changed the path too; use
brood review to merge) and high-risk ones (files a host tool runs or reads as commands:
start-up files, git attributes and configs, CI, hooks, editor tasks, package-manager
configs, build entry points, a mode giving group or others access the workspace's file
did not have; brood diff prints why), which --all never applies. A new directory holding
only changes left out is left out too. PATH...
selects these paths or everything below these directories (relative to the current
directory when it is inside the workspace, else to the workspace root); a high-risk change
is applied when its path is named exactly, or below a named directory with
--include-risky, and on a terminal after a second confirmation; a refused change or a
conflict is never applied.

Each file is written to a temp file next to its target, fsync'd and verified against the
reviewed content digest, then renamed into place only if the workspace still holds what it held
at snapshot time. An apply interrupted earlier is rolled back first. Holes of sparse files
stay holes. A replaced file's extended attributes and ACL are kept; one that cannot be set
on the new file is printed before anything is written and the change is not applied,
unless --drop-metadata (docs/flush-metadata.md).

With --all, each git ref the agent moved or created (brood diff's commits section) is
also created as branch brood/ID/<ref> in the workspace's repository, or with --branch
NAME as branch NAME (NAME/<ref> for each ref when several changed; refused before
anything is written when NAME is not a valid branch name or exists); nothing else in
.git changes (docs/git-review.md).

On a terminal the selection is shown and confirmed; otherwise add --yes. Exit status 3
when a change was left out (refused, conflict, high-risk) or could not be applied; each
such path is printed with the reason.`,
		Args: idArgs("apply", false),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := runApply(cmd, args[0], args[1:], f)
			return applyCommitsAfter(cmd.InOrStdin(), cmd.OutOrStdout(), args[0], f.branch, f.all, !f.yes, err) // gitcli.go
		},
	}
	c.Flags().BoolVar(&f.all, "all", false, "apply every change that is not refused, in conflict or high-risk")
	c.Flags().BoolVar(&f.includeRisky, "include-risky", false, "with PATH: high-risk changes below named directories too")
	c.Flags().BoolVarP(&f.yes, "yes", "y", false, "do not ask for confirmation (required without a terminal)")
	c.Flags().StringVar(&f.branch, "branch", "", "with --all: create the agent's commits as branch NAME (NAME/<ref> for each ref when several changed) instead of brood/ID/<ref>")
	c.Flags().BoolVar(&f.dropMetadata, "drop-metadata", false, "apply a change even when an extended attribute or ACL of the replaced file cannot be kept")
	return c
}

// check refuses a combination of apply's flags and PATH arguments that says nothing
// or two things (usage errors); tty: stdin is a terminal, so a confirmation can be asked.
func (f applyFlags) check(paths []string, tty bool) error {
	switch {
	case f.all && len(paths) > 0:
		return usageErr("apply: choose either --all or PATH..., not both")
	case !f.all && len(paths) == 0:
		return usageErr("apply: say what to apply: --all or PATH... (see brood apply --help)")
	case f.all && f.includeRisky:
		return usageErr("apply: --all never applies high-risk changes: name each one as PATH")
	case !f.yes && !tty:
		return usageErr("apply: stdin is not a terminal, so nothing can be confirmed: add --yes to apply without confirmation")
	case f.branch != "" && !f.all:
		return usageErr("apply: --branch needs --all (the agent's commits are applied only with --all)")
	}
	return nil
}

func runApply(cmd *cobra.Command, id string, paths []string, f applyFlags) error {
	ctx := cmdContext(cmd)
	out := cmd.OutOrStdout()
	in, inFile := cmd.InOrStdin().(*os.File)
	tty := inFile && term.IsTerminal(int(in.Fd()))
	sess, err := openReviewable("apply", id)
	if err != nil {
		return err // a direct session, before the flags are judged
	}
	if err := f.check(paths, tty); err != nil {
		return err
	}
	if err := checkBranchFlag("apply", sess, f.branch); err != nil { // gitcli.go
		return err
	}
	wf := newWorkflow(nil)
	g, paths, err := openGate(ctx, wf, "apply", id, paths, out)
	if err != nil {
		return err
	}
	sess, changes := g.Session, g.Changes
	sel, err := frontend.SelectForApply(changes, f.all, f.includeRisky, paths)
	if err != nil {
		return usageErr("apply session %s: %v", id, err)
	}
	notes := map[string]string{}
	addLinkTargets(notes, sess, sel.Apply)
	printSelection(out, sel, notes)
	left := sel.Left()
	leftErr := func() error {
		if left == 0 {
			return nil
		}
		return refusedErr(fmt.Errorf("apply session %s: %d change(s) left out (refused, conflict or high risk)", id, left))
	}
	if len(sel.Apply) == 0 {
		fmt.Fprintln(out, "nothing to apply; the workspace is unchanged")
		return leftErr()
	}
	items := make([]flush.Item, len(sel.Apply))
	for i, c := range sel.Apply {
		items[i] = flush.Item{Change: c}
	}
	op := "apply session " + id
	losses, err := wf.CheckMetadata(op, g, items)
	if err != nil {
		return err
	}
	printMetaLosses(out, losses, f.dropMetadata, "not applied without --drop-metadata")
	if !f.yes {
		ok, err := confirmApply(in, out, sel.Apply, sess.Workspace)
		if err != nil {
			return fmt.Errorf("apply session %s: read confirmation: %w", id, err)
		}
		if !ok {
			fmt.Fprintln(out, "nothing applied")
			return nil
		}
	}
	res, err := wf.Apply(ctx, op, g, items, flush.Options{DropMetadata: f.dropMetadata})
	printFlushResult(out, res, sess.Workspace, id)
	if err != nil {
		return cliErr(err)
	}
	return leftErr()
}

// printFlushResult reports the flush of session id into workspace: how many changes were
// applied and the journal that undoes them, then each path left alone with its reason
// (paths and reasons escaped with diff.Escape: nothing in them can drive the terminal).
func printFlushResult(out io.Writer, res flush.Result, workspace, id string) {
	fmt.Fprintf(out, "applied %d change(s) to %s", len(res.Applied), diff.Escape(workspace))
	if res.Tx != "" {
		fmt.Fprintf(out, " (journal %s; brood undo %s reverts it)", res.Tx, id)
	}
	fmt.Fprintln(out)
	for _, p := range res.Problems {
		fmt.Fprintf(out, "not applied %s: %s\n", diff.Escape(p.Path), diff.Escape(p.Err.Error()))
	}
}

// cmdContext returns cmd's context, or the background context when cmd runs without one
// (Execute, not ExecuteContext).
func cmdContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// confirmApply asks on the terminal whether to apply changes to workspace, and a second
// time when any of them is high-risk; it reports whether both answers were yes.
func confirmApply(in io.Reader, out io.Writer, changes []diff.Change, workspace string) (bool, error) {
	ok, err := confirm(in, out, fmt.Sprintf("apply %d change(s) to %s? [y/N] ", len(changes), diff.Escape(workspace)))
	if err != nil || !ok {
		return false, err
	}
	if n := countRisky(changes); n > 0 {
		return confirm(in, out, fmt.Sprintf("%d of them HIGH RISK (see [risk: ...] above): really apply? [y/N] ", n))
	}
	return true, nil
}

// countRisky returns how many of changes are high-risk.
func countRisky(changes []diff.Change) int {
	n := 0
	for _, c := range changes {
		if c.Risk != "" {
			n++
		}
	}
	return n
}

// printSelection prints one line per selected change: what will be applied, with
// notes[path] (addLinkTargets: a symlink's target), what the apply does to its mode
// (diff.ModeNote) and its risk, and each change left out with the reason.
func printSelection(out io.Writer, sel frontend.ApplySelection, notes map[string]string) {
	var b strings.Builder
	for _, c := range sel.Apply {
		fmt.Fprintf(&b, "apply    %-9s %s", c.Kind, diff.Escape(c.Path))
		for _, n := range []string{notes[c.Path], diff.ModeNote(c)} {
			if n != "" {
				fmt.Fprintf(&b, " [%s]", n)
			}
		}
		if c.Risk != "" {
			fmt.Fprintf(&b, " [risk: %s]", diff.Escape(c.Risk))
		}
		b.WriteByte('\n')
	}
	for _, c := range sel.Blocked {
		fmt.Fprintf(&b, "%-8s %s: %s\n", c.Kind, diff.Escape(c.Path), diff.Escape(c.Reason))
	}
	for _, c := range sel.Emptied {
		fmt.Fprintf(&b, "skip     %-9s %s: new directory holding only changes left out; applied with them\n", c.Kind, diff.Escape(c.Path))
	}
	for _, c := range sel.Risky {
		fmt.Fprintf(&b, "skip     %-9s %s: high risk (%s): name its path to apply it", c.Kind, diff.Escape(c.Path), diff.Escape(c.Risk))
		if n := diff.ModeNote(c); n != "" {
			fmt.Fprintf(&b, " [%s]", n)
		}
		b.WriteByte('\n')
	}
	io.WriteString(out, b.String())
}

// printMetaLosses prints, before anything is written, one line per extended attribute
// of a replaced file that the new file will not get: dropped by rule, or refused (the
// change is then not applied, refusedNote says how to apply it) unless drop.
func printMetaLosses(out io.Writer, losses []flush.MetaLoss, drop bool, refusedNote string) {
	for _, l := range losses {
		switch {
		case !l.Refused:
			fmt.Fprintf(out, "metadata %s: %s is not kept: %s\n", diff.Escape(l.Path), diff.Escape(l.Attr), diff.Escape(l.Why))
		case drop:
			fmt.Fprintf(out, "metadata %s: %s cannot be kept (%s); dropped (--drop-metadata)\n",
				diff.Escape(l.Path), diff.Escape(l.Attr), diff.Escape(l.Why))
		default:
			fmt.Fprintf(out, "metadata %s: %s cannot be kept (%s); %s\n",
				diff.Escape(l.Path), diff.Escape(l.Attr), diff.Escape(l.Why), refusedNote)
		}
	}
}

// metaNotes returns, per path of changes that are not refused or in conflict, what the
// apply would do to the replaced file's extended attributes and ACL beyond keeping them
// (flush.CheckMetadata, reading only): "metadata: ATTR not kept (WHY)" for one never
// carried over, "metadata: ATTR cannot be kept (WHY); apply needs --drop-metadata" for
// one the flush keeps that W's filesystem refuses. Notes of one path are joined by "; ".
func metaNotes(sess *session.Session, m *manifest.Manifest, changes []diff.Change) (map[string]string, error) {
	var items []flush.Item
	for _, c := range changes {
		if c.Kind != diff.KindRefused && c.Kind != diff.KindConflict {
			items = append(items, flush.Item{Change: c})
		}
	}
	losses, err := flush.CheckMetadata(sess, m, items)
	if err != nil {
		return nil, err
	}
	notes := map[string]string{}
	for _, l := range losses {
		n := fmt.Sprintf("metadata: %s not kept (%s)", diff.Escape(l.Attr), diff.Escape(l.Why))
		if l.Refused {
			n = fmt.Sprintf("metadata: %s cannot be kept (%s); apply needs --drop-metadata", diff.Escape(l.Attr), diff.Escape(l.Why))
		}
		if notes[l.Path] != "" {
			n = notes[l.Path] + "; " + n
		}
		notes[l.Path] = n
	}
	return notes, nil
}

// confirm asks question on out and reads one line from in; only "y" or "yes" agree.
func confirm(in io.Reader, out io.Writer, question string) (bool, error) {
	fmt.Fprint(out, question)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && line != "") {
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		return false, err
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

// openGate is the common start of `brood apply` and `brood review` (verb names the
// command in errors): open session id, resolve paths against its workspace, then the
// workflow's gate (settle a session marked running, roll back an interrupted apply, the
// diff), saying on out when an interrupted apply was rolled back.
func openGate(ctx context.Context, wf *frontend.Workflow, verb, id string, paths []string, out io.Writer) (*frontend.Gate, []string, error) {
	sess, err := openReviewable(verb, id)
	if err != nil {
		return nil, nil, err
	}
	if paths, err = workspacePaths(verb, sess.Workspace, paths); err != nil {
		return nil, nil, err
	}
	g, err := wf.OpenGate(ctx, verb, sess)
	if g != nil && g.Recovered.Tx != "" {
		rec := g.Recovered
		fmt.Fprintf(out, "rolled back interrupted apply %s: %d path(s) restored\n", rec.Tx, len(rec.Applied))
		for _, p := range rec.Problems {
			fmt.Fprintf(out, "left as is %s: %s\n", diff.Escape(p.Path), diff.Escape(p.Err.Error()))
		}
	}
	if err != nil {
		return nil, nil, cliErr(err)
	}
	return g, paths, nil
}
