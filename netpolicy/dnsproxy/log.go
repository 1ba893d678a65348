package dnsproxy

import (
	"encoding/json"
	"io"
	"net/netip"
	"sync"
	"time"

	"brood.dev/brood/netpolicy"
)

// Verdict is the outcome of one query.
type Verdict string

// Verdicts of the decision log.
const (
	// Allowed: the name (and every CNAME in its chain) is allowed; the answer's addresses
	// were pinned before the reply was sent.
	Allowed Verdict = "allowed"
	// Refused: the name, a CNAME target, the query type or the request was refused locally;
	// nothing was pinned.
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
