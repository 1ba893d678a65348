package helper

import (
	"strings"
	"testing"

	"brood.dev/brood/helper/api"
)

// TestStartVMRefusesSecrets: this helper does not terminate TLS for placeholders yet
// (Capabilities.Secrets is false), so a StartVM carrying secret bindings is refused as
// unavailable, and the refusal names no value.
func TestStartVMRefusesSecrets(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.dial(t)
	ctx := t.Context()
	if c.Caps.Secrets {
		t.Fatal("the helper claims it swaps placeholders")
	}
	share, err := api.OpenShare(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer share.Close()
	s, err := c.CreateSession(ctx, share)
	if err != nil {
		t.Fatal(err)
	}
	real := "sk-proj-REAL" + strings.Repeat("r", 40)
	secrets := &api.SessionSecrets{Bindings: []api.SecretBinding{{Name: "$OPENAI_API_KEY",
		Placeholder: "sk-proj-" + strings.Repeat("p", 40), Value: real, Hosts: []string{"api.openai.com"}}}}
	_, err = c.StartVM(ctx, api.StartVMArgs{ID: s.ID, Image: "test", Secrets: secrets})
	if callCode(err) != string(api.CodeUnavailable) || strings.Contains(err.Error(), real) {
		t.Fatalf("StartVM with secrets: %v", err)
	}
}
