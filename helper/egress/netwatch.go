package egress

import (
	"net/netip"
	"slices"
)

// A permissive session refuses the host's own networks (hostNetworks), and keeps refusing
// the current ones: while at least one permissive session runs, the Manager watches the
// host's address and route changes (NetworkLinks.WatchNetworks) and, after each, adds the
// networks that appeared to every permissive session's refused sets
// (nftrules.Firewall.SetRefused). A network that disappears stays refused until the
// session ends: a DHCP renewal or a link that goes down and up must not open the LAN in
// between.

// netState is where a session is in the watch of the host's networks.
type netState uint8

const (
	netsNone     netState = iota // not permissive, or stopped
	netsStarting                 // holds the watch; its refused sets do not exist yet
	netsTracked                  // holds the watch; refreshRefused keeps its sets current
)

// netWatch is the running watch of the host's networks.
type netWatch struct {
	stop chan struct{} // closed to end the watch
	done chan struct{} // closed when its goroutine has returned
}

// maxWatchRestarts bounds how many times a watch whose subscription failed is started
// again; past it the refused sets stay as they are (logged as an error).
const maxWatchRestarts = 16

// watchNetworks makes s hold the watch of the host's networks and starts it unless it
// runs.
func (e *Manager) watchNetworks(nl NetworkLinks, s *Session) error {
	e.netMu.Lock()
	defer e.netMu.Unlock()
	s.nets = netsStarting
	if e.watch != nil {
		return nil
	}
	w := &netWatch{stop: make(chan struct{}), done: make(chan struct{})}
	changes, err := nl.WatchNetworks(w.stop)
	if err != nil {
		return err
	}
	e.watch = w
	go e.followNetworks(nl, w, changes)
	return nil
}

// followNetworks refreshes the permissive sessions' refused networks after each change,
// until w is stopped; a watch that ends by itself is started again (and the networks read
// again: changes may have been missed) up to maxWatchRestarts times.
func (e *Manager) followNetworks(nl NetworkLinks, w *netWatch, changes <-chan struct{}) {
	defer close(w.done)
	restarts := 0
	for {
		select {
		case <-w.stop:
			return
		case _, ok := <-changes:
			if !ok {
				if restarts == maxWatchRestarts {
					e.log.Error("audit: the watch of the host's networks failed; permissive sessions keep the refused networks they have")
					return
				}
				restarts++
				var err error
				if changes, err = nl.WatchNetworks(w.stop); err != nil {
					e.log.Error("audit: watch the host's networks", "err", err)
					return
				}
			}
			e.refreshRefused()
		}
	}
}

// trackRefused records that permissive session s refuses nets (its sets hold them), then
// refreshes it once: a change between reading nets and now is not missed.
func (e *Manager) trackRefused(s *Session, nets []netip.Prefix) {
	e.netMu.Lock()
	s.nets, s.refused = netsTracked, nets
	e.netMu.Unlock()
	e.refreshRefused()
}

// untrackRefused ends s's refresh (before its sets are deleted) and stops the watch when
// no session holds it any more.
func (e *Manager) untrackRefused(s *Session) {
	e.netMu.Lock()
	s.nets = netsNone
	w := e.watch
	e.mu.Lock()
	for _, o := range e.sessions {
		if o.nets != netsNone {
			w = nil // others still hold it
		}
	}
	e.mu.Unlock()
	if w != nil {
		e.watch = nil
	}
	e.netMu.Unlock()
	if w != nil {
		close(w.stop)
		<-w.done
	}
}

// refreshRefused reads the host's networks and adds those a permissive session does not
// refuse yet to its refused sets. Errors are logged: the sets keep what they hold.
func (e *Manager) refreshRefused() {
	e.netMu.Lock()
	defer e.netMu.Unlock()
	defer func() {
		if e.onRefresh != nil {
			e.onRefresh()
		}
	}()
	var perm []*Session
	e.mu.Lock()
	for _, s := range e.sessions {
		if s.nets == netsTracked {
			perm = append(perm, s)
		}
	}
	e.mu.Unlock()
	if len(perm) == 0 {
		return
	}
	nets, err := e.hostNetworks()
	if err != nil {
		e.log.Error("audit: refresh the host's networks", "err", err)
		return
	}
	for _, s := range perm {
		added := newPrefixes(s.refused, nets)
		if len(added) == 0 {
			continue
		}
		all := append(slices.Clone(s.refused), added...)
		if err := e.fw.SetRefused(s.id, all); err != nil {
			e.log.Error("audit: refuse the host's new networks", "session", s.id, "networks", added, "err", err)
			continue
		}
		s.refused = all
		e.log.Info("audit: permissive session refuses the host's new networks", "session", s.id, "networks", added)
	}
}

// newPrefixes returns the prefixes of nets that have not, masked, in have.
func newPrefixes(have, nets []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range nets {
		p = p.Masked()
		if !slices.Contains(have, p) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}
