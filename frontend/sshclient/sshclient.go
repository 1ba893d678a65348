// Package sshclient is brood's SSH client to the guest (golang.org/x/crypto/ssh): one
// connection per VM over the stream the helper's Attach call returned, authenticated with
// a per-session ephemeral ed25519 key, accepting only the host key the helper generated
// for the guest (pinned; no known_hosts, no trust on first use), preferring
// chacha20-poly1305 (2–3× AES-GCM's throughput under TCG, which emulates no AES-NI). Run
// runs one command or login shell in a session, with or without a PTY, and reports its
// exit status.
//
// Privilege: none; it runs in brood as the developer.
package sshclient

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"brood.dev/brood/sandbox/guestcfg"
)

// NewKey returns a fresh ed25519 client key and its public half in authorized_keys
// format ("ssh-ed25519 AAAA..."), the form api.StartVMArgs.ClientKey takes. The key
// lives only in this process's memory.
func NewKey() (ssh.Signer, string, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, "", fmt.Errorf("generate client key: %w", err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, "", fmt.Errorf("client key signer: %w", err)
	}
	return s, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey()))), nil
}

// ParseHostKey parses the guest's host key in authorized_keys format (api.VMInfo.HostKey).
func ParseHostKey(s string) (ssh.PublicKey, error) {
	k, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("parse guest host key: %w", err)
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return nil, fmt.Errorf("parse guest host key: %w", ErrTrailingKeys)
	}
	return k, nil
}

// pinned returns a HostKeyCallback that accepts exactly want and otherwise fails with
// ErrHostKey naming both fingerprints.
func pinned(want ssh.PublicKey) ssh.HostKeyCallback {
	wb := want.Marshal()
	return func(_ string, _ net.Addr, got ssh.PublicKey) error {
		if string(got.Marshal()) != string(wb) {
			return fmt.Errorf("%w: got %s, want %s", ErrHostKey, ssh.FingerprintSHA256(got), ssh.FingerprintSHA256(want))
		}
		return nil
	}
}

// Handshake runs the SSH handshake on nc (the stream to the guest's SSH server) as user
// with key, accepting only hostKey. It waits for the guest to boot: the stream is
// connected to the VMM long before the guest answers, so the handshake is bounded by
// ctx's deadline (or timeout when ctx has none); nc is closed on failure.
func Handshake(ctx context.Context, nc net.Conn, user string, key ssh.Signer, hostKey ssh.PublicKey, timeout time.Duration) (*ssh.Client, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(timeout)
	}
	cfg := &ssh.ClientConfig{
		Config:            ssh.Config{Ciphers: guestcfg.Ciphers},
		User:              user,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(key)},
		HostKeyCallback:   pinned(hostKey),
		HostKeyAlgorithms: []string{hostKey.Type()},
	}
	if err := nc.SetDeadline(deadline); err != nil {
		nc.Close()
		return nil, fmt.Errorf("ssh handshake with guest: set deadline: %w", err)
	}
	// A cancelled ctx interrupts the handshake by expiring the deadline.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	sc, chans, reqs, err := ssh.NewClientConn(nc, "brood-guest", cfg)
	stop()
	if err != nil {
		nc.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ssh handshake with guest: %w", ctx.Err())
		}
		return nil, fmt.Errorf("ssh handshake with guest: %w", err)
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		sc.Close()
		return nil, fmt.Errorf("ssh handshake with guest: clear deadline: %w", err)
	}
	return ssh.NewClient(sc, chans, reqs), nil
}

// WindowSize is a terminal size in character cells.
type WindowSize struct{ Rows, Cols int }

// Options describe one session.
type Options struct {
	// Command is the command line the guest runs with /bin/sh -c; empty means a login
	// shell (the SSH "shell" request).
	Command string
	// Env is sent as "env" requests (name, value) before the command starts.
	Env [][2]string
	// PTY requests a pseudo-terminal of type Term and size Size.
	PTY  bool
	Term string
	Size WindowSize
	// Resize delivers window size changes (forwarded as "window-change"); may be nil.
	Resize <-chan WindowSize
	// Stdin, Stdout and Stderr connect the session; nil Stdin is empty input.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Agent asks the guest to forward an SSH agent to the command
	// (auth-agent-req@openssh.com); the caller serves the auth-agent@openssh.com
	// channels the guest opens on the client.
	Agent bool
}

// Run runs one session on c and returns the command's exit status (128+n for a signal,
// as the guest reports it). It returns an error when the session could not start, the
// connection was lost before an exit status arrived (ErrNoExitStatus), or ctx ended
// (the session is closed; the error wraps ctx.Err()).
func Run(ctx context.Context, c *ssh.Client, o Options) (int, error) {
	s, err := c.NewSession()
	if err != nil {
		return -1, fmt.Errorf("open ssh session: %w", err)
	}
	defer s.Close()
	if o.Agent {
		if err := agent.RequestAgentForwarding(s); err != nil {
			return -1, fmt.Errorf("request agent forwarding: %w", err)
		}
	}
	for _, kv := range o.Env {
		if err := s.Setenv(kv[0], kv[1]); err != nil {
			return -1, fmt.Errorf("send env %s: %w", kv[0], err)
		}
	}
	if o.PTY {
		term := o.Term
		if term == "" {
			term = "xterm-256color"
		}
		rows, cols := o.Size.Rows, o.Size.Cols
		if rows <= 0 || cols <= 0 {
			rows, cols = 24, 80
		}
		if err := s.RequestPty(term, rows, cols, ssh.TerminalModes{ssh.ECHO: 1}); err != nil {
			return -1, fmt.Errorf("request pty: %w", err)
		}
	}
	outW, errW := &recordingWriter{w: o.Stdout}, &recordingWriter{w: o.Stderr}
	s.Stdin = o.Stdin
	if o.Stdout != nil {
		s.Stdout = outW
	}
	if o.Stderr != nil {
		s.Stderr = errW
	}
	if o.Command == "" {
		err = s.Shell()
	} else {
		err = s.Start(o.Command)
	}
	if err != nil {
		return -1, fmt.Errorf("start %s: %w", describe(o.Command), err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	for {
		select {
		case err := <-done:
			return exitStatus(err, o.Command, outW, errW)
		case ws := <-o.Resize:
			// Best effort: a lost window change only leaves the old size.
			_ = s.WindowChange(ws.Rows, ws.Cols)
		case <-ctx.Done():
			select {
			case err := <-done: // finished at the same moment: report it
				return exitStatus(err, o.Command, outW, errW)
			default:
			}
			s.Close()
			return -1, fmt.Errorf("%s: %w", describe(o.Command), ctx.Err())
		}
	}
}

func describe(cmd string) string {
	if cmd == "" {
		return "login shell"
	}
	return "command"
}

// recordingWriter remembers the first error of the writer it wraps, so that a failed
// local write (a full disk under a redirected stdout) is told apart from the stdin copy
// failing because the guest hung up after its exit status.
type recordingWriter struct {
	w   io.Writer
	err error
}

func (r *recordingWriter) Write(p []byte) (int, error) {
	n, err := r.w.Write(p)
	if err != nil && r.err == nil {
		r.err = err
	}
	return n, err
}

// exitStatus turns Session.Wait's error into an exit status. Wait returns the exit
// status's error first, else the first copy error: after an exit status arrived, only a
// failed write of the output is an error.
func exitStatus(err error, cmd string, outs ...*recordingWriter) (int, error) {
	var ee *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		return ee.ExitStatus(), nil
	case errors.As(err, &missing), errors.Is(err, io.EOF):
		return -1, fmt.Errorf("%s: %w", describe(cmd), ErrNoExitStatus)
	}
	for _, o := range outs {
		if o.err != nil {
			return 0, fmt.Errorf("%s: write output: %w", describe(cmd), o.err)
		}
	}
	return 0, nil // exit status 0; the stdin copy failed as the guest hung up
}
