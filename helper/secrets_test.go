package helper

import (
	"strings"
	"testing"

	"brood.dev/brood/helper/api"
)

// TestStartVMSecrets: the helper says it takes secret bindings (a session with a network
// hands them to its egress process, egress TestSecretsNetns; one without drops them);
// invalid bindings are refused as a bad request naming the binding, never its value;
// valid ones pass on to the VM start (which fails here: no VM backend).
func TestStartVMSecrets(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.dial(t)
	ctx := t.Context()
	if !c.Caps.Secrets {
		t.Fatal("the helper does not say it takes secret bindings")
	}
	s := createSession(t, c)
	real := "sk-proj-REAL" + strings.Repeat("r", 40)
	bad := &api.SessionSecrets{Bindings: []api.SecretBinding{{Name: "$OPENAI_API_KEY",
		Placeholder: "short", Value: real, Hosts: []string{"api.openai.com"}}}}
	_, err := c.StartVM(ctx, api.StartVMArgs{ID: s.ID, Image: "test", Secrets: bad})
	if callCode(err) != string(api.CodeBadRequest) || !strings.Contains(err.Error(), "$OPENAI_API_KEY") || strings.Contains(err.Error(), real) {
		t.Fatalf("StartVM with invalid secrets: %v", err)
	}
	good := &api.SessionSecrets{Bindings: []api.SecretBinding{{Name: "$OPENAI_API_KEY",
		Placeholder: "sk-proj-" + strings.Repeat("p", 40), Value: real, Hosts: []string{"api.openai.com"}}}}
	_, err = c.StartVM(ctx, api.StartVMArgs{ID: s.ID, Image: "test", Secrets: good})
	if err == nil || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), real) {
		t.Fatalf("StartVM with secrets and no network: %v", err)
	}
}
