package nftrules

import (
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPinGroupCommit pins concurrently into one existing and one missing session, with
// every goroutine also pinning one shared address: every pin of the existing session lands although it may share a transaction
// with a failing one or with the same element.
func TestPinGroupCommit(t *testing.T) {
	ns, n := testNetns(t)
	if err := n.EnsureTable(); err != nil {
		t.Fatal(err)
	}
	if err := n.AddSession(goldenSession()); err != nil {
		t.Fatal(err)
	}
	pinConcurrently(t, ns, n)
}

func pinConcurrently(t *testing.T, ns string, n *NFT) {
	shared := netip.MustParseAddr("192.0.2.250")
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for g := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				a := netip.AddrFrom4([4]byte{192, 0, 2, byte(g*10 + i)})
				id := "t1"
				if g%4 == 3 {
					id = "gone"
				}
				if err := n.Pin(id, []netip.Addr{a, shared}, tcp443, time.Minute); (err != nil) != (id == "gone") {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("pin: unexpected result %v", err)
	}
	set := nsRun(t, ns, "nft", "list", "set", "inet", "brood", "st1_v4")
	for g := range 20 {
		a := netip.AddrFrom4([4]byte{192, 0, 2, byte(g*10 + 9)}).String()
		if got := strings.Contains(set, a+" . tcp . 443 timeout"); got != (g%4 != 3) {
			t.Errorf("%s in set: %v", a, got)
		}
	}
	if !strings.Contains(set, "192.0.2.250 . tcp . 443 timeout") {
		t.Error("shared address missing")
	}
}
