package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/aymanbagabas/go-udiff"
	"github.com/spf13/cobra"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/gitreview"
	"brood.dev/brood/frontend/review"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/internal/hostexec"
)

// runDiffPatch is `brood diff ID --patch [--commits]`: the unified diff of every text
// change (read back from W and S, verified against the reviewed digests), a one-line
// note for the others, and with commits every commit of the commits section with its
// own diff. Every line is escaped (review.EscapeLine). On a terminal it is coloured and
// goes through $PAGER (less by default, with LESS=FRX unless LESS is set, as git does);
// to a pipe or file it is plain.
func runDiffPatch(cmd *cobra.Command, id string, commits bool) error {
	sess, g, err := openDiff(cmdContext(cmd), id) // cmd_diff.go
	if err != nil {
		return err
	}
	changes := g.Changes
	var b bytes.Buffer
	for _, c := range changes {
		writeChangePatch(&b, sess, c)
	}
	if commits {
		if err := writeCommitPatches(&b, gitReviewOf(sess)); err != nil {
			return fmt.Errorf("diff session %s: %w", id, err)
		}
	}
	return page(cmd.OutOrStdout(), escapeLines(b.String()))
}

// writeChangePatch writes the unified diff of one change, or one line saying why it has
// none (binary, refused, conflict, not a file's content).
func writeChangePatch(b *bytes.Buffer, sess *session.Session, c diff.Change) {
	fmt.Fprintf(b, "diff --git a/%s b/%s\n", diff.Escape(c.Path), diff.Escape(c.Path))
	before, after, ok := changeContents(sess, c)
	switch {
	case c.Kind == diff.KindRefused || c.Kind == diff.KindConflict:
		fmt.Fprintf(b, "%s: %s\n", c.Kind, diff.Escape(c.Reason))
	case !ok:
		fmt.Fprintf(b, "%s: no text diff (binary, a directory, or not a file's content)\n", c.Kind)
	default:
		from, to := "a/"+diff.Escape(c.Path), "b/"+diff.Escape(c.Path)
		if c.Kind == diff.KindAdded {
			from = "/dev/null"
		}
		if c.Kind == diff.KindDeleted {
			to = "/dev/null"
		}
		b.WriteString(udiff.Unified(from, to, string(before), string(after)))
	}
}

// changeContents reads the base from W and the new content from S of a text change,
// each verified against its reviewed digest; ok is false for anything else.
func changeContents(sess *session.Session, c diff.Change) (before, after []byte, ok bool) {
	if c.Binary || c.Kind != diff.KindModified && c.Kind != diff.KindAdded && c.Kind != diff.KindDeleted {
		return nil, nil, false
	}
	var err error
	if c.Kind != diff.KindAdded {
		if c.OldHash == nil {
			return nil, nil, false
		}
		if before, err = diff.ReadFile(sess.Workspace, c.Path, c.OldHash, statMaxBytes); err != nil {
			return nil, nil, false
		}
	}
	if c.Kind != diff.KindDeleted {
		if c.NewHash == nil {
			return nil, nil, false
		}
		if after, err = diff.ReadFile(sess.SnapshotDir(), c.Path, c.NewHash, statMaxBytes); err != nil {
			return nil, nil, false
		}
	}
	return before, after, !diff.IsBinary(before) && !diff.IsBinary(after)
}

// writeCommitPatches writes, per reviewed ref, each commit as git log -p shows it.
func writeCommitPatches(b *bytes.Buffer, g *gitreview.Review) error {
	if g == nil {
		return nil
	}
	for i := range g.Refs {
		if err := writeRefPatches(b, g, &g.Refs[i], ""); err != nil {
			return err
		}
	}
	return nil
}

// writeRefPatches writes the commits of ref u as git log -p shows them: header, message
// indented, then the commit's own diff against its first parent (Review.Patch). With
// prefix non-empty only the commits whose id starts with it. The text is raw: escape it
// (escapeLines) before it reaches a terminal.
func writeRefPatches(b *bytes.Buffer, g *gitreview.Review, u *gitreview.RefUpdate, prefix string) error {
	for _, c := range u.Commits {
		if !strings.HasPrefix(c.ID, prefix) {
			continue
		}
		fmt.Fprintf(b, "commit %s (%s)\nAuthor: %s\n\n", c.ID, u.Name, c.Author)
		for _, l := range strings.Split(strings.TrimRight(c.Message, "\n"), "\n") {
			fmt.Fprintf(b, "    %s\n", l)
		}
		b.WriteByte('\n')
		if err := g.Patch(b, c.ID); err != nil {
			return err
		}
	}
	return nil
}

// escapeLines escapes every line of s (review.EscapeLine: no byte that drives a terminal).
func escapeLines(s string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		body := strings.TrimSuffix(l, "\n")
		lines[i] = review.EscapeLine(body) + l[len(body):]
	}
	return strings.Join(lines, "")
}

// colourPatch colours a patch as git diff does: headers bold, hunk headers cyan, added
// lines green, removed lines red (ANSI SGR).
func colourPatch(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		body := strings.TrimSuffix(l, "\n")
		code := ""
		switch {
		case strings.HasPrefix(body, "diff "), strings.HasPrefix(body, "commit "), strings.HasPrefix(body, "+++ "), strings.HasPrefix(body, "--- "):
			code = "1"
		case strings.HasPrefix(body, "@@"):
			code = "36"
		case strings.HasPrefix(body, "+"):
			code = "32"
		case strings.HasPrefix(body, "-"):
			code = "31"
		}
		if code == "" || body == "" {
			b.WriteString(l)
			continue
		}
		fmt.Fprintf(&b, "\x1b[%sm%s\x1b[m%s", code, body, l[len(body):])
	}
	return b.String()
}

// page writes s to out: coloured through $PAGER when out is a terminal (review.ColorOK
// for the colour), plain otherwise. A pager that cannot start leaves s written directly.
func page(out io.Writer, s string) error {
	f, ok := out.(*os.File)
	if !ok || !review.IsTerminal(f) {
		_, err := io.WriteString(out, s)
		return err
	}
	if review.ColorOK(f) {
		s = colourPatch(s)
	}
	cmd := hostexec.Pager(os.Getenv("PAGER"))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(s), f, os.Stderr
	if err := cmd.Run(); err != nil {
		_, err = io.WriteString(out, s)
		return err
	}
	return nil
}
