package egress

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"brood.dev/brood/helper/api"
)

const summaryNetnsEnv = "BROOD_SUMMARY_NETNS"

// summaryNames is how many distinct names the guest queries (the review's 1,600 made the
// wait_vm reply exceed the 64 KiB frame).
const summaryNames = 1700

// TestEgressSummaryBounded: a guest queries summaryNames distinct names (refused, each a
// different name under an attacker's domain) and ok.pkg.test; the summary Stop returns
// keeps every total, lists at most api.SummaryNames names per list, says it was truncated,
// and the WaitVM reply carrying it fits the frame with room to spare.
func TestEgressSummaryBounded(t *testing.T) {
	if v := os.Getenv(summaryNetnsEnv); v != "" {
		summaryScenario(t, strings.Split(v, ","))
		return
	}
	runInHost(t, "TestEgressSummaryBounded", summaryNetnsEnv, newEgressBed(t))
}

func summaryScenario(t *testing.T, names []string) {
	e := startBedManager(t, names)
	sa, err := e.Start(api.StartVMArgs{ID: "aaaa0001", Egress: "locked", Agent: "shell"}, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
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
	sum, err := e.Stop("aaaa0001")
	if err != nil {
		t.Fatal(err)
	}
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
