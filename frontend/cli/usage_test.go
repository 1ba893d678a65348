package cli

import (
	"strings"
	"testing"
)

// TestMissingArgsNamed: a command run without its positional arguments exits ExitUsage
// and names the missing ones by their placeholders.
func TestMissingArgsNamed(t *testing.T) {
	noHelper(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run-image"}, "missing IMAGE and COMMAND"},
		{[]string{"run-image", "test"}, "missing COMMAND"},
		{[]string{"run"}, "missing AGENT"},
		{[]string{"session", "rm"}, "missing ID"},
		{[]string{"session", "stop"}, "missing ID"},
		{[]string{"session", "stop", "a", "b"}, "too many arguments: takes ID, got 2"},
	} {
		code, _, stderr := broodCode(t, c.args...)
		if code != ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("brood %s: exit %d, want %d and %q:\n%s", strings.Join(c.args, " "), code, ExitUsage, c.want, stderr)
		}
	}
}
