// Package helperclient is the frontend's view of broodd-helper: the few calls the session
// workflow (package frontend) makes, as an interface, and its implementation
// over the helper socket (package helper/api). frontend/fakehelper implements the same
// interface in memory for tests.
//
// Privilege: none; it runs in brood as the developer and only dials the helper's socket.
package helperclient

import (
	"context"
	"errors"
	"fmt"
	"os"

	"brood.dev/brood/helper/api"
)

// Helper opens connections to the helper. Each Client it returns is used by one goroutine
// at a time; a run holds two (its calls, and the WaitVM that watches the VMM).
type Helper interface {
	// Dial connects and says hello. Errors wrap the dial error (unix.ENOENT: no helper
	// socket, unix.ECONNREFUSED: nobody listens) or the helper's typed *api.Error.
	Dial(ctx context.Context) (Client, error)
}

// Client is one helper connection: the calls of package helper/api that the workflow
// makes (their docs give the contracts). Helper errors are *api.Error.
type Client interface {
	// Caps is the helper's answer to Hello on this connection.
	Caps() api.Capabilities
	CreateSession(ctx context.Context, share *os.File) (api.Session, error)
	StartVM(ctx context.Context, args api.StartVMArgs) (api.VMInfo, error)
	Attach(ctx context.Context, id string) (*os.File, error)
	WaitVM(ctx context.Context, id string) (api.VMExit, error)
	// EgressLog is the ended session's whole egress decision log, a read-only file (an
	// older helper answers CodeUnknownCall).
	EgressLog(ctx context.Context, id string) (*os.File, error)
	// RefreshedLogins is the ended session's refreshed OAuth logins with their new real
	// values, answered once (an older helper answers CodeUnknownCall).
	RefreshedLogins(ctx context.Context, id string) (api.RefreshedLogins, error)
	StopVM(ctx context.Context, id string) error
	DestroySession(ctx context.Context, id string) error
	ListSessions(ctx context.Context) ([]api.Session, error)
	// ResolvePolicy is the effective policy a StartVM with the same egress inputs gets
	// (an older helper answers CodeUnknownCall).
	ResolvePolicy(ctx context.Context, args api.ResolvePolicyArgs) (api.Policy, error)
	Close() error
}

// Socket is the helper listening on a unix socket path (api.SocketPath() by default).
type Socket struct{ Path string }

var _ Helper = Socket{}

// Dial connects to the helper at s.Path, bounded by api.DefaultCallTimeout when ctx has
// no deadline. The returned Client retries Attach, WaitVM, EgressLog, RefreshedLogins, StopVM, DestroySession,
// ListSessions and ResolvePolicy once on a new connection when the connection broke under them (the
// helper closed an idle connection during a slow boot); CreateSession and StartVM are
// never retried (they are not idempotent).
func (s Socket) Dial(ctx context.Context) (Client, error) {
	c, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{socket: s, c: c}, nil
}

func (s Socket) dial(ctx context.Context) (*api.Client, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, api.DefaultCallTimeout)
		defer cancel()
	}
	return api.Dial(ctx, s.Path)
}

// conn is a helper connection that survives being closed under it: a retried call that
// fails because the connection broke (not with a helper *api.Error) runs once more on a
// new connection. Without it a VM was orphaned when StopVM met a connection the helper
// had closed during a slow boot.
type conn struct {
	socket Socket
	c      *api.Client
}

// do runs call on the connection, and once more on a fresh one when the connection broke.
func (h *conn) do(ctx context.Context, call func(*api.Client) error) error {
	err := call(h.c)
	if err == nil || !ConnBroken(ctx, err) {
		return err
	}
	nc, derr := h.socket.dial(ctx)
	if derr != nil {
		return fmt.Errorf("%w (and reconnecting failed: %v)", err, derr)
	}
	h.c.Close()
	h.c = nc
	return call(h.c)
}

// ConnBroken reports whether err is the connection failing (EOF, EPIPE, ECONNRESET, a
// closed socket) rather than the helper's answer or the caller's own cancellation.
func ConnBroken(ctx context.Context, err error) bool {
	var e *api.Error
	return !errors.As(err, &e) && ctx.Err() == nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

func (h *conn) Caps() api.Capabilities { return h.c.Caps }

func (h *conn) CreateSession(ctx context.Context, share *os.File) (api.Session, error) {
	return h.c.CreateSession(ctx, share)
}

func (h *conn) StartVM(ctx context.Context, args api.StartVMArgs) (api.VMInfo, error) {
	return h.c.StartVM(ctx, args)
}

func (h *conn) Attach(ctx context.Context, id string) (f *os.File, err error) {
	err = h.do(ctx, func(c *api.Client) (err error) {
		f, err = c.Attach(ctx, id)
		return err
	})
	return f, err
}

func (h *conn) WaitVM(ctx context.Context, id string) (e api.VMExit, err error) {
	err = h.do(ctx, func(c *api.Client) (err error) {
		e, err = c.WaitVM(ctx, id)
		return err
	})
	return e, err
}

func (h *conn) EgressLog(ctx context.Context, id string) (f *os.File, err error) {
	err = h.do(ctx, func(c *api.Client) (err error) {
		f, err = c.EgressLog(ctx, id)
		return err
	})
	return f, err
}

func (h *conn) RefreshedLogins(ctx context.Context, id string) (r api.RefreshedLogins, err error) {
	err = h.do(ctx, func(c *api.Client) (err error) {
		r, err = c.RefreshedLogins(ctx, id)
		return err
	})
	return r, err
}

func (h *conn) StopVM(ctx context.Context, id string) error {
	return h.do(ctx, func(c *api.Client) error { return c.StopVM(ctx, id) })
}

func (h *conn) DestroySession(ctx context.Context, id string) error {
	return h.do(ctx, func(c *api.Client) error { return c.DestroySession(ctx, id) })
}

func (h *conn) ListSessions(ctx context.Context) (l []api.Session, err error) {
	err = h.do(ctx, func(c *api.Client) (err error) {
		l, err = c.ListSessions(ctx)
		return err
	})
	return l, err
}

func (h *conn) ResolvePolicy(ctx context.Context, args api.ResolvePolicyArgs) (p api.Policy, err error) {
	err = h.do(ctx, func(c *api.Client) (err error) {
		p, err = c.ResolvePolicy(ctx, args)
		return err
	})
	return p, err
}

func (h *conn) Close() error { return h.c.Close() }
