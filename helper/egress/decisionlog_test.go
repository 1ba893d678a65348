package egress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy/dnsproxy"
)

// TestDecisionLogQuota: entries past the byte quota are counted, not written; the file
// never exceeds the quota and the summary reports the drops as truncation.
func TestDecisionLogQuota(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const quota = 8 << 10
	dl := newDecisionLog(f, quota)
	const n = 1600
	for i := range n {
		dl.Log(dnsproxy.Decision{Name: fmt.Sprintf("n%04d.attacker.test.", i), Type: "A", Verdict: dnsproxy.Refused, Reason: "not allowed"})
	}
	fi, _ := f.Stat()
	queries, dropped, err := dl.counts()
	if err != nil || queries != n || dropped == 0 || fi.Size() > quota {
		t.Fatalf("queries %d dropped %d err %v, file %d bytes (quota %d)", queries, dropped, err, fi.Size(), quota)
	}
	sum := summarize(path, dl)
	if sum.Queries != n || sum.LogDropped != dropped || !sum.Truncated || sum.RefusedNames != n-dropped || len(sum.Refused) != api.SummaryNames {
		t.Errorf("summary = queries %d dropped %d truncated %v refused names %d (listed %d); log had %d dropped",
			sum.Queries, sum.LogDropped, sum.Truncated, sum.RefusedNames, len(sum.Refused), dropped)
	}
	t.Logf("%d decisions, quota %d bytes: %d written (%d bytes), %d dropped", n, quota, n-dropped, fi.Size(), dropped)
}

// TestSummaryTopNames: the lists keep the names queried most, ties by name, and a log
// within the bounds is not marked truncated.
func TestSummaryTopNames(t *testing.T) {
	counts := map[string]int{}
	for i := range 40 {
		counts[fmt.Sprintf("n%02d.test.", i)] = i
	}
	top, cut := topNames(counts, 3)
	if !cut || len(top) != 3 || top["n39.test."] != 39 || top["n37.test."] != 37 {
		t.Errorf("top 3 = %v, cut %v", top, cut)
	}
	if top, cut := topNames(map[string]int{"a.": 1, "b.": 1}, 3); cut || len(top) != 2 {
		t.Errorf("top of 2 = %v, cut %v", top, cut)
	}
	var buf bytes.Buffer
	dl := newDecisionLog(&buf, MaxDecisionLogBytes)
	dl.Log(dnsproxy.Decision{Name: "ok.test.", Verdict: dnsproxy.Allowed})
	path := filepath.Join(t.TempDir(), "l")
	os.WriteFile(path, buf.Bytes(), 0o600)
	if s := summarize(path, dl); s.Truncated || s.Allowed["ok.test."] != 1 || s.Queries != 1 {
		b, _ := json.Marshal(s)
		t.Errorf("small summary = %s", b)
	}
}
