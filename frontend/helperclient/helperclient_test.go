package helperclient_test

import (
	"net"
	"strings"
	"testing"

	"brood.dev/brood/frontend/fakehelper"
	"brood.dev/brood/frontend/helperclient"
	"brood.dev/brood/helper/api"
)

// serve starts the fake helper on a socket of the test's own.
func serve(t *testing.T) (*fakehelper.Helper, helperclient.Socket) {
	t.Helper()
	f, sock := fakehelper.Start(t)
	return f, helperclient.Socket{Path: sock}
}

// TestSocketRetriesIdempotentCalls: the helper closes the connection after answering a
// call; the next idempotent call is made again on a new connection (a second hello),
// while StartVM, which is not idempotent, fails instead of being sent twice.
func TestSocketRetriesIdempotentCalls(t *testing.T) {
	f, s := serve(t)
	f.Sessions = []api.Session{{ID: "0000abcd", State: api.SessionRunning}}
	c, err := s.Dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f.DropAfter = api.CallListSessions
	for i := range 2 {
		l, err := c.ListSessions(t.Context())
		if err != nil || len(l) != 1 {
			t.Fatalf("list %d: %v %+v", i, err, l)
		}
	}
	if got := f.Calls(); got != "hello list_sessions hello list_sessions" {
		t.Errorf("calls %q, want a redial before the second list", got)
	}

	// Another call to drop after: the server of the last connection may still be about to
	// check DropAfter for the list it just answered.
	f.DropAfter = api.CallDestroySession
	if err := c.DestroySession(t.Context(), "0000abcd"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartVM(t.Context(), api.StartVMArgs{ID: "0000abcd", Image: "test"}); err == nil {
		t.Error("StartVM on a closed connection succeeded")
	}
	if n := strings.Count(f.Calls(), "start_vm"); n != 0 {
		t.Errorf("StartVM reached the helper %d time(s) after the connection closed", n)
	}
}

// TestConnBroken: a helper's own error is an answer, not a broken connection.
func TestConnBroken(t *testing.T) {
	if helperclient.ConnBroken(t.Context(), &api.Error{Code: api.CodeNotFound, Message: "no session"}) {
		t.Error("a helper error counted as a broken connection")
	}
	if !helperclient.ConnBroken(t.Context(), net.ErrClosed) {
		t.Error("a closed connection did not count as broken")
	}
}
