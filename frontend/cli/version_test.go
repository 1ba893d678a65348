package cli

import (
	"bytes"
	"strings"
	"testing"

	"brood.dev/brood/internal/version"
)

// TestRootVersionFlag: `brood --version` prints the build version (internal/version).
func TestRootVersionFlag(t *testing.T) {
	root := NewRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"--version"})
	if err := root.Execute(); err != nil {
		t.Fatalf("brood --version: %v", err)
	}
	if got, want := strings.TrimSpace(out.String()), "brood version "+version.String(); got != want {
		t.Errorf("brood --version printed %q, want %q", got, want)
	}
}
