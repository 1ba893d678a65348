package vmhost

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"brood.dev/brood/helper/api"
)

// TestHandleEgressLog: egress_log's source answers only once the VM ended, hands out a
// new read-only descriptor each time (read at offset 0 whatever the last reader did), and
// nothing after Release.
func TestHandleEgressLog(t *testing.T) {
	v := &Handle{id: "aaaa0001", done: make(chan struct{})}
	if _, err := v.EgressLog(); !errors.Is(err, api.ErrState) {
		t.Fatalf("while running: %v, want ErrState", err)
	}
	p := filepath.Join(t.TempDir(), "log")
	os.WriteFile(p, []byte("{\"a\":1}\n"), 0o600)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	v.egressLog = f
	close(v.done)
	for range 2 {
		g, err := v.EgressLog()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(io.NewSectionReader(g, 0, 1<<20))
		if err != nil || string(b) != "{\"a\":1}\n" {
			t.Errorf("log read %q (%v)", b, err)
		}
		if _, err := g.Write([]byte("x")); err == nil {
			t.Error("the descriptor is writable")
		}
		io.ReadAll(g) // moves the shared offset: the next reader still reads at offsets
		g.Close()
	}
	v.Release()
	if _, err := v.EgressLog(); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("after Release: %v, want ErrNotFound", err)
	}
}

// TestHandleRefreshedLogins: the refreshed logins the session's network left are
// answered only once the VM ended, and only once (the helper forgets them); a session
// without any answers an empty list; Release forgets them too.
func TestHandleRefreshedLogins(t *testing.T) {
	v := &Handle{id: "aaaa0001", done: make(chan struct{})}
	v.refreshed = []api.RefreshedLogin{{Login: "codex", Tokens: map[string]string{api.RoleAccess: "new-access-value-000000000"}}}
	if _, err := v.RefreshedLogins(); !errors.Is(err, api.ErrState) {
		t.Fatalf("while running: %v, want ErrState", err)
	}
	close(v.done)
	r, err := v.RefreshedLogins()
	if err != nil || len(r.Logins) != 1 || r.Logins[0].Tokens[api.RoleAccess] != "new-access-value-000000000" {
		t.Fatalf("after the VM ended: %+v, %v", r, err)
	}
	if r, err := v.RefreshedLogins(); err != nil || r.Logins == nil || len(r.Logins) != 0 {
		t.Errorf("second call: %+v, %v; want an empty list", r, err)
	}
	v.refreshed = []api.RefreshedLogin{{Login: "codex"}}
	v.Release()
	if r, _ := v.RefreshedLogins(); len(r.Logins) != 0 {
		t.Errorf("after Release: %+v", r)
	}
}
