package cli

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/gitreview"
	"brood.dev/brood/netpolicy"
)

// This file is direct mode, the one way around the review: `brood run --workspace-mode
// direct --yes AGENT` gives the VM the workspace itself, read-write, with no snapshot and
// no review. It exists only as these command-line flags: no configuration file can turn it
// on (the user config and .brood.toml are decoded strictly, so a key for it is an
// unknown key that stops the run), and the helper refuses it when the system policy says
// forbid_direct = true. The session without snapshot is the workflow's (frontend/direct.go);
// runVM and spec call this file with one line at each step they change.

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
			return usageErr("run: --workspace-mode direct gives the agent your workspace itself, read-write, with no snapshot, no review and no undo; " +
				"it reads .git/config credentials and .env files and can write .git/hooks or core.fsmonitor, which run code on this host at your next git command: add --yes to run so")
		}
		return nil
	}
	return usageErr("run: --workspace-mode %s: choose snapshot or direct", diff.Escape(f.mode))
}

// warnDirect says on errw, before anything starts, what a direct run means.
func warnDirect(errw io.Writer, spec frontend.RunSpec) {
	if !spec.VM.Direct {
		return
	}
	ws, err := filepath.Abs(spec.Workspace)
	if err != nil {
		ws = spec.Workspace
	}
	fmt.Fprintf(errw, "WARNING: DIRECT MODE: the VM mounts %s itself, read-write.\n"+
		"WARNING: no snapshot, no review, no undo: every write of the agent lands in the workspace as it happens.\n"+
		"WARNING: the agent reads every file there, credentials too: .git/config (remote URLs with tokens), .env files.\n"+
		"WARNING: it can write .git/hooks or core.fsmonitor in .git/config, which run its code on this host at your next git command.\n",
		diff.Escape(ws))
}

// reviewOrDirect runs the review gate on the run's gate (reviewGate), or for a direct
// session says there is nothing to review. gr is the run's commit review (reviewGate).
func reviewOrDirect(ctx context.Context, wf *frontend.Workflow, res *frontend.RunResult, gr *gitreview.Review, stdio frontend.Stdio, keep bool, errw io.Writer) error {
	if !res.Session.Direct {
		return reviewGate(ctx, wf, res.Gate, gr, stdio, keep, errw)
	}
	fmt.Fprintf(errw, "direct mode: nothing to review; the agent's changes are in %s\n", diff.Escape(res.Session.Workspace))
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
