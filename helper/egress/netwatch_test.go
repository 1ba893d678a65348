package egress

import (
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"testing"

	"brood.dev/brood/netpolicy/nftrules"
)

// TestRefusedKeptCurrent: while a permissive session runs, a network that appears on the
// host (FakeLinks.SetNetworks, as the netlink watch reports it) joins the session's
// refused set; one that disappears stays refused; the watch stops with the last session.
func TestRefusedKeptCurrent(t *testing.T) {
	lan, routed, later := netip.MustParsePrefix("44.1.2.0/24"), netip.MustParsePrefix("45.0.0.0/16"), netip.MustParsePrefix("2a01:4f8:9::/64")
	links := &FakeLinks{Uplinks: []string{"up0"}, Networks: []netip.Prefix{lan}}
	fw := &nftrules.Fake{}
	fw.EnsureTable()
	const id = "perm0001"
	if err := fw.AddSession(nftrules.Session{ID: id, ProxyV4: netip.MustParseAddr("10.99.0.1"), GuestV4: netip.MustParseAddr("10.99.0.2"),
		AnyPort: true, Refused: []netip.Prefix{lan}}); err != nil {
		t.Fatal(err)
	}
	refreshed := make(chan struct{}, 8)
	e := &Manager{links: links, fw: fw, log: slog.New(slog.NewTextHandler(io.Discard, nil)), sessions: map[string]*Session{},
		onRefresh: func() { refreshed <- struct{}{} }}
	s := &Session{id: id}
	e.sessions[id] = s
	nets, err := e.permissiveRefused(s)
	if err != nil || !slices.Equal(nets, []netip.Prefix{lan}) {
		t.Fatalf("permissiveRefused = %v, %v", nets, err)
	}
	e.trackRefused(s, nets)
	<-refreshed

	links.SetNetworks([]netip.Prefix{lan, routed, later})
	<-refreshed
	if got := fw.Refused(id); !slices.Contains(got, routed) || !slices.Contains(got, later) || !slices.Contains(got, lan) {
		t.Errorf("after the change the session refuses %v, want %v, %v and %v", got, lan, routed, later)
	}
	links.SetNetworks([]netip.Prefix{routed})
	<-refreshed
	if got := fw.Refused(id); !slices.Contains(got, lan) || len(got) != 3 {
		t.Errorf("after %v disappeared the session refuses %v, want it still refused", lan, got)
	}

	delete(e.sessions, id)
	e.untrackRefused(s)
	if e.watch != nil {
		t.Error("the watch runs after the last permissive session")
	}
}

// brokenWatch is FakeLinks whose watches fail: WatchNetworks returns err when set, else
// a channel already closed (a subscription that failed at once); calls counts them.
type brokenWatch struct {
	*FakeLinks
	err   error
	calls int
}

func (b *brokenWatch) WatchNetworks(stop <-chan struct{}) (<-chan struct{}, error) {
	b.calls++
	if b.err != nil {
		return nil, b.err
	}
	c := make(chan struct{})
	close(c)
	return c, nil
}

// TestRefusedWatchFails: a helper that cannot watch the host's networks starts no
// permissive session; a watch that keeps failing is started again maxWatchRestarts times,
// reading the networks again each time, then given up.
func TestRefusedWatchFails(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b := &brokenWatch{FakeLinks: &FakeLinks{Uplinks: []string{"up0"}}, err: io.ErrClosedPipe}
	e := &Manager{links: b, fw: &nftrules.Fake{}, log: log, sessions: map[string]*Session{}}
	if _, err := e.permissiveRefused(&Session{id: "perm0001"}); err == nil {
		t.Fatal("permissiveRefused without a watch succeeded")
	}
	b.err = nil
	refreshes := 0
	e.onRefresh = func() { refreshes++ }
	if _, err := e.permissiveRefused(&Session{id: "perm0002"}); err != nil {
		t.Fatal(err)
	}
	<-e.watch.done
	if b.calls != 2+maxWatchRestarts || refreshes != maxWatchRestarts {
		t.Errorf("%d watches and %d refreshes, want %d and %d", b.calls, refreshes, 2+maxWatchRestarts, maxWatchRestarts)
	}
}
