//go:build linux

package nftrules

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"brood.dev/brood/netpolicy"
)

// Fake is an in-memory Firewall for tests of code that drives one (the helper's session
// table). It validates like NFT and records sessions and pins.
type Fake struct {
	mu       sync.Mutex
	table    bool
	masq     bool // EnsureMasquerade ran
	held     [2][]string
	sessions map[string]Session
	pins     map[string]map[pinKey]time.Duration
}

var _ Firewall = (*Fake)(nil)

// EnsureTable implements Firewall.
func (f *Fake) EnsureTable() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.table = true
	return nil
}

// AddSession implements Firewall; it fails like the kernel without the table or when the
// session exists.
func (f *Fake) AddSession(s Session) error {
	if _, err := SessionRuleset(s); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.table {
		return fmt.Errorf("add session %s: no table inet %s", s.ID, TableName)
	}
	if _, ok := f.sessions[s.ID]; ok {
		return fmt.Errorf("add session %s: exists", s.ID)
	}
	if f.sessions == nil {
		f.sessions = map[string]Session{}
		f.pins = map[string]map[pinKey]time.Duration{}
	}
	f.sessions[s.ID] = s
	f.pins[s.ID] = map[pinKey]time.Duration{}
	return nil
}

// DeleteSession implements Firewall.
func (f *Fake) DeleteSession(id string) error {
	if err := ValidateSessionID(id); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sessions, id)
	delete(f.pins, id)
	return nil
}

// pinKey is one element of a session set.
type pinKey struct {
	addr netip.Addr
	port netpolicy.Port
}

// Pin implements Firewall.
func (f *Fake) Pin(id string, addrs []netip.Addr, ports []netpolicy.Port, timeout time.Duration) error {
	if err := checkPorts(ports); err != nil {
		return fmt.Errorf("pin for session %s: %w", id, err)
	}
	for _, a := range addrs {
		if err := CheckElement(a); err != nil {
			return fmt.Errorf("pin for session %s: %w", id, err)
		}
	}
	if timeout < time.Millisecond {
		return fmt.Errorf("pin for session %s: timeout %v: %w", id, timeout, ErrBadElement)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pins[id]
	if !ok {
		return fmt.Errorf("pin for session %s: no such session", id)
	}
	for _, a := range addrs {
		for _, port := range ports {
			p[pinKey{a, port}] = timeout
		}
	}
	return nil
}

// Cleanup implements Firewall.
func (f *Fake) Cleanup() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.table, f.sessions, f.pins = false, nil, nil
	return nil
}

// Pinned returns the timeout addr was last pinned with on port in session id, and whether
// it was.
func (f *Fake) Pinned(id string, addr netip.Addr, port netpolicy.Port) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.pins[id][pinKey{addr, port}]
	return d, ok
}

// Sessions returns the ids of the sessions present.
func (f *Fake) Sessions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.sessions {
		ids = append(ids, id)
	}
	return ids
}

// HasTable reports whether the table exists (EnsureTable ran, Cleanup did not since).
func (f *Fake) HasTable() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.table
}
