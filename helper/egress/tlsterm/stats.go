package tlsterm

import "sync"

// EventKind says what an Event reports.
type EventKind string

// Event kinds.
const (
	EventSwap    EventKind = "swap"    // a placeholder was replaced by its real value
	EventBlock   EventKind = "block"   // a request was refused
	EventRefresh EventKind = "refresh" // a token response's new tokens got placeholders
)

// Event is one decision of the terminator, for the decision log and the summary. It
// names bindings by their Name, never by a value.
type Event struct {
	Kind EventKind `json:"kind"`
	// Host is the SNI of the connection.
	Host string `json:"host"`
	// Binding is the Name of the binding concerned; empty when none is.
	Binding string `json:"binding,omitempty"`
	// Reason says why a request was refused (EventBlock).
	Reason string `json:"reason,omitempty"`
}

// HostStats counts the events of one host.
type HostStats struct {
	Swaps     int `json:"swaps"`
	Blocks    int `json:"blocks"`
	Refreshes int `json:"refreshes"`
}

// maxStatHosts is the largest number of hosts counted one by one; the others are counted
// under OtherHosts.
const maxStatHosts = 64

// OtherHosts is the Stats.Hosts key of the hosts past maxStatHosts.
const OtherHosts = "(other)"

// Stats is a copy of the terminator's counters, by host.
type Stats struct {
	Hosts map[string]HostStats `json:"hosts"`
}

type stats struct {
	mu    sync.Mutex
	hosts map[string]HostStats
}

func (s *stats) count(e Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hosts == nil {
		s.hosts = map[string]HostStats{}
	}
	key := e.Host
	if _, ok := s.hosts[key]; !ok && len(s.hosts) >= maxStatHosts {
		key = OtherHosts
	}
	h := s.hosts[key]
	switch e.Kind {
	case EventSwap:
		h.Swaps++
	case EventBlock:
		h.Blocks++
	case EventRefresh:
		h.Refreshes++
	}
	s.hosts[key] = h
}

// Stats returns a copy of the counters.
func (t *Terminator) Stats() Stats {
	t.stats.mu.Lock()
	defer t.stats.mu.Unlock()
	out := Stats{Hosts: map[string]HostStats{}}
	for k, v := range t.stats.hosts {
		out.Hosts[k] = v
	}
	return out
}

// emit counts e and hands it to Config.Events.
func (t *Terminator) emit(e Event) {
	t.stats.count(e)
	if t.cfg.Events != nil {
		t.cfg.Events(e)
	}
}
