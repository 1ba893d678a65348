// Package cli is the brood command line: the cobra commands (one cmd_*.go file per
// command, listed in one literal table, commands), configuration layering (config.toml,
// .brood.toml, agents, egress flags) and everything the commands print. A run, a review,
// an apply, an undo and a stop are calls of the session workflow in package frontend;
// this package turns flags into its requests and its results into text and exit codes.
//
// Privilege: none; it runs in brood as the developer and must never link helper/,
// nftables, netlink or Landlock code (frontend/deps_test.go).
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/helperclient"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/version"
)

// Exit codes of the brood command (documented in README.md).
const (
	ExitOK      = 0 // success
	ExitError   = 1 // an operation failed
	ExitUsage   = 2 // bad flags or arguments
	ExitRefused = 3 // something was refused or conflicted; the output names each path and reason
)

// ExitError carries an exit code through cobra's RunE.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErr marks err as a usage error (exit 2).
func usageErr(format string, a ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, a...)}
}

// refusedErr marks err as "something was refused or conflicted" (exit 3).
func refusedErr(err error) error { return &exitError{code: ExitRefused, err: err} }

// cliErr gives the workflow's marked errors their exit code: *frontend.InvalidError
// exits ExitUsage, *frontend.RefusedError ExitRefused; other errors pass unchanged.
func cliErr(err error) error {
	var inv *frontend.InvalidError
	var ref *frontend.RefusedError
	var ee *exitError
	switch {
	case err == nil || errors.As(err, &ee):
		return err
	case errors.As(err, &inv):
		return &exitError{code: ExitUsage, err: err}
	case errors.As(err, &ref):
		return &exitError{code: ExitRefused, err: err}
	}
	return err
}

// orBackground is ctx, or context.Background() when ctx is nil (a command run without
// one, as tests do).
func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// newWorkflow returns the session workflow on the helper at api.SocketPath(), reporting
// progress on prog.
func newWorkflow(prog frontend.Progress) *frontend.Workflow {
	socket := api.SocketPath()
	return &frontend.Workflow{
		Helper:       helperclient.Socket{Path: socket},
		Progress:     prog,
		HelperHint:   func(err error) string { return helperHint(err, socket) },
		PoweroffWait: poweroffWait,
		Flush:        flushApply,
	}
}

// commands is the command table: every top-level subcommand of brood, one constructor
// per cmd_*.go file (the help lists them sorted by name).
func commands() []*cobra.Command {
	return []*cobra.Command{
		newRunCommand(),      // cmd_run.go
		newRunImageCommand(), // cmd_run_image.go
		newSessionCommand(),  // cmd_session.go: session new, list, rm, stop
		newDiffCommand(),     // cmd_diff.go
		newReviewCommand(),   // cmd_review.go
		newApplyCommand(),    // cmd_apply.go
		newUndoCommand(),     // cmd_undo.go
		newFFCommand(),       // gitff.go: ff (fast-forward a branch to the applied commits)
		newPolicyCommand(),   // cmd_policy.go: policy show
		newImageCommand(),    // cmd_image.go: image list, build
		newDoctorCommand(),   // cmd_doctor.go
	}
}

// NewRootCommand returns the brood root command with every subcommand attached.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "brood",
		Short:         "Run an AI coding agent in a disposable microVM and review its changes",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.String(),
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: ExitUsage, err: err}
	})
	root.AddCommand(commands()...)
	return root
}

// Main runs the brood command line with args (without the program name) and returns the
// process exit code.
func Main(args []string) int {
	root := NewRootCommand()
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(os.Stderr, "brood: %v\n", err)
	return exitCode(err)
}

// exitCode is the process exit code for a command's error: ExitOK for nil, an
// exitError's own code, ExitUsage for cobra's usage errors, else ExitError.
func exitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	// cobra reports unknown commands and argument-count errors as plain errors.
	if isCobraUsageError(err) {
		return ExitUsage
	}
	return ExitError
}
