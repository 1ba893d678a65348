package netpolicy

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Pinner makes answered addresses reachable for a while: the real implementation
// (nftrules.SetPinner) inserts them as elements of the session's nft sets s<id>_v4 /
// s<id>_v6 with a timeout; the DNS proxy calls it before it sends the answer.
type Pinner interface {
	// Pin makes every address in addrs reachable on ports for timeout (whole seconds; the
	// caller clamps it). Addresses must not be in a refused range. Either all are pinned or
	// an error is returned.
	Pin(ctx context.Context, addrs []netip.Addr, ports []Port, timeout time.Duration) error
}

// Pin is one call recorded by RecordingPinner.
type Pin struct {
	Addrs   []netip.Addr
	Ports   []Port
	Timeout time.Duration
}

// RecordingPinner is a Pinner for tests: it records every call and fails with Err when set.
type RecordingPinner struct {
	mu   sync.Mutex
	pins []Pin
	// Err, when non-nil, is returned by Pin (nothing is recorded).
	Err error
}

var _ Pinner = (*RecordingPinner)(nil)

// Pin records the call.
func (r *RecordingPinner) Pin(_ context.Context, addrs []netip.Addr, ports []Port, timeout time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Err != nil {
		return r.Err
	}
	r.pins = append(r.pins, Pin{slices.Clone(addrs), slices.Clone(ports), timeout})
	return nil
}

// Pins returns the calls recorded so far.
func (r *RecordingPinner) Pins() []Pin {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.pins)
}

// Pinned reports whether a was pinned by any call.
func (r *RecordingPinner) Pinned(a netip.Addr) bool {
	for _, p := range r.Pins() {
		if slices.Contains(p.Addrs, a) {
			return true
		}
	}
	return false
}
