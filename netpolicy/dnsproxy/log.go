package dnsproxy

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"brood.dev/brood/netpolicy"
)

// Verdict is the outcome of one query.
type Verdict string

// Verdicts of the decision log.
const (
	// Allowed: the question name is allowed; the addresses at the end of its CNAME chain
	// were pinned for it before the reply was sent.
	Allowed Verdict = "allowed"
	// Refused: the name, the query type, the request or the answer (a CNAME loop, too long
	// a chain) was refused locally; nothing was pinned.
	Refused Verdict = "refused"
	// Failed: the upstream or the pinner failed; the client got SERVFAIL, nothing usable.
	Failed Verdict = "failed"
)

// Stripped is an answered address that was removed because it is in a refused range.
type Stripped struct {
	Addr netip.Addr `json:"addr"`
	Why  string     `json:"why"`
}

// Decision is one entry of a session's egress decision log: one per query answered.
type Decision struct {
	Time    time.Time `json:"time"`
	Name    string    `json:"name"`
	Type    string    `json:"type"`
	Verdict Verdict   `json:"verdict"`
	// Reason explains a refusal or failure; for allowed names, the layer that allowed it.
	Reason string `json:"reason,omitempty"`
	// Chain lists the CNAME targets followed, in order.
	Chain []string `json:"chain,omitempty"`
	// Pinned addresses, the ports (of the queried name's entry) they were pinned on, and
	// the timeout (seconds in JSON).
	Pinned   []netip.Addr     `json:"pinned,omitempty"`
	Ports    []netpolicy.Port `json:"ports,omitempty"`
	Timeout  Seconds          `json:"timeout_s,omitempty"`
	Stripped []Stripped       `json:"stripped,omitempty"`
	// Dropped counts answer, authority and additional records that were not part of the
	// chain and were not passed on.
	Dropped int `json:"dropped,omitempty"`
}

// Seconds is a duration rendered in JSON as whole seconds.
type Seconds time.Duration

// MarshalJSON renders whole seconds.
func (s Seconds) MarshalJSON() ([]byte, error) {
	return json.Marshal(int64(time.Duration(s) / time.Second))
}

// JSONLog returns a Log function that writes one JSON object per line to w (for the
// session directory's egress log). It is safe for concurrent use; write errors are dropped
// after the first, which is returned by the returned err function.
func JSONLog(w io.Writer) (log func(Decision), err func() error) {
	var mu sync.Mutex
	var first error
	enc := json.NewEncoder(w)
	return func(d Decision) {
			mu.Lock()
			defer mu.Unlock()
			if first == nil {
				first = enc.Encode(d)
			}
		}, func() error {
			mu.Lock()
			defer mu.Unlock()
			return first
		}
}

// Summary condenses a session's decision log for the report after the session.
type Summary struct {
	// Queries counts decisions by verdict.
	Queries map[Verdict]int
	// AllowedNames and RefusedNames list distinct names (lower case, sorted) with their
	// query counts.
	AllowedNames, RefusedNames map[string]int
	// Pinned lists distinct pinned addresses, sorted; Stripped counts addresses removed
	// because they were in refused ranges.
	Pinned   []netip.Addr
	Stripped int
	// Conns counts the name gate's connection decisions (entries with a "gate" field) by
	// their verdict ("admitted", "refused", "failed"); RefusedConns counts the refused
	// ones by "NAME -> ADDR:PORT" ("(no name)" when none was read). Neither is counted in
	// Queries or the name lists.
	Conns        map[string]int
	RefusedConns map[string]int
}

// Summarize reads a JSON-lines decision log (as written by JSONLog). A malformed line is an
// error naming its line number. Entries with a "secret" field (the TLS terminator's
// events, which the helper daemon counts itself) are skipped.
func Summarize(r io.Reader) (*Summary, error) {
	s := &Summary{Queries: map[Verdict]int{}, AllowedNames: map[string]int{}, RefusedNames: map[string]int{},
		Conns: map[string]int{}, RefusedConns: map[string]int{}}
	pinned := map[netip.Addr]bool{}
	dec := json.NewDecoder(r)
	for line := 1; ; line++ {
		var d struct {
			Name     string       `json:"name"`
			Verdict  Verdict      `json:"verdict"`
			Pinned   []netip.Addr `json:"pinned"`
			Stripped []Stripped   `json:"stripped"`
			Gate     string       `json:"gate"`
			Dst      string       `json:"dst"`
			Secret   string       `json:"secret"`
		}
		if err := dec.Decode(&d); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("read decision log entry %d: %w", line, err)
		}
		if d.Secret != "" {
			continue // a TLS terminator's event: its daemon counts those itself
		}
		if d.Gate != "" {
			s.Conns[string(d.Verdict)]++
			if d.Verdict == Refused {
				s.RefusedConns[cmp.Or(strings.ToLower(d.Name), "(no name)")+" -> "+d.Dst]++
			}
			continue
		}
		s.Queries[d.Verdict]++
		name := strings.ToLower(d.Name)
		switch d.Verdict {
		case Allowed:
			s.AllowedNames[name]++
		case Refused:
			s.RefusedNames[name]++
		}
		for _, a := range d.Pinned {
			pinned[a] = true
		}
		s.Stripped += len(d.Stripped)
	}
	for a := range pinned {
		s.Pinned = append(s.Pinned, a)
	}
	slices.SortFunc(s.Pinned, netip.Addr.Compare)
	return s, nil
}
