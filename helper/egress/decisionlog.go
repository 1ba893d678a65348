package egress

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy/dnsproxy"
	"brood.dev/brood/netpolicy/namegate"
)

// MaxDecisionLogBytes is the byte quota of one session's decision log (JSON lines). An
// entry is at most a few hundred bytes plus its addresses, so 4 MiB holds some 10,000
// decisions; what a guest asks beyond it is counted (decisionLog.Dropped), not written.
const MaxDecisionLogBytes = 4 << 20

// decisionLog writes a session's decisions as JSON lines under a byte quota. It is safe
// for concurrent use (the proxy's serving goroutines call Log).
type decisionLog struct {
	w     io.Writer
	quota int64

	mu      sync.Mutex
	written int64
	queries int
	dropped int
	err     error // the first write error; later entries are dropped
}

func newDecisionLog(w io.Writer, quota int64) *decisionLog {
	return &decisionLog{w: w, quota: quota}
}

// Log writes d, or counts it as dropped when it would pass the quota or a write failed.
func (l *decisionLog) Log(d dnsproxy.Decision) {
	b, err := json.Marshal(d)
	if err != nil {
		l.drop()
		return
	}
	l.logRaw(b)
}

// logGate writes one decision of the session's name gate.
func (l *decisionLog) logGate(d namegate.Decision) {
	b, err := json.Marshal(d)
	if err != nil {
		l.drop()
		return
	}
	l.logRaw(b)
}

// logRaw writes one encoded decision (a JSON object on one line) under the quota.
func (l *decisionLog) logRaw(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queries++
	if l.err != nil || l.written+int64(len(b))+1 > l.quota {
		l.dropped++
		return
	}
	n, err := l.w.Write(append(b, '\n'))
	l.written += int64(n)
	l.err = err
}

// drop counts a decision that could not be written.
func (l *decisionLog) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queries++
	l.dropped++
}

// counts returns the decisions seen and dropped, and the first write error.
func (l *decisionLog) counts() (queries, dropped int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		err = fmt.Errorf("write egress decision log: %w", l.err)
	}
	return l.queries, l.dropped, err
}

// summarize condenses the decision log at path, written by dl, into a bounded summary
// (api.SummaryNames names per list, api.SummaryPinned addresses). An unreadable log gives
// the totals of dl only.
func summarize(path string, dl *decisionLog) *api.EgressSummary {
	queries, dropped, _ := dl.counts()
	out := &api.EgressSummary{Queries: queries, LogDropped: dropped, Truncated: dropped > 0}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	s, err := dnsproxy.Summarize(f)
	if err != nil {
		return out
	}
	out.Failed, out.Stripped = s.Queries[dnsproxy.Failed], s.Stripped
	out.AllowedNames, out.RefusedNames = len(s.AllowedNames), len(s.RefusedNames)
	var cut bool
	out.Allowed, cut = topNames(s.AllowedNames, api.SummaryNames)
	out.Truncated = out.Truncated || cut
	out.Refused, cut = topNames(s.RefusedNames, api.SummaryNames)
	out.Truncated = out.Truncated || cut
	out.ConnsAdmitted, out.ConnsRefused, out.ConnsFailed = s.Conns[namegate.Admitted], s.Conns[namegate.Refused], s.Conns[namegate.Failed]
	out.RefusedConns, cut = topNames(s.RefusedConns, api.SummaryNames)
	out.Truncated = out.Truncated || cut
	for i, a := range s.Pinned {
		if i == api.SummaryPinned {
			out.Truncated = true
			break
		}
		out.Pinned = append(out.Pinned, a.String())
	}
	return out
}

// topNames returns the n names of counts queried most (ties by name), and whether any
// was left out.
func topNames(counts map[string]int, n int) (map[string]int, bool) {
	if len(counts) == 0 {
		return nil, false
	}
	names := make([]string, 0, len(counts))
	for name := range counts {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b))
	})
	top := map[string]int{}
	for _, name := range names[:min(n, len(names))] {
		top[name] = counts[name]
	}
	return top, len(names) > n
}
