package helper

import (
	"context"
	"errors"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"brood.dev/brood/helper/api"
)

// TestPerUserQuotas: one uid that holds its max_conns_per_user connections and its
// max_waits_per_user waits locks out neither another uid nor itself for other calls: its
// next connection is closed unanswered, its next wait_vm fails with the limit error, and
// a second uid (a re-executed client under uid 4244) is still served, wait_vm included.
func TestPerUserQuotas(t *testing.T) {
	requireRoot(t)
	const other = 4244
	me := uint32(os.Getuid())
	ts := startServer(t, func(c *Config) {
		c.MaxConns, c.MaxConnsPerUser, c.MaxWaitsPerUser = 6, 3, 2
		c.AllowUIDs = []uint32{me, other}
	})
	var held []*api.Client
	for range 3 {
		held = append(held, ts.dial(t))
	}
	extra := ts.rawConn(t)
	frame, err := api.AppendFrame(nil, []byte(`{"call":"hello","args":{"version":`+strconv.Itoa(api.Version)+`}}`))
	if err != nil {
		t.Fatal(err)
	}
	extra.Write(frame) // may fail once the helper closed it; the read below decides
	if got := readUntilClosed(t, extra, 5*time.Second); len(got) != 0 {
		t.Errorf("uid %d's connection over its quota was answered: %+v", me, got)
	}
	otherCred := &syscall.Credential{Uid: other, Gid: other, Groups: []uint32{}}
	waitBody := `{"call":"wait_vm","args":{"id":"0123abcd"}}`
	out := runChildClient(t, otherCred, childSpec{Sock: ts.sock, Ops: []childOp{{Op: "hello"}, {Op: "list"}}})
	if out[0].Code != "" || out[1].Code != "" {
		t.Fatalf("uid %d while uid %d holds its quota: %+v; want served", other, me, out)
	}

	// Waits: with the uid's waits all in flight (they block until a VM ends, so the test
	// takes their slots), its next wait_vm is refused at once; another uid's is not.
	for range 2 {
		if !ts.srv.waits.acquire(me) {
			t.Fatal("wait quota full too early")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = held[0].Call(ctx, api.CallWaitVM, api.SessionArgs{ID: "0123abcd"}, nil)
	if e := (*api.Error)(nil); !errors.As(err, &e) || e.Code != api.CodeLimit {
		t.Errorf("wait_vm over uid %d's wait quota = %v; want the limit error", me, err)
	}
	out = runChildClient(t, otherCred, childSpec{Sock: ts.sock, Ops: []childOp{{Op: "hello"}, {Op: "raw", Body: waitBody}}})
	if out[1].Code == string(api.CodeLimit) {
		t.Errorf("uid %d's wait_vm refused by uid %d's wait quota", other, me)
	}
	ts.srv.waits.release(me)
	err = held[0].Call(ctx, api.CallWaitVM, api.SessionArgs{ID: "0123abcd"}, nil)
	if e := (*api.Error)(nil); errors.As(err, &e) && e.Code == api.CodeLimit {
		t.Errorf("wait_vm after a wait slot was released = %v; want past the quota", err)
	}

	// A connection slot comes back when the uid closes one.
	held[0].Close()
	for deadline := time.Now().Add(5 * time.Second); ; {
		c, err := api.Dial(ctx, ts.sock)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection for uid %d after it closed one: %v", me, err)
		}
		time.Sleep(50 * time.Millisecond) // poll interval; the deadline decides failure
	}
}

// TestMaxConnsPerUserBelowMaxConns: a per-user limit that leaves no slot for other uids
// is a configuration error.
func TestMaxConnsPerUserBelowMaxConns(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AllowGroup = ""
	cfg.MaxConnsPerUser = cfg.MaxConns
	if err := cfg.Validate(func(string) {}); err == nil {
		t.Error("max_conns_per_user = max_conns accepted")
	}
}
