package egress

import (
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox"
)

// TestGuestLinkLocalIsKernels: the link-local address the session chains admit as the
// guest's (Addrs.GuestLL) is the one the kernel gives a NIC with the guest's MAC: a veth
// with sandbox.DefaultMAC, brought up in a netns the test makes, is polled until the
// kernel adds its link-local address (the wait is bounded only to fail).
func TestGuestLinkLocalIsKernels(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "ip")
	ns := testenv.NewNetns(t, "l")
	testenv.IP(t, "-n", ns, "link", "add", "v0", "type", "veth", "peer", "name", "eth0", "address", sandbox.DefaultMAC)
	testenv.IP(t, "-n", ns, "link", "set", "v0", "up")
	testenv.IP(t, "-n", ns, "link", "set", "eth0", "up")
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	link, err := nh.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		addrs, err := nh.AddrList(link, unix.AF_INET6)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if got, _ := netip.AddrFromSlice(a.IP); got.IsLinkLocalUnicast() {
				if got != guestLL {
					t.Fatalf("kernel's link-local address for %s is %v, Addrs.GuestLL %v", sandbox.DefaultMAC, got, guestLL)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the kernel added no link-local address to eth0")
		}
		time.Sleep(10 * time.Millisecond) // poll interval; the deadline above decides failure
	}
}
