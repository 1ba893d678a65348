package egress

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
)

// FakeLinks is an in-memory Links for tests: Taps are the existing tap names (CreateTap
// adds one and returns a nil file); Deleted records every DeleteLink call; Uplinks is
// what DefaultRouteLinks returns; Enabled records EnableForwarding calls; IPv4Forwarding
// is each interface's forwarding as Forwarding and SetForwarding see it (missing: off).
type FakeLinks struct {
	mu             sync.Mutex
	Taps           []string
	Deleted        []string
	Uplinks        []string
	Enabled        []string
	IPv4Forwarding map[string]bool
	// Networks is what HostNetworks returns; a test that changes it sends on Changes (made
	// by the first WatchNetworks) to report it.
	Networks []netip.Prefix
	Changes  chan struct{}
}

// SetNetworks replaces Networks and reports the change on Changes; it blocks until a
// running watch (WatchNetworks) takes it.
func (f *FakeLinks) SetNetworks(nets []netip.Prefix) {
	f.mu.Lock()
	f.Networks = slices.Clone(nets)
	if f.Changes == nil {
		f.Changes = make(chan struct{})
	}
	c := f.Changes
	f.mu.Unlock()
	c <- struct{}{}
}

// WatchNetworks returns a channel that receives what a test sends on Changes, until stop.
func (f *FakeLinks) WatchNetworks(stop <-chan struct{}) (<-chan struct{}, error) {
	f.mu.Lock()
	if f.Changes == nil {
		f.Changes = make(chan struct{})
	}
	in := f.Changes
	f.mu.Unlock()
	out := make(chan struct{})
	go func() {
		defer close(out)
		for {
			select {
			case <-stop:
				return
			case v := <-in:
				select {
				case out <- v:
				case <-stop:
					return
				}
			}
		}
	}()
	return out, nil
}

// HostNetworks returns Networks.
func (f *FakeLinks) HostNetworks([]string) ([]netip.Prefix, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.Networks), nil
}

var _ NetworkLinks = (*FakeLinks)(nil)

// CreateTap adds name to Taps; it fails when a link of that name exists.
func (f *FakeLinks) CreateTap(name string, uid, gid uint32, addrs []netip.Prefix) (*os.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if slices.Contains(f.Taps, name) {
		return nil, fmt.Errorf("create tap %q: %w", name, os.ErrExist)
	}
	f.Taps = append(f.Taps, name)
	return nil, nil
}

// DefaultRouteLinks returns Uplinks.
func (f *FakeLinks) DefaultRouteLinks() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.Uplinks), nil
}

// EnableForwarding records name and sets its forwarding on.
func (f *FakeLinks) EnableForwarding(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Enabled = append(f.Enabled, name)
	if f.IPv4Forwarding == nil {
		f.IPv4Forwarding = map[string]bool{}
	}
	f.IPv4Forwarding[name] = true
	return nil
}

// Forwarding returns IPv4Forwarding[name].
func (f *FakeLinks) Forwarding(name string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.IPv4Forwarding[name], nil
}

// SetForwarding sets IPv4Forwarding[name].
func (f *FakeLinks) SetForwarding(name string, on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.IPv4Forwarding == nil {
		f.IPv4Forwarding = map[string]bool{}
	}
	f.IPv4Forwarding[name] = on
	return nil
}

var _ ForwardingLinks = (*FakeLinks)(nil)

// ListTaps returns the fake taps with prefix.
func (f *FakeLinks) ListTaps(prefix string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, t := range f.Taps {
		if strings.HasPrefix(t, prefix) {
			out = append(out, t)
		}
	}
	return out, nil
}

// DeleteLink removes name from Taps and records the call.
func (f *FakeLinks) DeleteLink(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Deleted = append(f.Deleted, name)
	f.Taps = slices.DeleteFunc(f.Taps, func(t string) bool { return t == name })
	return nil
}

// Calls returns a copy of Deleted.
func (f *FakeLinks) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.Deleted)
}
