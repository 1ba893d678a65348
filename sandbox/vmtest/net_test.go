package vmtest

import (
	"bufio"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox/guestcfg"
)

// tapInNetns creates, in a new network namespace, a tap device (bound to the returned
// file: it disappears with it) addressed host/30, and a TCP listener on host:0 there.
// The host's own namespace is never touched.
func tapInNetns(t *testing.T, host netip.Prefix) (*os.File, net.Listener) {
	t.Helper()
	var tap *os.File
	var ln net.Listener
	testenv.InNewNetns(t, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("open /dev/net/tun: %v", err)
		}
		ifr, err := unix.NewIfreq("brdtest0")
		if err != nil {
			t.Fatal(err)
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			t.Fatalf("TUNSETIFF: %v", err)
		}
		tap = os.NewFile(uintptr(fd), "tap")
		t.Cleanup(func() { tap.Close() })
		link, err := netlink.LinkByName("brdtest0")
		if err != nil {
			t.Fatal(err)
		}
		addr, _ := netlink.ParseAddr(host.String())
		if err := netlink.AddrAdd(link, addr); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
		lc := net.ListenConfig{}
		lc.SetMultipathTCP(false)
		ln, err = lc.Listen(t.Context(), "tcp4", net.JoinHostPort(host.Addr().String(), "0"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return nil
	})
	return tap, ln
}

// TestVMNetwork gives the VM a tap (in a namespace of its own) and a static eth0
// config; the guest must bring eth0 up, write resolv.conf and reach the host side.
func TestVMNetwork(t *testing.T) {
	a := Get(t)
	hostSide := netip.MustParsePrefix("10.77.0.1/30")
	tap, ln := tapInNetns(t, hostSide)
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			line = "read: " + err.Error()
		}
		got <- line
	}()

	cfg := &guestcfg.Net{
		Address: netip.MustParsePrefix("10.77.0.2/30"),
		Gateway: hostSide.Addr(),
		DNS:     []netip.Addr{hostSide.Addr()},
	}
	r := bootNet(t, a, "", 3*time.Minute, tap, cfg)
	r.dial(t)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	out, errOut, code := r.run(t, "ls /sys/class/net; cat /etc/resolv.conf; echo from-guest | busybox nc -w 5 10.77.0.1 "+port)
	if code != 0 || out != "eth0\nlo\nnameserver 10.77.0.1\n" {
		t.Errorf("guest: status %d stdout %q stderr %q", code, out, errOut)
	}
	select {
	case line := <-got:
		if line != "from-guest\n" {
			t.Errorf("host side got %q, want the guest's line", line)
		}
	case <-time.After(30 * time.Second):
		t.Error("host side never heard from the guest")
	}
	if out, _, _ := r.run(t, "ip route 2>/dev/null || busybox ip route"); !strings.Contains(out, "default via 10.77.0.1") {
		t.Errorf("routes: %q, want a default route via the gateway", out)
	}
	r.closeAndWait(t)
}
