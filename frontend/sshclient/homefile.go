package sshclient

import (
	"context"
	"fmt"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/sandbox/guestcfg"
)

// PutHomeFiles writes files into the agent's home in the guest, before the agent runs:
// each in a session channel of its own with one guestcfg.HomeFileRequest, answered by
// the guest once the file is in place. The data exists only in this process and the
// guest's memory (the home is a tmpfs). It returns the first error: a file that fails
// HomeFile.Check, a refusal (ErrHomeFileRefused), a lost connection, or ctx's end.
func PutHomeFiles(ctx context.Context, c *ssh.Client, files []guestcfg.HomeFile) error {
	for _, f := range files {
		if err := putHomeFile(ctx, c, f); err != nil {
			return err
		}
	}
	return nil
}

func putHomeFile(ctx context.Context, c *ssh.Client, f guestcfg.HomeFile) error {
	if err := f.Check(); err != nil {
		return err
	}
	s, err := c.NewSession()
	if err != nil {
		return fmt.Errorf("write ~/%s in the guest: open ssh session: %w", f.Path, err)
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	ok, err := s.SendRequest(guestcfg.HomeFileRequest, true, ssh.Marshal(f))
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("write ~/%s in the guest: %w", f.Path, ctx.Err())
	case err != nil:
		return fmt.Errorf("write ~/%s in the guest: %w", f.Path, err)
	case !ok:
		return fmt.Errorf("write ~/%s in the guest: %w", f.Path, ErrHomeFileRefused)
	}
	return nil
}
