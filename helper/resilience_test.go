package helper

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
)

// TestHandlerPanicRecovered: a call handler that panics costs its caller one internal
// error; the connection, the server and other calls go on, and Doctor counts the panic.
func TestHandlerPanicRecovered(t *testing.T) {
	orig := handlers[api.CallListImages]
	handlers[api.CallListImages] = func(*Server, context.Context, *connState, *api.Request, []*os.File) (any, []*os.File, error) {
		var m map[string]int
		m["boom"]++ // a nil map write: a runtime panic, as a handler bug would raise
		return nil, nil, nil
	}
	t.Cleanup(func() { handlers[api.CallListImages] = orig })
	ts := startServer(t, nil)
	c := ts.dial(t)
	ctx := context.Background()
	for i := range 3 {
		if _, err := c.ListImages(ctx); callCode(err) != string(api.CodeInternal) {
			t.Fatalf("panicking call %d = %v, want an internal error", i, err)
		}
	}
	if _, err := c.ListSessions(ctx); err != nil {
		t.Fatalf("the connection after a panic: %v", err)
	}
	if _, err := ts.dial(t).ListSessions(ctx); err != nil {
		t.Fatalf("a new connection after a panic: %v", err)
	}
	rep, err := c.Doctor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := rep.Checks[len(rep.Checks)-1]
	if h.Name != "helper health" || h.OK || !strings.Contains(h.Detail, "3 handler panics") {
		t.Errorf("doctor health check = %+v, want 3 panics counted", h)
	}
	if !strings.Contains(ts.log.String(), "call handler panicked") {
		t.Error("the panic was not logged")
	}
}

// TestAcceptSurvivesEMFILE: with RLIMIT_NOFILE lowered and every descriptor taken, the
// listener's accept fails with EMFILE; the helper backs off instead of returning from
// Serve, and the waiting client is served as soon as descriptors are free again.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	ts := startServer(t, nil)
	// The client's socket exists before the descriptors run out; connect needs none more.
	cfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := unix.Rlimit{Cur: uint64(len(ents) + 64), Max: old.Max}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var fill []int
	release := func() {
		for _, fd := range fill {
			unix.Close(fd)
		}
		fill = nil
		unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
	}
	defer release()
	for {
		fd, err := unix.Dup(cfd)
		if errors.Is(err, syscall.EMFILE) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		fill = append(fill, fd)
	}
	if err := unix.Connect(cfd, &unix.SockaddrUnix{Name: ts.sock}); err != nil {
		t.Fatal(err)
	}
	// Wait (bounded) until the server has met EMFILE at least twice: it backed off once
	// and tried again.
	deadline := time.Now().Add(30 * time.Second)
	for ts.srv.health.AcceptErrors.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no accept failure backed off with %d descriptors taken (Serve returned?) (log:\n%s)", len(fill), ts.log.String())
		}
		time.Sleep(time.Millisecond)
	}
	held := len(fill) + 1
	t0 := time.Now()
	release()
	f := os.NewFile(uintptr(cfd), "client")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := api.NewClient(api.NewConn(nc.(*net.UnixConn)))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var caps api.Capabilities
	if err := c.Call(ctx, api.CallHello, api.HelloArgs{Version: api.Version}, &caps); err != nil {
		t.Fatalf("hello from the client that waited through EMFILE: %v", err)
	}
	t.Logf("accept failed %d times with %d descriptors held; client served %v after they were freed",
		ts.srv.health.AcceptErrors.Load(), held, time.Since(t0))
	if !strings.Contains(ts.log.String(), "too many open files") {
		t.Error("the accept failure was not logged")
	}
}

// TestOversizeReplyIsAnError: a result whose reply would exceed api.MaxFrame reaches the
// client as an internal error naming the frame, not as a dropped connection, and the
// connection stays usable.
func TestOversizeReplyIsAnError(t *testing.T) {
	orig := handlers[api.CallListImages]
	handlers[api.CallListImages] = func(*Server, context.Context, *connState, *api.Request, []*os.File) (any, []*os.File, error) {
		return map[string]string{"big": strings.Repeat("x", api.MaxFrame)}, nil, nil
	}
	t.Cleanup(func() { handlers[api.CallListImages] = orig })
	ts := startServer(t, nil)
	c := ts.dial(t)
	ctx := context.Background()
	_, err := c.ListImages(ctx)
	if callCode(err) != string(api.CodeInternal) || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("oversize reply = %v, want an internal error about the frame", err)
	}
	if _, err := c.ListSessions(ctx); err != nil {
		t.Fatalf("the connection after an oversize reply: %v", err)
	}
}
