package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/session"
)

// idArgs is the cobra.PositionalArgs of a command whose first argument is a session ID:
// a missing or malformed ID is a usage error (exit 2) that points to brood session list,
// checked before anything else (terminal, flags). exact allows no further arguments.
func idArgs(name string, exact bool) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usageErr("brood %s ID: a session id is needed (see brood session list)", name)
		}
		if !session.ValidID(args[0]) {
			return usageErr("%s: invalid session id %s (see brood session list)", name, diff.Escape(args[0]))
		}
		if exact && len(args) > 1 {
			return usageErr("brood %s ID: one session id only, got %d arguments", name, len(args))
		}
		return nil
	}
}

// openSession opens session id for a command; an invalid or unknown id is a usage error
// (exit 2) pointing to brood session list.
func openSession(id string) (*session.Session, error) {
	sess, err := session.Open(id)
	if errors.Is(err, session.ErrInvalidID) || errors.Is(err, session.ErrNotFound) {
		return nil, usageErr("%v (see brood session list)", err)
	}
	return sess, err
}

// openReviewable opens session id for command op (diff, review, apply, undo, ff) as
// openSession does, and refuses a session that ran in direct mode (exit 2,
// frontend.RefuseDirect): it has no snapshot and nothing to review.
func openReviewable(op, id string) (*session.Session, error) {
	sess, err := openSession(id)
	if err != nil {
		return nil, err
	}
	if err := frontend.RefuseDirect(op, sess); err != nil {
		return nil, cliErr(err)
	}
	return sess, nil
}

// workspaceRel turns a PATH argument into a '/'-separated path relative to the workspace
// ws: an absolute path must lie inside ws; a relative one is taken relative to the current
// directory when that is inside ws (so `cd src && brood apply ID a.go` means src/a.go),
// else relative to ws itself. Paths are compared after resolving symlinks in ws and the
// current directory, never in the argument's last components (they may not exist in W).
func workspaceRel(ws, p string) (string, error) {
	root := ws
	if r, err := filepath.EvalSymlinks(ws); err == nil {
		root = r
	}
	abs := ""
	switch {
	case filepath.IsAbs(p):
		abs = filepath.Clean(p)
		if r, err := filepath.Rel(ws, abs); err == nil && local(r) {
			return slashRel(r), nil
		}
	default:
		if cwd, err := os.Getwd(); err == nil {
			if r, err := filepath.EvalSymlinks(cwd); err == nil {
				cwd = r
			}
			if r, err := filepath.Rel(root, cwd); err == nil && (r == "." || local(r)) {
				abs = filepath.Join(cwd, p)
			}
		}
		if abs == "" {
			abs = filepath.Join(root, p)
		}
	}
	r, err := filepath.Rel(root, abs)
	if err != nil || !local(r) {
		if r == "." {
			return "", fmt.Errorf("names the workspace itself")
		}
		return "", fmt.Errorf("is outside the workspace %s", diff.Escape(ws))
	}
	return slashRel(r), nil
}

// local reports whether the relative path r stays below its base (not ".", not "..").
func local(r string) bool {
	return r != "." && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator)) && !filepath.IsAbs(r)
}

func slashRel(r string) string { return filepath.ToSlash(r) }

// workspacePaths maps the PATH arguments of command name with workspaceRel; a path
// outside the workspace is a usage error.
func workspacePaths(name, ws string, paths []string) ([]string, error) {
	out := make([]string, len(paths))
	for i, p := range paths {
		r, err := workspaceRel(ws, p)
		if err != nil {
			return nil, usageErr("%s: PATH %s %v", name, diff.Escape(p), err)
		}
		out[i] = r
	}
	return out, nil
}
