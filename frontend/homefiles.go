package frontend

import (
	"context"
	"fmt"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/sshclient"
)

// prepareHome prints the spec's notes and writes its HomeFiles into the agent's home
// over the session's SSH connection, before the agent starts. It returns the first write
// error, naming the file.
func (v *runningVM) prepareHome(ctx context.Context, client *ssh.Client) error {
	for _, n := range v.spec.Notes {
		v.prog.Printf("%s", diff.Escape(n))
	}
	if len(v.spec.HomeFiles) == 0 {
		return nil
	}
	if err := sshclient.PutHomeFiles(ctx, client, v.spec.HomeFiles); err != nil {
		return fmt.Errorf("prepare the agent's home: %w", err)
	}
	v.prog.Printf("agent home: %d file(s) written", len(v.spec.HomeFiles))
	return nil
}
