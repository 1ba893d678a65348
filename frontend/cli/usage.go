package cli

import (
	"strings"

	"github.com/spf13/cobra"
)

// isCobraUsageError recognises the argument and command errors cobra returns as plain
// errors (cobra has no typed errors for them).
func isCobraUsageError(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag",
		"accepts ", "requires at least", "requires at most", "requires exactly", "invalid argument",
		"flag needs an argument", "required flag"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// namedArgs accepts at least min and at most max positional arguments (max < 0: no limit). A missing or extra argument is a usage error naming the
// arguments by their placeholders (names, as in the command's Use line), e.g.
// "run-image: missing IMAGE and COMMAND (usage: brood run-image IMAGE [flags] -- CMD...)".
func namedArgs(min, max int, names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min {
			missing := names[len(args):min]
			return usageErr("%s: missing %s (usage: %s)", cmd.Name(), joinAnd(missing), cmd.UseLine())
		}
		if max >= 0 && len(args) > max {
			return usageErr("%s: too many arguments: takes %s, got %d (usage: %s)", cmd.Name(), joinAnd(names), len(args), cmd.UseLine())
		}
		return nil
	}
}

// joinAnd joins names as "A", "A and B", "A, B and C".
func joinAnd(names []string) string {
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
