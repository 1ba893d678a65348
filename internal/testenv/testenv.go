// Package testenv gates tests on the capabilities they need.
//
// A missing capability makes the test skip with a reason on a developer laptop, and fail
// when the environment variable CI is "true": in CI every tier-2 (real kernel) and tier-3
// (real VM) test must really run (docs/ARCHITECTURE.md, "Testing tiers").
//
// Privilege: none; tests only.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the tests run under CI (CI=true), where skips are failures.
func InCI() bool { return os.Getenv("CI") == "true" }

// Skip skips t with reason, or fails it when InCI.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if InCI() {
		t.Fatalf("required capability missing in CI: %s", reason)
	}
	t.Skip(reason)
}

// RequireRoot skips (fails in CI) unless the test runs as uid 0.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "test needs root (real namespaces, other uids or devices)")
	}
}

// RequireCommand skips (fails in CI) unless name is found on PATH, and returns its path.
func RequireCommand(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Skip(t, "test needs the command "+name+" on PATH: "+err.Error())
	}
	return p
}

// RequireFile skips (fails in CI) unless path exists.
func RequireFile(t testing.TB, path, why string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Skip(t, why+": "+err.Error())
	}
}
