package cli

import "strings"

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
