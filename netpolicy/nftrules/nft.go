//go:build linux

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

// Firewall programs brood's nft table: the helper's one seam to nftables, with NFT (the
// kernel) and Fake (in memory) as its implementations.
type Firewall interface {
	// EnsureTable creates the table, its refused sets, tap maps and base chains
	// (idempotent).
	EnsureTable() error
	// EnsureMasquerade adds (or re-adds, flushed) the table's source-NAT chain that lets
	// guests reach the uplink (MasqueradeRuleset); EnsureTable must have run.
	EnsureMasquerade() error
	// AddSession adds a session's sets, chains, rules and tap map elements in one
	// transaction.
	AddSession(s Session) error
	// DeleteSession removes a session's tap map elements, chains, rules and sets (and so
	// its pins) in one transaction; a session that does not exist is not an error.
	DeleteSession(id string) error
	// Pin inserts every address . port of addrs × ports into the session's sets with
	// timeout (rounded down to whole milliseconds); a pin already present expires timeout
	// from now, whatever was left of its previous timeout.
	Pin(id string, addrs []netip.Addr, ports []netpolicy.Port, timeout time.Duration) error
	// SetRefused replaces the refused networks of session id (Session.Refused, the sets
	// s<id>_r4 / s<id>_r6 of a session added with Refused or AnyPort) in one transaction.
	SetRefused(id string, refused []netip.Prefix) error
	// HoldUplinks makes v4 and v6 the uplinks whose forwarding brood switched on (IPv4,
	// IPv6): tap_forward drops what they would forward to any other interface than a tap.
	// Empty lists release them all.
	HoldUplinks(v4, v6 []string) error
	// Cleanup deletes the whole table with everything in it (helper start and
	// `broodd-helper --cleanup`); a missing table is not an error.
	Cleanup() error
}

// NFT is the Firewall over netlink (github.com/google/nftables).
type NFT struct {
	mu   sync.Mutex
	conn *nftables.Conn

	// Group commit of pins: pending requests, and whether a Pin caller is committing them.
	qmu        sync.Mutex
	pending    []*pinReq
	committing bool
}

var _ Firewall = (*NFT)(nil)

// NewNFT opens one lasting netlink connection (a socket per operation, created inside the
// netns each time, costs milliseconds per pin); pass nftables.WithNetNSFd to work in
// another netns. Close releases it.
func NewNFT(opts ...nftables.ConnOption) (*NFT, error) {
	c, err := nftables.New(append(opts, nftables.AsLasting())...)
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink connection: %w", err)
	}
	return &NFT{conn: c}, nil
}

// Close closes the netlink connection.
func (n *NFT) Close() error {
	if err := n.conn.CloseLasting(); err != nil {
		return fmt.Errorf("close nftables netlink connection: %w", err)
	}
	return nil
}

// Apply adds every object of rs in one transaction. Chains of rs that already exist are
// flushed in the same transaction first, so that applying a ruleset twice does not
// duplicate its rules.
func (n *NFT) Apply(rs *Ruleset) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	existing, err := n.conn.ListChainsOfTableFamily(rs.Table.Family)
	if err != nil {
		return fmt.Errorf("list chains: %w", err)
	}
	n.conn.AddTable(rs.Table)
	for _, c := range rs.Chains {
		if slices.ContainsFunc(existing, func(e *nftables.Chain) bool { return e.Table.Name == rs.Table.Name && e.Name == c.Name }) {
			n.conn.FlushChain(c)
		}
	}
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
	for _, e := range rs.Elements {
		if err := n.conn.SetAddElements(e.Set, e.Elements); err != nil {
			return fmt.Errorf("add elements to %s: %w", e.Set.Name, err)
		}
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
	tapKey, err := IfNameBytes(TapPrefix + id)
	if err != nil {
		return err
	}
	for _, m := range []string{FwdMapName, InMapName, NATMapName} {
		els, err := n.conn.GetSetElements(tapMap(m))
		if err != nil {
			return fmt.Errorf("delete session %s: list map %s: %w", id, m, err)
		}
		if slices.ContainsFunc(els, func(e nftables.SetElement) bool { return string(e.Key) == string(tapKey) }) {
			if err := n.conn.SetDeleteElements(tapMap(m), []nftables.SetElement{{Key: tapKey}}); err != nil {
				return fmt.Errorf("delete session %s: %w", id, err)
			}
		}
	}
	chains, err := n.conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("delete session %s: list chains: %w", id, err)
	}
	fwd, in := ChainNames(id)
	nat := NATChainNameOf(id)
	for _, c := range chains {
		if c.Table.Name == TableName && (c.Name == fwd || c.Name == in || c.Name == nat) {
			n.conn.FlushChain(c)
			n.conn.DelChain(c)
		}
	}
	sets, err := n.conn.GetSets(Table())
	if err != nil {
		return fmt.Errorf("delete session %s: list sets: %w", id, err)
	}
	v4, v6 := SetNames(id)
	r4, r6 := RefusedSetNames(id)
	for _, s := range sets {
		if s.Name == v4 || s.Name == v6 || s.Name == r4 || s.Name == r6 {
			n.conn.DelSet(s)
		}
	}
	if err := n.conn.Flush(); err != nil {
		return fmt.Errorf("delete session %s: %w", id, err)
	}
	return nil
}

// Pin implements Firewall. Every address is checked (CheckElement) before anything is sent;
// one bad address fails the whole call. Each element is added, deleted and added again in
// one transaction, so that an element already present starts its timeout again: the
// kernel (Linux 6.18 included) keeps an existing element's expiry when it is added again
// with the same timeout, and updates it only when the timeout differs or an expiration
// is given (NFTA_SET_ELEM_EXPIRATION, which google/nftables v0.3.0 does not send). The
// delete makes the commit wait for an RCU grace period (milliseconds); concurrent pins
// share one commit.
func (n *NFT) Pin(id string, addrs []netip.Addr, ports []netpolicy.Port, timeout time.Duration) error {
	if err := ValidateSessionID(id); err != nil {
		return err
	}
	if err := checkPorts(ports); err != nil {
		return fmt.Errorf("pin for session %s: %w", id, err)
	}
	if timeout < time.Millisecond {
		return fmt.Errorf("pin for session %s: timeout %v: %w", id, timeout, ErrBadElement)
	}
	var e4, e6 []nftables.SetElement
	for _, a := range addrs {
		if err := CheckElement(a); err != nil {
			return fmt.Errorf("pin for session %s: %w", id, err)
		}
		for _, p := range ports {
			el := nftables.SetElement{Key: PinKey(a, p), Timeout: timeout}
			if a.Is4() {
				e4 = append(e4, el)
			} else {
				e6 = append(e6, el)
			}
		}
	}
	req := &pinReq{id: id, e4: e4, e6: e6, done: make(chan error, 1)}
	n.qmu.Lock()
	n.pending = append(n.pending, req)
	if n.committing {
		n.qmu.Unlock()
		return <-req.done
	}
	n.committing = true
	n.qmu.Unlock()
	for {
		n.qmu.Lock()
		batch := n.pending
		n.pending = nil
		if len(batch) == 0 {
			n.committing = false
			n.qmu.Unlock()
			break
		}
		n.qmu.Unlock()
		n.commitPins(batch)
	}
	return <-req.done
}

// pinReq is one Pin call waiting for a transaction.
type pinReq struct {
	id     string
	e4, e6 []nftables.SetElement
	done   chan error // buffered: 1
}

// commitPins sends batch as one transaction (group commit: under load, concurrent pins
// share one netlink round trip). If it fails, each request is retried alone, so that one
// session's failure (its sets deleted meanwhile) does not fail another's.
func (n *NFT) commitPins(batch []*pinReq) {
	n.mu.Lock()
	defer n.mu.Unlock()
	send := func(reqs ...*pinReq) error {
		for _, r := range reqs {
			if err := n.queuePin(r); err != nil {
				return err
			}
		}
		return n.conn.Flush()
	}
	err := send(batch...)
	if err != nil && len(batch) > 1 {
		for _, r := range batch {
			r.done <- wrapPinErr(r, send(r))
		}
		return
	}
	for _, r := range batch {
		r.done <- wrapPinErr(r, err)
	}
}

func wrapPinErr(r *pinReq, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("pin %d addresses for session %s: %w", len(r.e4)+len(r.e6), r.id, err)
}

// queuePin adds r's elements to the pending transaction as add, delete, add (the first
// add makes the delete find the element; see Pin) (n.mu held).
func (n *NFT) queuePin(r *pinReq) error {
	v4, v6 := SessionSets(r.id)
	for _, x := range []struct {
		set *nftables.Set
		els []nftables.SetElement
	}{{v4, r.e4}, {v6, r.e6}} {
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
				return fmt.Errorf("queue elements of set %s: %w", x.set.Name, err)
			}
		}
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

// checkPorts requires at least one port, each TCP or UDP and non-zero.
func checkPorts(ports []netpolicy.Port) error {
	if len(ports) == 0 {
		return fmt.Errorf("no ports: %w", ErrBadElement)
	}
	for _, p := range ports {
		if p.Num == 0 || (p.Proto != netpolicy.TCP && p.Proto != netpolicy.UDP) {
			return fmt.Errorf("port %v: %w", p, ErrBadElement)
		}
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
func (p SetPinner) Pin(_ context.Context, addrs []netip.Addr, ports []netpolicy.Port, timeout time.Duration) error {
	return p.FW.Pin(p.ID, addrs, ports, timeout)
}
