package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/flush"
	"brood.dev/brood/frontend/gitreview"
	"brood.dev/brood/frontend/review"
	"brood.dev/brood/frontend/session"
)

// This file is the command-line side of the git-aware review (package gitreview): the
// commits section of brood diff and review, their JSON, creating the agent's refs as
// branches in brood apply and review, and removing them in brood undo. The cmd_*.go
// files call it with one line each.

// gitReviewOf returns the commit review of sess's workspace repository (nil when W has
// no .git directory). A W repository that cannot be read becomes a refused review.
func gitReviewOf(sess *session.Session) *gitreview.Review {
	r, err := gitreview.Inspect(sess.Workspace, sess.SnapshotDir())
	if err != nil {
		return &gitreview.Review{Refused: diff.Escape(err.Error())}
	}
	return r
}

// writeCommits prints the commits section of session id (nothing when there is nothing
// to show): per ref its old and new value and each commit W lacks with its author,
// subject and diffstat, refused refs with the reason, then notes (without the header
// when no ref changed). Every ref name,
// author and message is escaped (diff.Escape).
func writeCommits(out io.Writer, id string, g *gitreview.Review) error {
	if g.Empty() {
		return nil
	}
	var b strings.Builder
	note := "  note: %s\n"
	switch {
	case g.Refused != "":
		fmt.Fprintf(&b, "commits: not reviewed: %s\n", g.Refused)
	case len(g.Refs) == 0:
		note = "note: %s\n" // notes only: no commits header over them
	default:
		fmt.Fprintf(&b, "commits (brood apply %s --all creates each ref as branch brood/%s/<ref>):\n", id, id)
	}
	for _, u := range g.Refs {
		old := "(new)"
		if u.Old != "" {
			old = short(u.Old) + " ->"
		}
		fmt.Fprintf(&b, "  %s %s %s: %d commit(s)", diff.Escape(u.Name), old, short(u.New), len(u.Commits))
		if u.Refused != "" {
			fmt.Fprintf(&b, " [refused: %s]", u.Refused)
		}
		b.WriteByte('\n')
		for _, c := range u.Commits {
			subject, _, _ := strings.Cut(c.Message, "\n")
			fmt.Fprintf(&b, "    %s %s (%s; %d file(s), +%d -%d)\n", short(c.ID), diff.Escape(subject),
				diff.Escape(c.Author), c.Files, c.Insertions, c.Deletions)
			for _, s := range c.Submodules {
				fmt.Fprintf(&b, "      submodule %s\n", diff.Escape(s))
			}
		}
	}
	for _, n := range g.Notes {
		fmt.Fprintf(&b, note, n)
	}
	_, err := io.WriteString(out, b.String())
	return err
}

// hasCommits reports whether review g shows refs or a refusal (more than notes): then
// there is something to review even when no file changed.
func hasCommits(g *gitreview.Review) bool {
	return g != nil && (g.Refused != "" || len(g.Refs) > 0)
}

// short abbreviates an object id to 12 hex digits.
func short(id string) string { return id[:min(12, len(id))] }

// writeDiffJSONGit prints {"changes":[...],"commits":[...]}: the changes as
// writeDiffJSON does, and one object per ref of g (gitreview.RefUpdate: ref, old, new,
// commits with id, parents, author, message, files, insertions, deletions; refused and
// not_descendant when set). A repository refused as a whole adds "commits_refused".
func writeDiffJSONGit(out io.Writer, changes []diff.Change, g *gitreview.Review) error {
	if changes == nil {
		changes = []diff.Change{}
	}
	v := struct {
		Changes        []diff.Change         `json:"changes"`
		Commits        []gitreview.RefUpdate `json:"commits"`
		CommitsRefused string                `json:"commits_refused,omitempty"`
	}{Changes: changes, Commits: []gitreview.RefUpdate{}}
	if g != nil {
		v.CommitsRefused = g.Refused
		for _, u := range g.Refs {
			if u.Commits == nil {
				u.Commits = []gitreview.Commit{}
			}
			v.Commits = append(v.Commits, u)
		}
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// continueAfter reports whether the commits step runs after the file step's result
// err: when it succeeded or only left changes out (exit status 3).
func continueAfter(err error) bool {
	var ee *exitError
	return err == nil || errors.As(err, &ee) && ee.code == ExitRefused
}

// applyCommitsAfter is the commits step of `brood apply ID --all` (and of `brood review
// --all`, or interactively on a terminal with ask): after the file step returned fileErr,
// it creates each ref the review accepts as branch brood/<id>/<ref> in the workspace, or
// under the name given with --branch (branchOf), (gitreview.Apply, journaled with
// flush.JournalRef), asking first when ask. It returns fileErr, or a refused error (exit
// 3) when a ref was refused and fileErr is nil. Without all it only says that commits
// were not applied.
func applyCommitsAfter(in io.Reader, out io.Writer, id, name string, all, ask bool, fileErr error) error {
	if !continueAfter(fileErr) {
		return fileErr
	}
	sess, err := openSession(id)
	if err != nil {
		return err
	}
	g := gitReviewOf(sess)
	defer g.Close()
	if g.Empty() {
		return fileErr
	}
	if !all {
		fmt.Fprintf(out, "commits not applied (brood apply %s --all creates their branches; brood diff %s lists them)\n", id, id)
		return fileErr
	}
	if err := writeCommits(out, id, g); err != nil {
		return err
	}
	for i := range g.Refs {
		u := &g.Refs[i]
		if u.Refused != "" {
			continue
		}
		branch := branchOf(sess.ID, name, g, u.Name)
		if ask {
			if ok, err := askRef(in, out, g, u, branch); err != nil || !ok {
				continue
			}
		}
		err := g.Apply(u, branch, func(ref, v string) error { return flush.JournalRef(sess, ref, v) })
		if err != nil {
			return fmt.Errorf("apply session %s: %w", id, err)
		}
		fmt.Fprintf(out, "created branch %s at %s (brood undo %s removes it)\n",
			diff.Escape(strings.TrimPrefix(branch, "refs/heads/")), short(u.New), id)
	}
	if n := g.Blocked(); n > 0 && fileErr == nil {
		return refusedErr(fmt.Errorf("apply session %s: %d ref(s) refused", id, n))
	}
	return fileErr
}

// askRef asks on out whether to create branch for ref u of review g and reads the
// answers from in, one line each: y or yes creates it; d shows every commit of the ref
// with its own diff, "d ID" only the commits whose id starts with ID (writeRefPatches,
// escaped, through the pager on a terminal), then it asks again; anything else, or the
// end of in, skips the ref.
func askRef(in io.Reader, out io.Writer, g *gitreview.Review, u *gitreview.RefUpdate, branch string) (bool, error) {
	for {
		if f, ok := in.(*os.File); ok {
			// Late terminal replies (and keys typed ahead) are not part of the answer.
			if err := review.FlushTerminalInput(f); err != nil {
				return false, err
			}
		}
		fmt.Fprintf(out, "create branch %s with %d commit(s)? [y/N, d: show the commits' diffs, d ID: one commit] ",
			diff.Escape(strings.TrimPrefix(branch, "refs/heads/")), len(u.Commits))
		line, err := readLine(in)
		if err != nil {
			return false, err
		}
		answer := strings.ToLower(strings.TrimSpace(line))
		cmd, arg, _ := strings.Cut(answer, " ")
		switch {
		case answer == "y" || answer == "yes":
			return true, nil
		case cmd != "d":
			return false, nil
		}
		var b bytes.Buffer
		if err := writeRefPatches(&b, g, u, strings.TrimSpace(arg)); err != nil {
			return false, err
		}
		if b.Len() == 0 {
			fmt.Fprintf(out, "no commit of %s starts with %s\n", diff.Escape(u.Name), diff.Escape(arg))
		}
		if err := page(out, escapeLines(b.String())); err != nil {
			return false, err
		}
	}
}

// readLine reads one line from in a byte at a time, so that nothing after it is taken
// from in (the next question reads on). At the end of in it returns what was read ("",
// and no error, when nothing was).
func readLine(in io.Reader) (string, error) {
	var b []byte
	var c [1]byte
	for {
		n, err := in.Read(c[:])
		if n == 1 {
			if c[0] == '\n' {
				return string(b), nil
			}
			b = append(b, c[0])
			continue
		}
		if errors.Is(err, io.EOF) {
			return string(b), nil
		}
		if err != nil {
			return "", err
		}
	}
}

// branchOf is the branch the apply creates for ref of review g in session id:
// brood/<id>/<ref> (gitreview.BranchName), or with --branch name (non-empty) name itself
// when ref is the only ref that changed, else name/<ref> (gitreview.NamedBranch).
func branchOf(id, name string, g *gitreview.Review, ref string) string {
	if name == "" {
		return gitreview.BranchName(id, ref)
	}
	return gitreview.NamedBranch(name, ref, len(g.Refs) > 1)
}

// checkBranchFlag refuses --branch name of command op on session sess before anything
// is written (usage errors, exit 2): a name git would not accept as a branch
// (gitreview.CheckBranchName), or one whose branch for an appliable ref exists in the
// workspace or is in git's way there (gitreview.BranchFree). An empty name passes.
func checkBranchFlag(op string, sess *session.Session, name string) error {
	if name == "" {
		return nil
	}
	if err := gitreview.CheckBranchName(name); err != nil {
		return usageErr("%s: --branch: %v", op, err)
	}
	g := gitReviewOf(sess)
	defer g.Close()
	for _, u := range g.Refs {
		if u.Refused != "" {
			continue
		}
		branch := branchOf(sess.ID, name, g, u.Name)
		if err := gitreview.BranchFree(sess.Workspace, branch); err != nil {
			return usageErr("%s session %s: --branch %s: %v; choose another name", op, sess.ID, diff.Escape(name), err)
		}
	}
	return nil
}

// undoRefsAfter is the refs step of `brood undo ID`: it removes every branch the applies
// of the session created that still holds the commit it was created at
// (gitreview.DeleteRef). It runs only when the file step succeeded (fileErr nil; else it
// returns fileErr) and returns an error for a branch left in place. nothing is the file
// step's "no apply left to revert": "nothing to undo" is printed only when no branch
// was moved, removed or left either.
func undoRefsAfter(out io.Writer, id string, nothing bool, fileErr error) error {
	if fileErr != nil {
		return fileErr // all or nothing: the branches stay while files are not reverted
	}
	sess, err := openSession(id)
	if err != nil {
		return err
	}
	done, problems, err := flush.UndoRefs(sess, func(r flush.RefRecord) (bool, error) {
		if r.Old != "" {
			return true, gitreview.RestoreRef(sess.Workspace, r.Ref, r.Old, r.Value)
		}
		return gitreview.DeleteRef(sess.Workspace, r.Ref, r.Value)
	})
	if nothing && err == nil && len(done) == 0 && len(problems) == 0 {
		fmt.Fprintf(out, "nothing to undo in session %s\n", id)
	}
	for _, r := range done {
		if r.Old != "" {
			fmt.Fprintf(out, "moved branch %s back to %s\n", diff.Escape(strings.TrimPrefix(r.Ref, "refs/heads/")), short(r.Old))
			continue
		}
		fmt.Fprintf(out, "removed branch %s\n", diff.Escape(strings.TrimPrefix(r.Ref, "refs/heads/")))
	}
	for _, p := range problems {
		fmt.Fprintf(out, "left branch %s: %s\n", diff.Escape(strings.TrimPrefix(p.Path, "refs/heads/")), diff.Escape(p.Err.Error()))
	}
	switch {
	case err != nil:
		return fmt.Errorf("undo session %s: %w", id, err)
	case len(problems) > 0:
		return refusedErr(fmt.Errorf("undo session %s: %d branch(es) left in place", id, len(problems)))
	}
	return nil
}

// reviewCommitsAfter is the commits step of `brood review`: with --all it creates the
// branches as apply --all does (under --branch name when given), on a terminal without
// a choice it asks per ref; with --reject-all or PATH it only shows the commits.
func reviewCommitsAfter(cmd *cobra.Command, id, name string, all, rejectAll bool, paths []string, fileErr error) error {
	in, inFile := cmd.InOrStdin().(*os.File)
	tty := inFile && term.IsTerminal(int(in.Fd()))
	switch {
	case all:
		return applyCommitsAfter(cmd.InOrStdin(), cmd.OutOrStdout(), id, name, true, false, fileErr)
	case tty && !rejectAll && len(paths) == 0:
		return applyCommitsAfter(cmd.InOrStdin(), cmd.OutOrStdout(), id, name, true, true, fileErr)
	}
	if sess, err := openSession(id); err == nil && continueAfter(fileErr) {
		writeCommits(cmd.OutOrStdout(), id, gitReviewOf(sess))
	}
	return fileErr
}

// diffPatchCmd checks the flags of `brood diff --patch [--commits]` (other is --json or
// --stat, which cannot be combined with it) and runs runDiffPatch.
func diffPatchCmd(cmd *cobra.Command, id string, patch, commits, other bool) error {
	switch {
	case !patch:
		return usageErr("diff: --commits needs --patch")
	case other:
		return usageErr("diff: --patch cannot be combined with --json or --stat")
	}
	return runDiffPatch(cmd, id, commits)
}

// noteNested adds to g one note per nested repository (a ".git" component below the
// root) whose files changes list: only the root's repository is reviewed as commits.
// Nothing is added when W's root has no repository (g nil).
func noteNested(g *gitreview.Review, changes []diff.Change) {
	if g == nil {
		return
	}
	seen := map[string]bool{}
	for _, c := range changes {
		i := strings.Index(c.Path, "/.git/")
		if i < 0 && strings.HasSuffix(c.Path, "/.git") {
			i = len(c.Path) - len("/.git")
		}
		if i < 0 || seen[c.Path[:i]] {
			continue
		}
		seen[c.Path[:i]] = true
		g.Notes = append(g.Notes, "nested repository "+diff.Escape(c.Path[:i])+
			": its commits are not reviewed (only the workspace root's repository is); its git files are listed as changes")
	}
}
