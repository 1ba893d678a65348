package sshclient

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/sandbox/guestcfg"
)

// ErrTrustCARefused reports a guest that answered the trust-CA request with false (the
// reason is in the guest's log).
var ErrTrustCARefused = errors.New("the guest refused the session CA")

// PutTrustCA makes the guest trust the session CA certificate pemData
// (guestcfg.TrustCARequest) on a session of its own, before the agent's session starts.
// It returns an error wrapping guestcfg.ErrTrustCA without sending anything when pemData
// fails guestcfg.TrustCA.Check, ErrTrustCARefused when the guest says no, ctx's error
// when ctx ends first.
func PutTrustCA(ctx context.Context, c *ssh.Client, pemData []byte) error {
	t := guestcfg.TrustCA{PEM: pemData}
	if err := t.Check(); err != nil {
		return err
	}
	s, err := c.NewSession()
	if err != nil {
		return fmt.Errorf("trust the session CA in the guest: open ssh session: %w", err)
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	ok, err := s.SendRequest(guestcfg.TrustCARequest, true, ssh.Marshal(t))
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("trust the session CA in the guest: %w", ctx.Err())
	case err != nil:
		return fmt.Errorf("trust the session CA in the guest: %w", err)
	case !ok:
		return fmt.Errorf("trust the session CA in the guest: %w", ErrTrustCARefused)
	}
	return nil
}
