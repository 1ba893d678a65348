package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultCallTimeout bounds one call when the context has no deadline.
const DefaultCallTimeout = 30 * time.Second

// Client is a typed helper client on one connection. It is not safe for concurrent use;
// open one Client per goroutine.
type Client struct {
	conn *Conn
	// Caps is the helper's answer to Hello.
	Caps Capabilities
}

// Dial connects to the helper socket at path and performs the Hello handshake. Errors
// wrap the dial error (e.g. unix.ENOENT, unix.ECONNREFUSED, unix.EACCES) or the helper's
// typed *Error, so the CLI can tell "socket missing" from "not in group brood".
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("dial helper %q: %w", path, err)
	}
	c := &Client{conn: NewConn(nc.(*net.UnixConn))}
	if err := c.Call(ctx, CallHello, HelloArgs{Version: Version}, &c.Caps); err != nil {
		c.Close()
		return nil, fmt.Errorf("hello helper %q: %w", path, err)
	}
	return c, nil
}

// NewClient wraps an established connection without a handshake (tests, raw use).
func NewClient(conn *Conn) *Client { return &Client{conn: conn} }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Call sends one request with files attached and decodes the result into result (a
// pointer, or nil to discard it). A helper error is returned as *Error.
func (c *Client) Call(ctx context.Context, call Call, args, result any, files ...*os.File) error {
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("encode %s arguments: %w", call, err)
	}
	body, err := json.Marshal(Request{Call: call, FDs: len(files), Args: raw})
	if err != nil {
		return fmt.Errorf("encode %s request: %w", call, err)
	}
	_, err = c.callRaw(ctx, call, body, result, files...)
	return err
}

// CallFiles is Call for calls whose response carries descriptors (ResponseFDs); it
// returns them, and closes them itself on any error.
func (c *Client) CallFiles(ctx context.Context, call Call, args, result any, files ...*os.File) ([]*os.File, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("encode %s arguments: %w", call, err)
	}
	body, err := json.Marshal(Request{Call: call, FDs: len(files), Args: raw})
	if err != nil {
		return nil, fmt.Errorf("encode %s request: %w", call, err)
	}
	return c.callRaw(ctx, call, body, result, files...)
}

// CallRaw sends an already encoded request body; it exists so tests can send requests the
// typed methods cannot produce.
func (c *Client) CallRaw(ctx context.Context, body []byte, result any, files ...*os.File) error {
	_, err := c.callRaw(ctx, "", body, result, files...)
	return err
}

// callRaw sends body and reads the response; call (may be "") selects how many response
// descriptors are expected (ResponseFDs).
func (c *Client) callRaw(ctx context.Context, call Call, body []byte, result any, files ...*os.File) (rfiles []*os.File, err error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultCallTimeout)
	}
	if err := c.conn.UnixConn().SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("set deadline: %w", err)
	}
	if err := c.conn.WriteFrame(body, files...); err != nil {
		return nil, err
	}
	rbody, rfiles, err := c.conn.ReadFrame()
	defer func() {
		if err != nil {
			closeAll(rfiles)
			rfiles = nil
		}
	}()
	if err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	resp, err := DecodeResponse(rbody)
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, resp.Error
	}
	if want := ResponseFDs[call]; resp.FDs != want || len(rfiles) != want {
		return nil, fmt.Errorf("response to %q: got %d descriptor(s) (declared %d), want %d", call, len(rfiles), resp.FDs, want)
	}
	if result != nil {
		if err := json.Unmarshal(resp.Result, result); err != nil {
			return nil, fmt.Errorf("decode result: %w", err)
		}
	}
	return rfiles, nil
}

// StartVM boots the microVM of session args.ID. It returns the host key to pin.
func (c *Client) StartVM(ctx context.Context, args StartVMArgs) (VMInfo, error) {
	var info VMInfo
	err := c.Call(ctx, CallStartVM, args, &info)
	return info, err
}

// Attach returns a connected stream to the guest's SSH server of session id (one SSH
// connection per Attach). The caller owns and closes the returned file.
func (c *Client) Attach(ctx context.Context, id string) (*os.File, error) {
	files, err := c.CallFiles(ctx, CallAttach, SessionArgs{ID: id}, nil)
	if err != nil {
		return nil, err
	}
	return files[0], nil
}

// EgressLog returns a read-only descriptor of the ended session id's whole egress
// decision log (CallEgressLog). Read it at explicit offsets (io.SectionReader): the
// helper's copy shares the descriptor's file offset.
func (c *Client) EgressLog(ctx context.Context, id string) (*os.File, error) {
	files, err := c.CallFiles(ctx, CallEgressLog, SessionArgs{ID: id}, nil)
	if err != nil {
		return nil, err
	}
	return files[0], nil
}

// RefreshedLogins returns the OAuth logins the ended session id's egress process saw
// refreshed, with their new real values (CallRefreshedLogins); the helper forgets them
// once answered.
func (c *Client) RefreshedLogins(ctx context.Context, id string) (RefreshedLogins, error) {
	var r RefreshedLogins
	err := c.Call(ctx, CallRefreshedLogins, SessionArgs{ID: id}, &r)
	return r, err
}

// StopVM kills the VMM of session id (graceful, then SIGKILL) and waits for it.
func (c *Client) StopVM(ctx context.Context, id string) error {
	return c.Call(ctx, CallStopVM, SessionArgs{ID: id}, nil)
}

// WaitVM blocks until the VMM of session id is gone and reports how it ended. ctx should
// carry a deadline longer than the VM's timeout.
func (c *Client) WaitVM(ctx context.Context, id string) (VMExit, error) {
	var e VMExit
	err := c.Call(ctx, CallWaitVM, SessionArgs{ID: id}, &e)
	return e, err
}

// CreateSession creates a session whose workspace share is the directory share (opened
// with OpenShare). The helper checks it is a directory owned by the caller.
func (c *Client) CreateSession(ctx context.Context, share *os.File) (Session, error) {
	var s Session
	err := c.Call(ctx, CallCreateSession, CreateSessionArgs{}, &s, share)
	return s, err
}

// ListSessions lists the caller's sessions (every session for root).
func (c *Client) ListSessions(ctx context.Context) ([]Session, error) {
	var l SessionList
	err := c.Call(ctx, CallListSessions, ListSessionsArgs{}, &l)
	return l.Sessions, err
}

// DestroySession destroys one of the caller's sessions and releases its resources.
func (c *Client) DestroySession(ctx context.Context, id string) error {
	return c.Call(ctx, CallDestroySession, SessionArgs{ID: id}, nil)
}

// ResolvePolicy returns the effective egress policy the helper would enforce for a
// session started with args' egress inputs. A policy the inputs may not have (a layer
// loosening another, a host the system forbids adding) is a CodePolicy error.
func (c *Client) ResolvePolicy(ctx context.Context, args ResolvePolicyArgs) (Policy, error) {
	var p Policy
	err := c.Call(ctx, CallResolvePolicy, args, &p)
	return p, err
}

// Doctor returns the helper's view of the host.
func (c *Client) Doctor(ctx context.Context) (DoctorReport, error) {
	var r DoctorReport
	err := c.Call(ctx, CallDoctor, DoctorArgs{}, &r)
	return r, err
}

// ListImages asks which images the helper boots (CallListImages).
func (c *Client) ListImages(ctx context.Context) (ImageList, error) {
	var r ImageList
	err := c.Call(ctx, CallListImages, ListImagesArgs{}, &r)
	return r, err
}

// OpenShare opens dir as a workspace share descriptor: a directory, not followed through
// a final symlink. The helper never sees the path.
func OpenShare(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open share", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// IsCode reports whether err carries the helper error code.
func IsCode(err error, code Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}
