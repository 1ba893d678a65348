package nftrules

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/google/nftables"

	"brood.dev/brood/netpolicy"
)

// Firewall programs brood's nft table: the helper's one seam to nftables.
type Firewall interface {
	// EnsureTable creates the table and its refused sets (idempotent).
	EnsureTable() error
	// AddSession adds a session's sets, chains and rules in one transaction.
	AddSession(s Session) error
	// DeleteSession removes a session's chains, rules and sets (and so its pins) in one
	// transaction; a session that does not exist is not an error.
	DeleteSession(id string) error
	// Pin inserts addrs into the session's sets with timeout (rounded down to whole
	// milliseconds), refreshing the timeout of addresses already present.
	Pin(id string, addrs []netip.Addr, timeout time.Duration) error
	// Cleanup deletes the whole table (helper start and `broodd-helper --cleanup`).
	Cleanup() error
}

// NFT is the Firewall over netlink (github.com/google/nftables).
type NFT struct {
	mu   sync.Mutex
	conn *nftables.Conn
}

var _ Firewall = (*NFT)(nil)

// NewNFT opens a netlink connection; pass nftables.WithNetNSFd to work in another netns.
func NewNFT(opts ...nftables.ConnOption) (*NFT, error) {
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink connection: %w", err)
	}
	return &NFT{conn: c}, nil
}

// Apply adds every object of rs in one transaction.
func (n *NFT) Apply(rs *Ruleset) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.conn.AddTable(rs.Table)
	for _, s := range rs.Sets {
		if err := n.conn.AddSet(s.Set, s.Elements); err != nil {
			return fmt.Errorf("add set %s: %w", s.Set.Name, err)
		}
	}
	for _, c := range rs.Chains {
		n.conn.AddChain(c)
	}
	for _, r := range rs.Rules {
		n.conn.AddRule(r)
	}
	if err := n.conn.Flush(); err != nil {
		return fmt.Errorf("apply nft table %s: %w", rs.Table.Name, err)
	}
	return nil
}

// EnsureTable implements Firewall.
func (n *NFT) EnsureTable() error {
	if err := n.Apply(BaseRuleset()); err != nil {
		return fmt.Errorf("ensure nft table inet %s: %w", TableName, err)
	}
	return nil
}

// AddSession implements Firewall.
func (n *NFT) AddSession(s Session) error {
	rs, err := SessionRuleset(s)
	if err != nil {
		return err
	}
	if err := n.Apply(rs); err != nil {
		return fmt.Errorf("add session %s: %w", s.ID, err)
	}
	return nil
}

// DeleteSession implements Firewall.
func (n *NFT) DeleteSession(id string) error {
	if err := ValidateSessionID(id); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	tables, err := n.conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("delete session %s: list nft tables: %w", id, err)
	}
	if !slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == TableName }) {
		return nil
	}
	chains, err := n.conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("delete session %s: list chains: %w", id, err)
	}
	fwd, in := ChainNames(id)
	for _, c := range chains {
		if c.Table.Name == TableName && (c.Name == fwd || c.Name == in) {
			n.conn.FlushChain(c)
			n.conn.DelChain(c)
		}
	}
	sets, err := n.conn.GetSets(Table())
	if err != nil {
		return fmt.Errorf("delete session %s: list sets: %w", id, err)
	}
	v4, v6 := SetNames(id)
	for _, s := range sets {
		if s.Name == v4 || s.Name == v6 {
			n.conn.DelSet(s)
		}
	}
	if err := n.conn.Flush(); err != nil {
		return fmt.Errorf("delete session %s: %w", id, err)
	}
	return nil
}

// Pin implements Firewall. Every address is checked (CheckElement) before anything is sent;
// one bad address fails the whole call. Each address is added, deleted and added again in
// one transaction, so that an element already present gets the new timeout on every kernel
// (older kernels ignore the timeout of an element re-added with NLM_F_CREATE).
func (n *NFT) Pin(id string, addrs []netip.Addr, timeout time.Duration) error {
	if err := ValidateSessionID(id); err != nil {
		return err
	}
	var e4, e6 []nftables.SetElement
	for _, a := range addrs {
		if err := CheckElement(a); err != nil {
			return fmt.Errorf("pin for session %s: %w", id, err)
		}
		el := nftables.SetElement{Key: a.AsSlice(), Timeout: timeout}
		if a.Is4() {
			e4 = append(e4, el)
		} else {
			e6 = append(e6, el)
		}
	}
	if timeout < time.Millisecond {
		return fmt.Errorf("pin for session %s: timeout %v: %w", id, timeout, ErrBadElement)
	}
	v4, v6 := SessionSets(id)
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range []struct {
		set *nftables.Set
		els []nftables.SetElement
	}{{v4, e4}, {v6, e6}} {
		if len(x.els) == 0 {
			continue
		}
		keys := make([]nftables.SetElement, len(x.els))
		for i, el := range x.els {
			keys[i] = nftables.SetElement{Key: el.Key}
		}
		for _, step := range []func() error{
			func() error { return n.conn.SetAddElements(x.set, x.els) },
			func() error { return n.conn.SetDeleteElements(x.set, keys) },
			func() error { return n.conn.SetAddElements(x.set, x.els) },
		} {
			if err := step(); err != nil {
				return fmt.Errorf("pin in set %s: %w", x.set.Name, err)
			}
		}
	}
	if err := n.conn.Flush(); err != nil {
		return fmt.Errorf("pin %d addresses for session %s: %w", len(addrs), id, err)
	}
	return nil
}

// Cleanup implements Firewall.
func (n *NFT) Cleanup() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	tables, err := n.conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("cleanup: list nft tables: %w", err)
	}
	if !slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == TableName }) {
		return nil
	}
	n.conn.DelTable(Table())
	if err := n.conn.Flush(); err != nil {
		return fmt.Errorf("cleanup: delete nft table inet %s: %w", TableName, err)
	}
	return nil
}

// CheckElement accepts exactly one valid, unzoned, not IPv4-mapped address outside the
// refused ranges. Errors wrap ErrBadElement.
func CheckElement(a netip.Addr) error {
	if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
		return fmt.Errorf("element %v: %w", a, ErrBadElement)
	}
	if why, bad := netpolicy.RefusedReason(a); bad {
		return fmt.Errorf("element %v: %s: %w", a, why, ErrBadElement)
	}
	return nil
}

// ParseElements parses address strings (as received over an API) with netpolicy.ParseAddr
// and CheckElement: "0.0.0.0/0", text with '}', fullwidth digits, ranges, zoned or mapped
// addresses all fail with ErrBadElement before anything reaches the kernel.
func ParseElements(ss []string) ([]netip.Addr, error) {
	out := make([]netip.Addr, 0, len(ss))
	for _, s := range ss {
		a, err := netpolicy.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadElement, err)
		}
		if err := CheckElement(a); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// SetPinner pins a session's DNS answers through a Firewall; it is the netpolicy.Pinner the
// helper gives the session's DNS proxy.
type SetPinner struct {
	FW Firewall
	ID string
}

var _ netpolicy.Pinner = SetPinner{}

// Pin implements netpolicy.Pinner.
func (p SetPinner) Pin(_ context.Context, addrs []netip.Addr, timeout time.Duration) error {
	return p.FW.Pin(p.ID, addrs, timeout)
}
