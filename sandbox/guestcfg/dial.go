package guestcfg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/crypto/ssh"
)

// DialTimeout bounds Dial when ctx has no deadline: a guest that never boots must not
// hang the client (QEMU accepts the connection long before the guest answers).
const DialTimeout = 2 * time.Minute

// Dial connects to the guest's SSH server through the VMM's unix socket at path,
// authenticating with k.ClientSigner as user and accepting only k's pinned host key.
// It retries while the socket does not exist yet.
func Dial(ctx context.Context, path, user string, k *Keys) (*ssh.Client, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DialTimeout)
	}
	cfg := &ssh.ClientConfig{
		Config:            ssh.Config{Ciphers: Ciphers},
		User:              user,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(k.ClientSigner)},
		HostKeyCallback:   ssh.FixedHostKey(k.HostSigner.PublicKey()),
		HostKeyAlgorithms: []string{k.HostSigner.PublicKey().Type()},
	}
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return nil, fmt.Errorf("dial guest ssh %s: %w", path, err)
			}
			var op *net.OpError
			if errors.As(err, &op) {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			return nil, fmt.Errorf("dial guest ssh %s: %w", path, err)
		}
		c.SetDeadline(deadline)
		sc, chans, reqs, err := ssh.NewClientConn(c, "brood-guest", cfg)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("ssh handshake with guest %s: %w", path, err)
		}
		c.SetDeadline(time.Time{})
		return ssh.NewClient(sc, chans, reqs), nil
	}
}
