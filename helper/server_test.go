package helper

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy/nftrules"
)

func callCode(err error) string {
	var e *api.Error
	if errors.As(err, &e) {
		return string(e.Code)
	}
	if err != nil {
		return "io: " + err.Error()
	}
	return ""
}

// TestRejectsForgedRequests: paths, tap names, unknown fields, wrong descriptor counts
// and malformed ids are refused with typed errors, and nothing happens.
func TestRejectsForgedRequests(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.dial(t)
	ctx := context.Background()
	share, err := api.OpenShare(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer share.Close()
	for _, tc := range []struct {
		name, body string
		files      []*os.File
		want       api.Code
	}{
		{"path field", `{"call":"create_session","fds":1,"args":{"path":"/etc"}}`, []*os.File{share}, api.CodeBadRequest},
		{"tap name", `{"call":"create_session","fds":1,"args":{"tap":"../../x"}}`, []*os.File{share}, api.CodeBadRequest},
		{"uid field", `{"call":"create_session","fds":1,"args":{"uid":0}}`, []*os.File{share}, api.CodeBadRequest},
		{"top-level unknown field", `{"call":"list_sessions","path":"/"}`, nil, api.CodeBadRequest},
		{"session id traversal", `{"call":"destroy_session","args":{"id":"../../x"}}`, nil, api.CodeBadRequest},
		{"session id tap-like", `{"call":"destroy_session","args":{"id":"brd00000000"}}`, nil, api.CodeBadRequest},
		{"no share fd", `{"call":"create_session"}`, nil, api.CodeBadRequest},
		{"fd declared not sent", `{"call":"create_session","fds":1}`, nil, api.CodeBadRequest},
		{"fd sent not declared", `{"call":"create_session"}`, []*os.File{share}, api.CodeBadRequest},
		{"fd on a call without fds", `{"call":"list_sessions","fds":1}`, []*os.File{share}, api.CodeBadRequest},
		{"two fds", `{"call":"create_session","fds":2}`, []*os.File{share, share}, api.CodeBadRequest},
		{"unknown call", `{"call":"exec","args":{"cmd":"sh"}}`, nil, api.CodeUnknownCall},
		{"trailing data", `{"call":"list_sessions"} {"call":"list_sessions"}`, nil, api.CodeBadRequest},
		{"not an object", `["create_session"]`, nil, api.CodeBadRequest},
		{"args not an object", `{"call":"destroy_session","args":"x"}`, nil, api.CodeBadRequest},
		{"garbage", "\x00\xffgarbage", nil, api.CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.CallRaw(ctx, []byte(tc.body), nil, tc.files...)
			if got := callCode(err); got != string(tc.want) {
				t.Errorf("got %q (%v), want %q", got, err, tc.want)
			}
		})
	}
	if n := ts.srv.Sessions().Len(); n != 0 {
		t.Errorf("%d sessions exist after refused requests", n)
	}
	// The connection survives refused requests.
	if _, err := c.ListSessions(ctx); err != nil {
		t.Errorf("list after refusals: %v", err)
	}
}

func TestHelloFirstAndVersion(t *testing.T) {
	ts := startServer(t, nil)
	ctx := context.Background()
	c := api.NewClient(api.NewConn(ts.rawConn(t)))
	if _, err := c.ListSessions(ctx); callCode(err) != string(api.CodeHelloRequired) {
		t.Errorf("list before hello: %v", err)
	}
	err := c.Call(ctx, api.CallHello, api.HelloArgs{Version: api.Version + 1}, nil)
	if callCode(err) != string(api.CodeVersionMismatch) {
		t.Errorf("hello with wrong version: %v", err)
	}
	var caps api.Capabilities
	if err := c.Call(ctx, api.CallHello, api.HelloArgs{Version: api.Version}, &caps); err != nil {
		t.Fatal(err)
	}
	if caps.Version != api.Version || caps.Peer.UID != uint32(os.Getuid()) || caps.Peer.PID != int32(os.Getpid()) {
		t.Errorf("caps = %+v", caps)
	}
}

func TestSessionLifecycle(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxSessionsPerUser = 2 })
	c := ts.dial(t)
	ctx := context.Background()
	dir := t.TempDir()
	open := func() *os.File {
		f, err := api.OpenShare(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	s1, err := c.CreateSession(ctx, open())
	if err != nil {
		t.Fatal(err)
	}
	if !api.ValidSessionID(s1.ID) || s1.Tap != nftrules.TapPrefix+s1.ID || s1.Owner != uint32(os.Getuid()) || s1.State != api.SessionCreated {
		t.Errorf("session = %+v", s1)
	}
	if _, err := c.CreateSession(ctx, open()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSession(ctx, open()); callCode(err) != string(api.CodeLimit) {
		t.Errorf("third session: %v, want limit", err)
	}
	l, err := c.ListSessions(ctx)
	if err != nil || len(l) != 2 {
		t.Fatalf("list = %v, %v", l, err)
	}
	if err := c.DestroySession(ctx, s1.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DestroySession(ctx, s1.ID); callCode(err) != string(api.CodeNotFound) {
		t.Errorf("second destroy: %v, want not_found", err)
	}

	// A share that is not a directory is refused (a regular file fd).
	f, err := os.Create(filepath.Join(dir, "file"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := c.CreateSession(ctx, f); callCode(err) != string(api.CodeBadFD) {
		t.Errorf("file as share: %v, want bad_fd", err)
	}
	rep, err := c.Doctor(ctx)
	if err != nil || len(rep.Checks) != 2 || rep.Checks[1].Name != "helper health" || !rep.Checks[1].OK {
		t.Errorf("doctor = %+v, %v", rep, err)
	}
}

// readEOF waits up to d for the server to close uc; it returns the frames read before.
func readUntilClosed(t *testing.T, uc *net.UnixConn, d time.Duration) []*api.Response {
	t.Helper()
	uc.SetReadDeadline(time.Now().Add(d))
	var out []*api.Response
	for {
		body, err := api.ReadFrame(uc)
		if errors.Is(err, io.EOF) || errors.Is(err, api.ErrTruncated) || errors.Is(err, net.ErrClosed) {
			return out
		}
		if err != nil {
			t.Fatalf("server did not close the connection within %v: %v", d, err)
		}
		resp, err := api.DecodeResponse(body)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp)
	}
}

// TestHostileFrames: oversize, truncated, garbage and slow-loris clients are cut off with
// bounded deadlines, and the helper keeps serving others meanwhile.
func TestHostileFrames(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.ReadTimeoutSeconds = 1 })

	// Oversize: a typed error, then the connection is closed without reading the body.
	uc := ts.rawConn(t)
	var h [4]byte
	binary.BigEndian.PutUint32(h[:], api.MaxFrame+1)
	uc.Write(h[:])
	got := readUntilClosed(t, uc, 5*time.Second)
	if len(got) != 1 || got[0].Error == nil || got[0].Error.Code != api.CodeTooLarge {
		t.Errorf("oversize frame answers %+v, want one frame_too_large", got)
	}

	// Garbage that looks like HTTP: its first 4 bytes are a huge length.
	uc = ts.rawConn(t)
	uc.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	if got := readUntilClosed(t, uc, 5*time.Second); len(got) != 1 || got[0].Error.Code != api.CodeTooLarge {
		t.Errorf("HTTP garbage answers %+v", got)
	}

	// Truncated: the header promises 100 bytes, 10 arrive, then the writer half closes.
	uc = ts.rawConn(t)
	binary.BigEndian.PutUint32(h[:], 100)
	uc.Write(append(h[:], "0123456789"...))
	uc.CloseWrite()
	if got := readUntilClosed(t, uc, 5*time.Second); len(got) != 0 {
		t.Errorf("truncated frame answered %+v", got)
	}

	// Slow loris: one byte of the header every 300 ms; the read deadline (1 s) cuts it.
	slow := ts.rawConn(t)
	stopDrip := make(chan struct{})
	go func() {
		for i := 0; i < 20; i++ {
			select {
			case <-stopDrip:
				return
			case <-time.After(300 * time.Millisecond):
				slow.Write([]byte{0})
			}
		}
	}()
	// An idle connection that never sends anything is cut too.
	idle := ts.rawConn(t)

	// Meanwhile another client is served.
	c := ts.dial(t)
	if _, err := c.ListSessions(context.Background()); err != nil {
		t.Errorf("well-behaved client during slow loris: %v", err)
	}
	readUntilClosed(t, slow, 5*time.Second)
	close(stopDrip)
	readUntilClosed(t, idle, 5*time.Second)

	// And the helper is still alive for new clients.
	c2 := ts.dial(t)
	if _, err := c2.ListSessions(context.Background()); err != nil {
		t.Errorf("after hostile clients: %v", err)
	}
}

// TestConnectionLimit: connections beyond max_conns are closed at once; capacity returns
// when others leave.
func TestConnectionLimit(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxConns, c.MaxConnsPerUser = 4, 3 })
	var held []*api.Client
	for range 3 {
		held = append(held, ts.dial(t))
	}
	extra := ts.rawConn(t)
	if got := readUntilClosed(t, extra, 5*time.Second); len(got) != 0 {
		t.Errorf("connection over the limit was answered: %+v", got)
	}
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := api.Dial(ctx, ts.sock)
		cancel()
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no capacity after a client left: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FuzzDispatch feeds arbitrary request bodies to the dispatcher of a helper that has
// seen hello: it must not panic, and without a descriptor no session can appear.
func FuzzDispatch(f *testing.F) {
	for _, s := range []string{
		`{"call":"hello","args":{"version":1}}`,
		`{"call":"create_session","fds":1}`,
		`{"call":"destroy_session","args":{"id":"0123abcd"}}`,
		`{"call":"list_sessions","args":null}`,
		`{"call":"doctor","args":{}}`,
		`{"call":"destroy_session","args":{"id":"../../x","path":"/"}}`,
		`{"call":"start_vm","args":{"id":"0123abcd","image":"test","cpus":1,"memory_mib":512,"timeout_sec":5,"client_key":"ssh-ed25519 AAAA","clock":1}}`,
		`{"call":"attach","args":{"id":"0123abcd"}}`,
		`{"call":"stop_vm","args":{"id":"0123abcd"}}`,
		`{"call":"wait_vm","args":{"id":"0123abcd"}}`,
	} {
		f.Add([]byte(s))
	}
	cfg := DefaultConfig()
	cfg.AllowGroup = ""
	if err := cfg.Validate(func(string) {}); err != nil {
		f.Fatal(err)
	}
	srv := NewServer(&cfg, discardLog(), api.Capabilities{}, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		st := &connState{cred: Cred{Peer: api.Peer{UID: 1000}}, hello: true}
		res, rfiles, err := srv.dispatch(context.Background(), st, body, nil)
		closeFiles(rfiles)
		if err == nil && res == nil {
			t.Fatalf("nil result without error for %q", body)
		}
		if err != nil && api.AsError(err).Code == api.CodeInternal {
			t.Fatalf("internal error for %q: %v", body, err)
		}
		if srv.Sessions().Len() != 0 {
			t.Fatalf("session created without a descriptor by %q", body)
		}
	})
}

// TestHandlerTable: every call of the protocol has a row in the server's one handler
// table, and the table has no row for a call the protocol does not define.
func TestHandlerTable(t *testing.T) {
	for c := range api.CallFDs {
		if handlers[c] == nil {
			t.Errorf("call %q has no handler", c)
		}
	}
	for c := range handlers {
		if _, ok := api.CallFDs[c]; !ok {
			t.Errorf("handler for %q, which api.CallFDs does not list", c)
		}
	}
}
