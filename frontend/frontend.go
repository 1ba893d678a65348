// Package frontend implements the brood command line (cobra commands, one cmd_*.go file
// each): configuration layering, session directories, `brood run` (snapshot, the helper
// calls that boot and stop the VM, the SSH terminal), and the diff, review, apply and undo
// of the review gate, which it drives through its subpackages.
//
// Privilege: none; it runs in brood as the developer and must never link helper/,
// nftables, netlink or Landlock code (deps_test.go).
package frontend

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

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

// commands lists constructors of the top-level subcommands; files of this package append
// to it from init functions so that independent commands do not edit one shared file.
var commands []func() *cobra.Command

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
	for _, mk := range commands {
		root.AddCommand(mk())
	}
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
