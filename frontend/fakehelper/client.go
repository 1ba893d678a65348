package fakehelper

import (
	"context"
	"os"

	"brood.dev/brood/frontend/helperclient"
	"brood.dev/brood/helper/api"
)

// Dial returns an in-memory connection to the fake (it records "hello" like a socket
// connection's handshake). It never fails.
func (h *Helper) Dial(ctx context.Context) (helperclient.Client, error) {
	h.record(api.CallHello)
	return &client{h: h, caps: h.hello()}, nil
}

// client is one in-memory connection; every call is recorded by its wire name.
type client struct {
	h    *Helper
	caps api.Capabilities
}

var _ helperclient.Client = (*client)(nil)

func (c *client) Caps() api.Capabilities { return c.caps }

func (c *client) CreateSession(ctx context.Context, share *os.File) (api.Session, error) {
	c.h.record(api.CallCreateSession)
	return c.h.createSession(share), nil
}

func (c *client) StartVM(ctx context.Context, args api.StartVMArgs) (api.VMInfo, error) {
	c.h.record(api.CallStartVM)
	return c.h.startVM(args)
}

func (c *client) Attach(ctx context.Context, id string) (*os.File, error) {
	c.h.record(api.CallAttach)
	return c.h.attach()
}

func (c *client) WaitVM(ctx context.Context, id string) (api.VMExit, error) {
	c.h.record(api.CallWaitVM)
	return c.h.waitVM(ctx)
}

func (c *client) EgressLog(ctx context.Context, id string) (*os.File, error) {
	c.h.record(api.CallEgressLog)
	return c.h.egressLog()
}

func (c *client) RefreshedLogins(ctx context.Context, id string) (api.RefreshedLogins, error) {
	c.h.record(api.CallRefreshedLogins)
	return c.h.refreshedLogins()
}

func (c *client) StopVM(ctx context.Context, id string) error {
	c.h.record(api.CallStopVM)
	c.h.end(api.OutcomeStopped)
	return nil
}

func (c *client) DestroySession(ctx context.Context, id string) error {
	c.h.record(api.CallDestroySession)
	return nil
}

func (c *client) ListSessions(ctx context.Context) ([]api.Session, error) {
	c.h.record(api.CallListSessions)
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	return append([]api.Session(nil), c.h.Sessions...), nil
}

func (c *client) ResolvePolicy(ctx context.Context, args api.ResolvePolicyArgs) (api.Policy, error) {
	c.h.record(api.CallResolvePolicy)
	return c.h.resolvePolicy(args)
}

func (c *client) Close() error { return nil }
