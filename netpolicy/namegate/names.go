package namegate

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	"brood.dev/brood/netpolicy"
)

// MaxNames bounds the (name, address) entries of one session's Names: a guest under a
// wildcard policy could otherwise grow it without end. When it is full, expired entries
// are dropped; when it is still full, Add drops the new ones (the gate then refuses
// connections to them: it fails closed).
const MaxNames = 8192

// Names is one session's table of what its DNS proxy pinned: per name (lower case, no
// trailing dot) the addresses answered for it, each with the ports of the policy entry
// that allowed the name and the time the pin expires. It is safe for concurrent use.
type Names struct {
	// Now is the clock (nil: time.Now); tests set it.
	Now func() time.Time

	mu      sync.Mutex
	entries map[nameAddr]pinned
}

type nameAddr struct {
	name string
	addr netip.Addr
}

type pinned struct {
	ports   []netpolicy.Port
	expires time.Time
}

func (n *Names) now() time.Time {
	if n.Now != nil {
		return n.Now()
	}
	return time.Now()
}

// Add records that addrs were pinned for name on ports for ttl from now. A repeated
// answer sets the expiry again (as the helper's nft pin does), whatever was left.
func (n *Names) Add(name string, addrs []netip.Addr, ports []netpolicy.Port, ttl time.Duration) {
	name = normalize(name)
	now := n.now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.entries == nil {
		n.entries = map[nameAddr]pinned{}
	}
	for _, a := range addrs {
		k := nameAddr{name, a.Unmap()}
		if _, ok := n.entries[k]; !ok && len(n.entries) >= MaxNames {
			n.purge(now)
			if len(n.entries) >= MaxNames {
				continue
			}
		}
		n.entries[k] = pinned{ports: slices.Clone(ports), expires: now.Add(ttl)}
	}
}

// purge drops the expired entries (n.mu held).
func (n *Names) purge(now time.Time) {
	for k, p := range n.entries {
		if !now.Before(p.expires) {
			delete(n.entries, k)
		}
	}
}

// Admits reports whether a TCP connection to dst may carry name: name was pinned to
// exactly dst's address, on dst's port, and has not expired. Otherwise it says why.
func (n *Names) Admits(name string, dst netip.AddrPort) (bool, string) {
	name = normalize(name)
	now := n.now()
	n.mu.Lock()
	p, ok := n.entries[nameAddr{name, dst.Addr().Unmap()}]
	n.mu.Unlock()
	switch {
	case !ok:
		return false, "name not resolved to this address"
	case !now.Before(p.expires):
		return false, "name's answer for this address expired"
	case !slices.Contains(p.ports, netpolicy.Port{Num: dst.Port(), Proto: netpolicy.TCP}):
		return false, "port not allowed for this name"
	}
	return true, ""
}

// Len returns the number of entries, expired ones included.
func (n *Names) Len() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.entries)
}
