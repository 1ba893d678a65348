package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/frontend/snapshot"
)

// defaultKeepBase says whether `brood session new` keeps reflinked base copies for
// three-way merges by default. Measured with scripts/bench-snapshot.sh on a loop xfs
// (50,000 files, 560 MB, 2026-11-29, four runs): session new 0.68–1.27× `cp -a
// --reflink=auto`, with --keep-base 1.31–1.70× (a second create and FICLONE per file),
// above the 1.2× budget, so the base is opt-in. On ext4 (no FICLONE) no base is kept.
const defaultKeepBase = false

func newSessionCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "session",
		Short: "Create, list and remove sessions (snapshots of a workspace)",
	}
	c.AddCommand(newSessionNewCommand(), newSessionListCommand(), newSessionRmCommand(), newSessionStopCommand())
	return c
}

func newSessionNewCommand() *cobra.Command {
	var o sessionNewOpts
	c := &cobra.Command{
		Use:   "new",
		Short: "Snapshot a workspace into a new session",
		Long: `Snapshot the workspace (default: the current directory) into a new session
directory and print the session id and the snapshot path.

Secrets (.env, .env.*, *.pem, *.key, *.p12, *.pfx, *.ppk, id_rsa*, id_ed25519*,
id_ecdsa*, id_dsa*, .ssh/, .aws/, .gnupg/, .netrc, .git-credentials, .npmrc, .pypirc,
.docker/config.json, .kube/config, at any depth) are never copied; FIFOs, sockets, devices,
files you cannot read and brood's own state directory are skipped; git config files are
copied without credentials, includes or host command hooks, and the other git files
holding remote URLs (remotes/, branches/, FETCH_HEAD, reflogs) without credentials.
Each is listed on stderr (or in --json). --dry-run lists them and creates nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSessionNew(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	c.Flags().StringVar(&o.workspace, "workspace", ".", "workspace directory to snapshot")
	c.Flags().BoolVar(&o.asJSON, "json", false, "print the result as JSON on stdout")
	c.Flags().BoolVar(&o.dryRun, "dry-run", false, "list exclusions, skips and sanitized files; create nothing")
	c.Flags().BoolVar(&o.keepBase, "keep-base", defaultKeepBase, "also keep reflinked base copies for three-way merges (btrfs/xfs only: nothing is kept on ext4, and it says so)")
	return c
}

type sessionNewOpts struct {
	workspace      string
	asJSON, dryRun bool
	keepBase       bool
}

// sessionNewJSON is the --json output of `brood session new`.
type sessionNewJSON struct {
	ID        string                   `json:"id,omitempty"`
	Snapshot  string                   `json:"snapshot,omitempty"`
	Workspace string                   `json:"workspace"`
	DryRun    bool                     `json:"dry_run,omitempty"`
	Excluded  []snapshot.Item          `json:"excluded"`
	Skipped   []snapshot.Item          `json:"skipped"`
	Sanitized []snapshot.SanitizedFile `json:"sanitized"`
	Stats     sessionStats             `json:"stats"`
	// BaseNote says why --keep-base kept fewer base copies than files ("" otherwise).
	BaseNote string `json:"base_note,omitempty"`
}

type sessionStats struct {
	Files     int     `json:"files"`
	Dirs      int     `json:"dirs"`
	Symlinks  int     `json:"symlinks"`
	Bytes     int64   `json:"bytes"`
	Reflinked int     `json:"reflinked"`
	Copied    int     `json:"copied"`
	BaseFiles int     `json:"base_files"`
	Seconds   float64 `json:"seconds"`
}

func runSessionNew(ctx context.Context, out, errw io.Writer, o sessionNewOpts) error {
	if ctx == nil {
		ctx = context.Background()
	}
	// Ctrl-C cancels the snapshot, which then removes what it created.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	fi, err := os.Stat(o.workspace)
	if err != nil {
		return usageErr("session new: workspace: %v", err)
	}
	if !fi.IsDir() {
		return usageErr("session new: workspace %q is not a directory", o.workspace)
	}
	if o.dryRun {
		m, rep, err := snapshot.Take(ctx, o.workspace, "", snapshot.Options{DryRun: true, SkipDirs: frontend.StateDirs()})
		if err != nil {
			return fmt.Errorf("session new (dry run): %w", err)
		}
		return printSessionNew(out, errw, o, "", "", m, rep)
	}
	sess, err := session.Create(o.workspace)
	if err != nil {
		return fmt.Errorf("session new: %w", err)
	}
	fail := func(err error) error {
		if rerr := session.Remove(sess.ID); rerr != nil {
			return fmt.Errorf("session new: %w (and removing session %s failed: %v)", err, sess.ID, rerr)
		}
		return fmt.Errorf("session new: %w", err)
	}
	m, rep, err := snapshot.Take(ctx, sess.Workspace, sess.SnapshotDir(),
		snapshot.Options{KeepBase: o.keepBase, BaseDir: sess.BaseDir(), SkipDirs: frontend.StateDirs()})
	if err != nil {
		return fail(err)
	}
	if err := manifest.Write(sess.ManifestPath(), m); err != nil {
		return fail(err)
	}
	if err := sess.SetState(session.StateReady); err != nil {
		return fail(err)
	}
	return printSessionNew(out, errw, o, sess.ID, sess.SnapshotDir(), m, rep)
}

func printSessionNew(out, errw io.Writer, o sessionNewOpts, id, snap string, m *manifest.Manifest, rep *snapshot.Report) error {
	stats := sessionStats{Files: rep.Files, Dirs: rep.Dirs, Symlinks: rep.Symlinks, Bytes: rep.Bytes,
		Reflinked: rep.Reflinked, Copied: rep.Copied, BaseFiles: rep.BaseFiles, Seconds: rep.Elapsed.Seconds()}
	if o.asJSON {
		j := sessionNewJSON{ID: id, Snapshot: snap, Workspace: m.Workspace, DryRun: o.dryRun,
			Excluded: nonNil(rep.Excluded), Skipped: nonNil(rep.Skipped), Sanitized: nonNil(rep.Sanitized), Stats: stats,
			BaseNote: baseNote(o, rep)}
		enc := json.NewEncoder(out)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		return enc.Encode(j)
	}
	// Text: the result on stdout; the report on stderr (on stdout for a dry run, where it
	// is the result).
	rw := errw
	if o.dryRun {
		rw = out
	}
	for _, l := range frontend.SnapshotReport(rep, o.dryRun) {
		fmt.Fprintln(rw, l)
	}
	if n := baseNote(o, rep); n != "" {
		fmt.Fprintln(errw, n)
	}
	if o.dryRun {
		fmt.Fprintf(out, "dry run: nothing created; would copy %d files, %d dirs, %d symlinks, %d bytes\n",
			stats.Files, stats.Dirs, stats.Symlinks, stats.Bytes)
		return nil
	}
	fmt.Fprintf(rw, "%d files (%d reflinked, %d copied), %d dirs, %d symlinks, %d bytes in %s\n",
		stats.Files, stats.Reflinked, stats.Copied, stats.Dirs, stats.Symlinks, stats.Bytes, rep.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(out, "id %s\nsnapshot %s\n", id, diff.Escape(snap))
	return nil
}

// baseNote explains, for --keep-base, why fewer base copies than copied files were kept
// ("" when all were, or without --keep-base): base copies are reflinks (FICLONE), never
// full copies, so on ext4 or tmpfs there are none and review offers no three-way merge.
func baseNote(o sessionNewOpts, rep *snapshot.Report) string {
	if !o.keepBase || o.dryRun || rep.Copied == 0 {
		return ""
	}
	if rep.BaseFiles == 0 {
		return "--keep-base: no base copies kept: the filesystem cannot reflink (FICLONE) and brood keeps no full copies;\n" +
			"  brood review offers no three-way merge (m) for this session. Use btrfs or xfs (reflink) for the workspace and the state dir."
	}
	return fmt.Sprintf("--keep-base: base copies kept for %d files; %d files could not be reflinked and have none (no three-way merge for them)",
		rep.BaseFiles, rep.Copied)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func newSessionListCommand() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List sessions (id, created, state, mode, workspace)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSessionList(cmd.OutOrStdout(), asJSON)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the sessions as a JSON array")
	return c
}

func runSessionList(out io.Writer, asJSON bool) error {
	ss, err := session.List()
	if err != nil {
		return fmt.Errorf("session list: %w", err)
	}
	if asJSON {
		metas := []session.Meta{}
		for _, s := range ss {
			metas = append(metas, s.Meta)
		}
		enc := json.NewEncoder(out)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		return enc.Encode(metas)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tSTATE\tMODE\tWORKSPACE")
	for _, s := range ss {
		mode := modeSnapshot
		if s.Direct {
			mode = modeDirect // directmode.go: no snapshot, nothing to review
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.ID, s.Created.Local().Format(time.DateTime), s.State, mode, diff.Escape(s.Workspace))
	}
	return tw.Flush()
}

func newSessionRmCommand() *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "rm ID...",
		Short: "Remove sessions and their snapshots",
		Long: `Remove each session ID: its snapshot, manifest, base copies and journal.
A session whose VM is running is refused (exit 3) unless --force, which stops the VM
through the helper first. A session marked running whose VM is gone is removed.`,
		Args: namedArgs(1, -1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSessionRm(cmd.Context(), cmd.OutOrStdout(), args, force)
		},
	}
	c.Flags().BoolVar(&force, "force", false, "remove even a session whose VM is running (the VM is stopped first)")
	return c
}

func runSessionRm(ctx context.Context, out io.Writer, ids []string, force bool) error {
	for _, id := range ids {
		if !session.ValidID(id) {
			return usageErr("session rm: %q is not a session id", id)
		}
	}
	for _, id := range ids {
		s, err := session.Open(id)
		if err != nil {
			return fmt.Errorf("session rm: %w", err)
		}
		stopped, err := newWorkflow(nil).Discard(orBackground(ctx), s, force)
		if stopped {
			fmt.Fprintf(out, "stopped the VM of %s\n", id)
		}
		if err != nil {
			return cliErr(err)
		}
		fmt.Fprintf(out, "removed %s\n", id)
	}
	return nil
}

func newSessionStopCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "stop ID",
		Short: "Stop the VM of a session (its brood run then goes on to the review)",
		Long: `Ask the helper to stop the VM using session ID's snapshot and mark the session
stopped, so that brood diff, review and apply can read it. A session marked running
whose VM is already gone (brood was killed) is only marked stopped.`,
		Args: namedArgs(1, 1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSessionStop(cmd.Context(), cmd.OutOrStdout(), args[0])
		},
	}
}

func runSessionStop(ctx context.Context, out io.Writer, id string) error {
	if !session.ValidID(id) {
		return usageErr("session stop: %q is not a session id", id)
	}
	s, err := session.Open(id)
	if err != nil {
		return fmt.Errorf("session stop: %w", err)
	}
	if s.State != session.StateRunning {
		fmt.Fprintf(out, "session %s has no running VM (state %s)\n", id, s.State)
		return nil
	}
	if _, err := newWorkflow(nil).Stop(orBackground(ctx), s); err != nil {
		return cliErr(err)
	}
	fmt.Fprintf(out, "session %s stopped; brood review %s reviews it\n", id, id)
	return nil
}
