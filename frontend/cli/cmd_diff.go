package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/session"
)

// statMaxBytes bounds the files `brood diff --stat` reads to count lines (8 MiB); larger
// files are summarised by size.
const statMaxBytes = 8 << 20

func newDiffCommand() *cobra.Command {
	var asJSON, stat bool
	var patch, commits bool // gitcli.go
	c := &cobra.Command{
		Use:   "diff ID",
		Short: "List what the agent changed in a session's snapshot",
		Long: `List every change the agent made in the snapshot of session ID, relative to the
workspace as it was when the snapshot was taken: one line per path with its kind
(added, modified, deleted, mode, symlink, type, conflict, refused), the path with
control characters escaped, the reason, what the apply does besides the content (a
mode change such as [mode 0640 -> 0644: readable by others], setuid dropped, a symlink's
target, an extended attribute not kept) and the risk.

--json prints {"changes":[...]}; a path that is not valid UTF-8 also carries its exact
bytes in path_b64 (base64). Exit status 3 when any change is refused or in conflict.

The agent's git commits are listed in a commits section (docs/git-review.md), in --json
as "commits"; -p/--patch prints the unified diff of every text change, and of every
commit with --commits.`,
		Args: idArgs("diff", true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if patch || commits {
				return diffPatchCmd(cmd, args[0], patch, commits, asJSON || stat) // gitcli.go
			}
			if asJSON && stat {
				return usageErr("diff: --json and --stat cannot be combined")
			}
			return runDiff(cmd.Context(), cmd.OutOrStdout(), args[0], asJSON, stat)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the changes as JSON")
	c.Flags().BoolVar(&stat, "stat", false, "print changed lines per file and a summary")
	c.Flags().BoolVarP(&patch, "patch", "p", false, "print the unified diff of every text change (gitcli.go)")
	c.Flags().BoolVar(&commits, "commits", false, "with --patch: also every commit's diff (gitcli.go)")
	return c
}

// openDiff opens session id for brood diff (a context of nil is the background one) and
// computes its changes.
func openDiff(ctx context.Context, id string) (*session.Session, *frontend.Gate, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	sess, err := openReviewable("diff", id)
	if err != nil {
		return nil, nil, err
	}
	g, err := newWorkflow(nil).Diff(ctx, sess)
	if err != nil {
		return nil, nil, cliErr(err)
	}
	return sess, g, nil
}

func runDiff(ctx context.Context, out io.Writer, id string, asJSON, stat bool) error {
	sess, g, err := openDiff(ctx, id)
	if err != nil {
		return err
	}
	m, changes := g.Manifest, g.Changes
	gr := gitReviewOf(sess) // gitcli.go
	defer gr.Close()
	noteNested(gr, changes) // gitcli.go
	var notes map[string]string
	if !asJSON {
		if notes, err = metaNotes(sess, m, changes); err != nil {
			return fmt.Errorf("diff session %s: %w", id, err)
		}
		addLinkTargets(notes, sess, changes)
	}
	switch {
	case asJSON:
		err = writeDiffJSONGit(out, changes, gr) // gitcli.go
	case stat:
		err = writeDiffStat(out, sess, changes, notes)
	case len(changes) == 0 && hasCommits(gr): // gitcli.go
		// nothing but the commits section: no "no changes" above it
	default:
		err = writeDiffLines(out, changes, notes)
	}
	if err == nil && !asJSON {
		err = writeCommits(out, id, gr) // gitcli.go
	}
	if err != nil {
		return err
	}
	if n := blocked(changes) + gr.Blocked(); n > 0 { // gitcli.go: + gr.Blocked()
		return refusedErr(fmt.Errorf("diff session %s: %d change(s) refused or in conflict", id, n))
	}
	return nil
}

func blocked(changes []diff.Change) int {
	n := 0
	for _, c := range changes {
		if c.Kind == diff.KindRefused || c.Kind == diff.KindConflict {
			n++
		}
	}
	return n
}

// writeDiffText prints one line per change: kind, escaped path, then the reason, what
// the apply does to the mode (diff.ModeNote) and the risk in brackets. Reasons are built
// by package diff from escaped names only.
func writeDiffText(out io.Writer, changes []diff.Change) error {
	return writeDiffLines(out, changes, nil)
}

// writeDiffLines is writeDiffText with notes[path] (metaNotes: what the apply does to
// the replaced file's attributes) in brackets after the mode.
func writeDiffLines(out io.Writer, changes []diff.Change, notes map[string]string) error {
	var b strings.Builder
	for _, c := range changes {
		fmt.Fprintf(&b, "%-9s %s", c.Kind, diff.Escape(c.Path))
		if c.SameAs != "" {
			fmt.Fprintf(&b, " (same content as deleted %s)", diff.Escape(c.SameAs))
		}
		if c.BecameBinary {
			b.WriteString(" (became binary)")
		}
		if c.Reason != "" {
			fmt.Fprintf(&b, ": %s", diff.Escape(c.Reason))
		}
		if n := diff.ModeNote(c); n != "" {
			fmt.Fprintf(&b, " [%s]", n)
		}
		if n := notes[c.Path]; n != "" {
			fmt.Fprintf(&b, " [%s]", n)
		}
		if c.Risk != "" {
			fmt.Fprintf(&b, " [risk: %s]", diff.Escape(c.Risk))
		}
		b.WriteByte('\n')
	}
	if len(changes) == 0 {
		b.WriteString("no changes\n")
	}
	_, err := io.WriteString(out, b.String())
	return err
}

func writeDiffJSON(out io.Writer, changes []diff.Change) error {
	if changes == nil {
		changes = []diff.Change{}
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Changes []diff.Change `json:"changes"`
	}{changes})
}

// writeDiffStat prints, per change, the path and its added/deleted line counts for text
// files (read back from W and S, verified against the reviewed hashes), or the sizes for
// binary and large files, and what the apply does to the mode (diff.ModeNote) and to the
// attributes (notes, from metaNotes), then a summary line like git diff --stat.
func writeDiffStat(out io.Writer, sess *session.Session, changes []diff.Change, notes map[string]string) error {
	var b strings.Builder
	var files, ins, del int
	for _, c := range changes {
		dir := isDirChange(sess, c)
		if !dir {
			files++
		}
		fmt.Fprintf(&b, " %s | ", diff.Escape(c.Path))
		a, d, ok := lineStat(sess, c)
		switch {
		case c.Kind == diff.KindRefused || c.Kind == diff.KindConflict:
			fmt.Fprintf(&b, "%s: %s", c.Kind, diff.Escape(c.Reason))
		case ok:
			ins += a
			del += d
			fmt.Fprintf(&b, "+%d -%d", a, d)
		case c.Kind == diff.KindMode:
			note := diff.ModeNote(c)
			if note == "" {
				note = fmt.Sprintf("mode %04o -> %04o", c.OldMode, c.NewMode)
			}
			b.WriteString(note)
		case c.Kind == diff.KindSymlink || c.Kind == diff.KindType:
			fmt.Fprintf(&b, "%s: %s", c.Kind, diff.Escape(c.Reason))
		case dir:
			fmt.Fprintf(&b, "%s directory", c.Kind)
		case c.Binary:
			fmt.Fprintf(&b, "Bin %d -> %d bytes", c.OldSize, c.NewSize)
		default:
			fmt.Fprintf(&b, "%s %d -> %d bytes", c.Kind, c.OldSize, c.NewSize)
		}
		if n := diff.ModeNote(c); n != "" && c.Kind != diff.KindMode {
			fmt.Fprintf(&b, " [%s]", n)
		}
		if n := notes[c.Path]; n != "" {
			fmt.Fprintf(&b, " [%s]", n)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, " %d file(s) changed, %d insertion(s)(+), %d deletion(s)(-)\n", files, ins, del)
	_, err := io.WriteString(out, b.String())
	return err
}

// addLinkTargets puts the target the apply gives each symlink that a change adds,
// retargets or puts in place of another type ("-> TARGET", escaped; read from S, never
// followed) first in notes[path].
func addLinkTargets(notes map[string]string, sess *session.Session, changes []diff.Change) {
	for _, c := range changes {
		if c.Kind != diff.KindSymlink && c.Kind != diff.KindType {
			continue
		}
		t, err := os.Readlink(filepath.Join(sess.SnapshotDir(), filepath.FromSlash(c.Path)))
		if err != nil {
			continue // not a symlink in S (removed, or a type change to a file or directory)
		}
		n := "-> " + diff.Escape(t)
		if notes[c.Path] != "" {
			n += "; " + notes[c.Path]
		}
		notes[c.Path] = n
	}
}

// isDirChange reports whether an added or deleted change is a directory (S's entry for
// an addition, W's for a deletion; lstat, never followed).
func isDirChange(sess *session.Session, c diff.Change) bool {
	root := sess.SnapshotDir()
	switch c.Kind {
	case diff.KindAdded:
	case diff.KindDeleted:
		root = sess.Workspace
	default:
		return false
	}
	fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(c.Path)))
	return err == nil && fi.IsDir()
}

// lineStat counts the lines added and deleted by a text change; ok is false when the
// change is not between text contents that can both be read and verified.
func lineStat(sess *session.Session, c diff.Change) (added, deleted int, ok bool) {
	if c.Binary || c.Kind == diff.KindRefused || c.Kind == diff.KindConflict {
		return 0, 0, false
	}
	var before, after []byte
	var err error
	if c.Kind == diff.KindModified || c.Kind == diff.KindDeleted {
		if c.OldHash == nil {
			return 0, 0, false
		}
		if before, err = diff.ReadFile(sess.Workspace, c.Path, c.OldHash, statMaxBytes); err != nil {
			return 0, 0, false
		}
	}
	if c.Kind == diff.KindModified || c.Kind == diff.KindAdded {
		if c.NewHash == nil {
			return 0, 0, false
		}
		if after, err = diff.ReadFile(sess.SnapshotDir(), c.Path, c.NewHash, statMaxBytes); err != nil {
			return 0, 0, false
		}
	}
	if c.Kind != diff.KindModified && c.Kind != diff.KindAdded && c.Kind != diff.KindDeleted {
		return 0, 0, false
	}
	if diff.IsBinary(before) || diff.IsBinary(after) {
		return 0, 0, false
	}
	added, deleted = diff.LineCounts(before, after)
	return added, deleted, true
}
