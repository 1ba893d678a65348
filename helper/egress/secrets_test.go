package egress

import (
	"strings"
	"testing"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
)

// TestBuildTerminatorTestRoots: an egress process whose binary did not call
// AcceptTestRoots (broodd-helper) refuses the session when the daemon offers test
// roots; one that did builds the terminator and answers the CA.
func TestBuildTerminatorTestRoots(t *testing.T) {
	_, _, rootPEM := testenv.TestCAPEM(t, "api.bound.test")
	m := procSecrets{TestRoots: rootPEM, Secrets: api.SessionSecrets{Bindings: []api.SecretBinding{
		{Name: "$API_KEY", Placeholder: phAPI, Value: canaryAPI, Hosts: []string{"api.bound.test"}}}}}
	defer func(v bool) { acceptTestRoots = v }(acceptTestRoots)
	acceptTestRoots = false
	if _, _, err := buildTerminator(m, nil); err == nil || !strings.Contains(err.Error(), "test roots offered to a production egress process") {
		t.Fatalf("production process with test roots: %v", err)
	}
	acceptTestRoots = true
	if tt, pem, err := buildTerminator(m, nil); err != nil || !tt.Covers("api.bound.test") || !strings.Contains(string(pem), "BEGIN CERTIFICATE") {
		t.Fatalf("test process with test roots: %v", err)
	}
}
