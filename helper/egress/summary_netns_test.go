package egress

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
)

const summaryNetnsEnv = "BROOD_SUMMARY_NETNS"

// summaryNames is how many distinct names the guest queries (the review's 1,600 made the
// wait_vm reply exceed the 64 KiB frame).
const summaryNames = 1700

// TestEgressSummaryBounded: a guest queries summaryNames distinct names (refused, each a
// different name under an attacker's domain) and ok.pkg.test; the summary Stop returns
// keeps every total, lists at most api.SummaryNames names per list, says it was truncated,
// and the WaitVM reply carrying it fits the frame with room to spare; the log StopKeepLog
// hands over holds every decision, read-only, and nothing of it is left on disk.
func TestEgressSummaryBounded(t *testing.T) {
	if v := os.Getenv(summaryNetnsEnv); v != "" {
		summaryScenario(t, strings.Split(v, ","))
		return
	}
	runInHost(t, "TestEgressSummaryBounded", summaryNetnsEnv, newEgressBed(t))
}

func summaryScenario(t *testing.T, names []string) {
	e := startBedManager(t, names)
	sa := startLocked(t, e, "aaaa0001")
	dnsA := net.JoinHostPort(sa.Info.DNS, "53")
	waitAnswered(t, names[2], dnsA)
	for i := range summaryNames {
		name := fmt.Sprintf("x%04d-%s.exfil.attacker.test.", i, strings.Repeat("a", 40))
		if r, err := queryIn(names[2], "udp", dnsA, name, dns.TypeA); err != nil || r.Rcode != dns.RcodeRefused {
			t.Fatalf("query %s = %v, %v; want REFUSED", name, r, err)
		}
	}
	if r, err := queryIn(names[2], "udp", dnsA, "ok.pkg.test.", dns.TypeA); err != nil || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("query ok.pkg.test = %v, %v", r, err)
	}
	sum, log, err := e.StopKeepLog("aaaa0001")
	if err != nil {
		t.Fatal(err)
	}
	checkKeptLog(t, log, sum.Queries)
	if sum.Queries != summaryNames+sum.Allowed["ok.pkg.test."] || sum.RefusedNames != summaryNames || sum.AllowedNames != 1 ||
		len(sum.Refused) != api.SummaryNames || sum.Allowed["ok.pkg.test."] < 2 || !sum.Truncated || sum.LogDropped != 0 {
		t.Errorf("summary: queries %d, refused names %d (listed %d), allowed %v, truncated %v, dropped %d",
			sum.Queries, sum.RefusedNames, len(sum.Refused), sum.Allowed, sum.Truncated, sum.LogDropped)
	}
	res, _ := json.Marshal(api.VMExit{Outcome: api.OutcomePoweroff, Egress: sum})
	reply, _ := json.Marshal(api.Response{Result: res})
	t.Logf("%d distinct names queried: wait_vm reply %d bytes (frame %d)", summaryNames, len(reply), api.MaxFrame)
	if len(reply) > api.MaxFrame/4 {
		t.Errorf("wait_vm reply of %d bytes, want under a quarter of the %d-byte frame", len(reply), api.MaxFrame)
	}
}

// checkKeptLog: log (StopKeepLog's) holds n decision lines, each a JSON object; it is
// read-only and unlinked.
func checkKeptLog(t *testing.T, log *os.File, n int) {
	t.Helper()
	if log == nil {
		t.Fatal("StopKeepLog kept no log")
	}
	defer log.Close()
	b, err := io.ReadAll(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != n {
		t.Errorf("kept log: %d lines, want %d (every decision)", len(lines), n)
	}
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Fatalf("kept log line %q is not JSON", l)
		}
	}
	if _, err := log.Write([]byte("x")); err == nil {
		t.Error("the kept log is writable")
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(log.Fd()), &st); err != nil || st.Nlink != 0 {
		t.Errorf("kept log has %d links (%v), want 0 (unlinked)", st.Nlink, err)
	}
}
