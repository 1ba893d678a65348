package frontend

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/netpolicy"
)

// This file is direct mode, the one way around the review: `brood run --workspace-mode
// direct --yes AGENT` gives the VM the workspace itself, read-write, with no snapshot and
// no review. It exists only as these command-line flags: no configuration file can turn it
// on (the user config and .brood.toml are decoded strictly, so a key for it is an
// unknown key that stops the run), and the helper refuses it when the system policy says
// forbid_direct = true. runVM calls it with one line at each step it changes.

// Workspace modes of brood run.
const (
	modeSnapshot = "snapshot"
	modeDirect   = "direct"
)

// directFlags are brood run's --workspace-mode and --yes.
type directFlags struct {
	mode string
	yes  bool
}

// addDirectFlags registers --workspace-mode and --yes on brood run.
func addDirectFlags(c *cobra.Command, f *directFlags) {
	c.Flags().StringVar(&f.mode, "workspace-mode", modeSnapshot,
		"snapshot: the agent works on a copy you review; direct: on the workspace itself, read-write, with NO snapshot and NO review (needs --yes)")
	c.Flags().BoolVarP(&f.yes, "yes", "y", false, "with --workspace-mode direct: confirm running without snapshot and review")
}

// on reports whether the run is in direct mode.
func (f directFlags) on() bool { return f.mode == modeDirect }

// check refuses an unknown mode and direct mode without --yes (usage errors).
func (f directFlags) check() error {
	switch f.mode {
	case "", modeSnapshot:
		return nil
	case modeDirect:
		if !f.yes {
			return usageErr("run: --workspace-mode direct gives the agent your workspace itself, read-write, with no snapshot, no review and no undo: add --yes to run so")
		}
		return nil
	}
	return usageErr("run: --workspace-mode %s: choose snapshot or direct", diff.Escape(f.mode))
}

// sessionFor creates the run's session: the snapshot (takeSnapshot), or in direct mode a
// session without one, after printing on errw what direct mode means.
func sessionFor(ctx context.Context, prog *progress, f runFlags, agent string, errw io.Writer) (*session.Session, error) {
	if !f.direct.on() {
		return takeSnapshot(ctx, prog, f.workspace, agent)
	}
	fi, err := os.Stat(f.workspace)
	if err != nil || !fi.IsDir() {
		return nil, usageErr("run: workspace %s is not a directory", diff.Escape(f.workspace))
	}
	sess, err := session.Create(f.workspace)
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	sess.Agent, sess.Direct = agent, true
	if err := sess.SetState(session.StateReady); err != nil {
		return nil, err
	}
	fmt.Fprintf(errw, "WARNING: DIRECT MODE: the VM mounts %s itself, read-write.\n"+
		"WARNING: no snapshot, no review, no undo: every write of the agent lands in the workspace as it happens.\n",
		diff.Escape(sess.Workspace))
	prog.Printf("session %s (workspace %s, direct)", sess.ID, diff.Escape(sess.Workspace))
	return sess, nil
}

// shareDir is the directory the VM mounts: the snapshot, or the workspace in direct mode.
func shareDir(sess *session.Session) string {
	if sess.Direct {
		return sess.Workspace
	}
	return sess.SnapshotDir()
}

// reviewOrDirect runs the review gate, or in direct mode says there is nothing to review.
func reviewOrDirect(v *vmSession, cmd *cobra.Command, tty bool, errw io.Writer) error {
	if !v.sess.Direct {
		return v.reviewGate(cmd, tty, errw)
	}
	fmt.Fprintf(errw, "direct mode: nothing to review; the agent's changes are in %s\n", diff.Escape(v.sess.Workspace))
	return nil
}

// directPolicyLine is the line of `brood policy show` saying whether the system policy
// allows direct mode.
func directPolicyLine(forbidden bool) string {
	if forbidden {
		return "workspace-mode direct\tforbidden\t(" + string(netpolicy.LayerSystem) + ")"
	}
	return "workspace-mode direct\tallowed with --yes\t(" + string(netpolicy.LayerSystem) + ")"
}
