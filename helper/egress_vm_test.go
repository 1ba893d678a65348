package helper

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"brood.dev/brood/helper/egress"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy/dnsproxy"
	"brood.dev/brood/netpolicy/nftrules"
)

// TestVMEgress boots one VM (test image) through the helper under profile locked with
// one name allowed by the system policy. The helper runs in its own netns (as every
// helper test child does) whose uplink is a veth to an "internet" netns holding the fake
// upstream DNS and TCP servers on documentation addresses; nothing leaves them.
//
// Inside the guest, over IPv4 and IPv6 alike: the allowed name resolves (A and AAAA)
// through the session's DNS proxy (both of its addresses are in resolv.conf, which has no
// search line) and its addresses accept a TLS connection whose ClientHello names it (the
// session's name gate splices it to the server); the same address with another name's
// SNI is reset, and the summary counts both; never-resolved addresses
// (192.0.2.20, [2001:db8::50]) are unreachable; a denied name and a TXT query are
// refused and never reach the upstream; DNS to any other server (UDP 53, TCP 53, DoT 853,
// UDP 5353) gets nowhere (the servers there see nothing). After the VM: wait_vm
// summarises the decisions and the tap is gone.
func TestVMEgress(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "ip")
	inet := testenv.NewNetns(t, "i")
	for _, a := range []string{"192.0.2.10/32", "192.0.2.20/32", "192.0.2.53/32"} {
		testenv.IP(t, "-n", inet, "addr", "add", a, "dev", "lo")
	}
	for _, a := range []string{"2001:db8::10/128", "2001:db8::50/128"} {
		testenv.IP(t, "-n", inet, "addr", "add", a, "dev", "lo", "nodad")
	}
	up, err := dnsproxy.NewFakeUpstream([]string{"ok.pkg.test. 60 IN A 192.0.2.10", "ok.pkg.test. 60 IN AAAA 2001:db8::10",
		"evil.pkg.test. 60 IN A 192.0.2.20"})
	if err != nil {
		t.Fatal(err)
	}
	var upSrv *dnsproxy.Server
	if err := testenv.InNetns(inet, func() (err error) { upSrv, err = dnsproxy.Listen(up, "192.0.2.53:53"); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { upSrv.Close(t.Context()) })
	// DNS servers the guest must not reach: mDNS's port (UDP) and DoT's (TCP) on the
	// upstream's address; the upstream itself is the "other server" for UDP and TCP 53.
	other, err := dnsproxy.NewFakeUpstream([]string{"ok.pkg.test. 60 IN A 192.0.2.10"})
	if err != nil {
		t.Fatal(err)
	}
	var otherSrv *dnsproxy.Server
	if err := testenv.InNetns(inet, func() (err error) { otherSrv, err = dnsproxy.Listen(other, "192.0.2.53:5353"); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { otherSrv.Close(t.Context()) })
	for _, a := range []string{"192.0.2.10:443", "192.0.2.20:443", "[2001:db8::10]:443", "[2001:db8::50]:443", "192.0.2.53:853"} {
		var l net.Listener
		if err := testenv.InNetns(inet, func() (err error) { l, err = net.Listen("tcp", a); return err }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				// Read what the client sends first (the ClientHello through the name gate;
				// nothing but its end of file from nc </dev/null), then greet.
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				c.Read(make([]byte, 4096))
				c.Write([]byte("hello from " + a + "\n"))
				c.Close()
			}
		}()
	}

	polDir := t.TempDir()
	policy := filepath.Join(polDir, "policy.toml")
	if err := os.WriteFile(policy, []byte("deny_hosts = [\"evil.pkg.test\"]\n[[host]]\nname = \"ok.pkg.test\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startVMHelper(t, fmt.Sprintf("[egress]\nupstream = \"192.0.2.53:53\"\npolicy_path = %q\n", policy))
	hello := waitDial(t, h.hc, h.sock, 5*time.Second)
	data, _ := os.ReadFile(policy)
	if sum := sha256.Sum256(data); hello.Caps.Policy != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("hello policy_digest = %q, want the policy file's sha256", hello.Caps.Policy)
	}
	// The helper is confined: IPv6 forwarding on the tap (created later) is written under
	// Landlock (egress.IPv6Conf's held directory), as in production.
	if !hello.Caps.Landlock.Enforced {
		t.Errorf("helper not confined by Landlock: %+v", hello.Caps.Landlock)
	}
	hello.Close()

	// The helper's uplink: a veth from its netns to the internet, with the default route.
	hns := "broodegvm" + strconv.Itoa(h.hc.cmd.Process.Pid)
	testenv.IP(t, "netns", "attach", hns, strconv.Itoa(h.hc.cmd.Process.Pid))
	t.Cleanup(func() { exec.Command("ip", "netns", "del", hns).Run() })
	testenv.IP(t, "link", "add", "up0", "netns", hns, "type", "veth", "peer", "name", "up0", "netns", inet)
	testenv.IP(t, "-n", hns, "addr", "add", "172.31.255.1/30", "dev", "up0")
	testenv.IP(t, "-n", hns, "link", "set", "up0", "up")
	testenv.IP(t, "-n", hns, "route", "add", "default", "via", "172.31.255.2")
	testenv.IP(t, "-n", inet, "addr", "add", "172.31.255.2/30", "dev", "up0")
	testenv.IP(t, "-n", inet, "link", "set", "up0", "up")
	testenv.IP(t, "-n", hns, "addr", "add", "2001:db8:ffff::1/64", "dev", "up0", "nodad")
	testenv.IP(t, "-n", hns, "-6", "route", "add", "default", "via", "2001:db8:ffff::2")
	testenv.IP(t, "-n", inet, "addr", "add", "2001:db8:ffff::2/64", "dev", "up0", "nodad")

	work := publicTempDir(t)
	share := ownedDir(t, ownedDir(t, work, "w", 4242, 4242), "snapshot", 4242, 4242)
	a := startVMClient(t, h.sock, 4242)
	id := a.must(vmCmd{Op: "create", Dir: share}).Session.ID
	st := a.must(vmCmd{Op: "start", ID: id, Timeout: 180, Egress: "locked"})
	eg := st.Info.Egress
	if eg == nil || eg.Profile != "locked" || eg.Tap != nftrules.TapPrefix+id || len(eg.Hosts) != 1 || !strings.HasPrefix(eg.Digest, "sha256:") ||
		eg.GuestV6 == "" || eg.DNS6 == "" {
		t.Fatalf("VMInfo.Egress = %+v", eg)
	}
	// The confined helper answers resolve_policy for the same inputs with this session's
	// hosts and digest.
	pol := a.must(vmCmd{Op: "policy", Egress: "locked"}).Policy
	if pol.Digest != eg.Digest || len(pol.Hosts) != 1 || pol.Hosts[0].Name+" ("+strings.Join(pol.Hosts[0].Ports, ", ")+")" != eg.Hosts[0] {
		t.Errorf("resolve_policy = %+v; the session enforces %v, %s", pol, eg.Hosts, eg.Digest)
	}
	checkEgressProcess(t, h)
	// TCP 443 passes the session's name gate: the guest sends a real ClientHello (made
	// here by crypto/tls, written to a file by printf) with the allowed name's SNI, then
	// one with another name's SNI to the same address, which is reset. Stdin stays open a
	// while after the ClientHello so that nc waits for the greeting.
	run := a.must(vmCmd{Op: "run", ID: id, Cmd: "cat /etc/resolv.conf; " +
		"busybox printf '" + octal(clientHello(t, "ok.pkg.test")) + "' >/tmp/hello-ok; " +
		"busybox printf '" + octal(clientHello(t, "evil.pkg.test")) + "' >/tmp/hello-evil; " +
		"busybox nslookup ok.pkg.test; " +
		"(cat /tmp/hello-ok; sleep 5) | busybox nc -w 8 192.0.2.10 443 && echo CONNECT-ALLOWED-OK; " +
		"(cat /tmp/hello-evil; sleep 5) | busybox nc -w 8 192.0.2.10 443 | grep -q hello && echo CONNECT-EVIL-SNI-OPEN; " +
		"busybox nc -w 3 192.0.2.20 443 </dev/null && echo CONNECT-UNRESOLVED-OPEN; " +
		"busybox nslookup -type=aaaa ok.pkg.test " + eg.DNS6 + " && echo V6-PROXY-OK; " +
		"(cat /tmp/hello-ok; sleep 5) | busybox nc -w 8 2001:db8::10 443 && echo CONNECT6-ALLOWED-OK; " +
		"busybox nc -w 3 2001:db8::50 443 </dev/null && echo CONNECT6-UNRESOLVED-OPEN; " +
		"busybox nslookup evil.pkg.test; busybox nslookup -type=txt ok.pkg.test; " +
		"busybox nslookup ok.pkg.test 192.0.2.53 && echo OTHER-DNS-ANSWERED; " +
		"busybox nslookup ok.pkg.test 192.0.2.53:5353 && echo MDNS-PORT-ANSWERED; " +
		"busybox nc -w 3 192.0.2.53 53 </dev/null && echo TCP53-OPEN; " +
		"busybox nc -w 3 192.0.2.53 853 </dev/null && echo DOT-OPEN; echo done"})
	out := run.Stdout
	t.Logf("guest:\n%s", out)
	for _, want := range []string{"nameserver " + eg.DNS, "nameserver " + eg.DNS6, "192.0.2.10", "2001:db8::10",
		"hello from 192.0.2.10:443", "CONNECT-ALLOWED-OK", "V6-PROXY-OK", "hello from [2001:db8::10]:443", "CONNECT6-ALLOWED-OK", "done"} {
		if !strings.Contains(out, want) {
			t.Errorf("guest output lacks %q", want)
		}
	}
	if strings.Contains(out, "search") {
		t.Error("guest resolv.conf has a search line")
	}
	if strings.Contains(out, "CONNECT-EVIL-SNI-OPEN") {
		t.Error("the guest reached ok.pkg.test's address with another name's SNI")
	}
	for _, bad := range []string{"CONNECT-UNRESOLVED-OPEN", "hello from 192.0.2.20", "CONNECT6-UNRESOLVED-OPEN", "hello from [2001:db8::50]"} {
		if strings.Contains(out, bad) {
			t.Errorf("the guest reached a never-resolved address (%q)", bad)
		}
	}
	for _, bad := range []string{"OTHER-DNS-ANSWERED", "MDNS-PORT-ANSWERED", "TCP53-OPEN", "DOT-OPEN", "hello from 192.0.2.53:853"} {
		if strings.Contains(out, bad) {
			t.Errorf("the guest reached a DNS server other than its proxy (%q)", bad)
		}
	}
	if n := len(other.Queries()); n != 0 {
		t.Errorf("the server on UDP 5353 got %d queries from the guest", n)
	}
	if up.Asked("evil.pkg.test") {
		t.Error("a denied name reached the upstream")
	}
	for _, q := range up.Queries() {
		if q.Qtype != 1 && q.Qtype != 28 { // A, AAAA
			t.Errorf("upstream asked %v", q)
		}
	}

	a.must(vmCmd{Op: "close"})
	ex := a.must(vmCmd{Op: "wait", ID: id}).Exit
	if ex.Egress == nil || ex.Egress.Allowed["ok.pkg.test."] == 0 || ex.Egress.Refused["evil.pkg.test."] == 0 ||
		ex.Egress.ConnsAdmitted != 2 || ex.Egress.RefusedConns["evil.pkg.test -> 192.0.2.10:443"] != 1 {
		t.Errorf("wait_vm egress summary = %+v", ex.Egress)
	}
	// The whole decision log, fetched by the session's owner after the VM ended.
	if log := a.must(vmCmd{Op: "egresslog", ID: id}).Stdout; strings.Count(log, "\n") != ex.Egress.Queries ||
		!strings.Contains(log, `"evil.pkg.test."`) {
		t.Errorf("egress_log: %d lines, want %d (wait_vm's total):\n%s", strings.Count(log, "\n"), ex.Egress.Queries, log)
	}
	if err := exec.Command("ip", "-n", hns, "link", "show", eg.Tap).Run(); err == nil {
		t.Errorf("tap %s still exists after the VM", eg.Tap)
	}
	if out, _ := exec.Command("ip", "netns", "exec", hns, "nft", "list", "table", "inet", "brood").CombinedOutput(); strings.Contains(string(out), "s"+id+"_") {
		t.Errorf("session chains or sets left:\n%s", out)
	}
	a.must(vmCmd{Op: "destroy", ID: id})
}

// checkEgressProcess: the session's egress process runs as the session owner from the
// helper's execute-only copy (so it is non-dumpable from its execve on: its /proc/<pid>/fd
// belongs to root).
func checkEgressProcess(t *testing.T, h *vmHelper) {
	t.Helper()
	copyPath := SelfCopyPath(h.runtime, publicTestBinary(t))
	ents, _ := os.ReadDir("/proc")
	found := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if argv := strings.Split(string(cl), "\x00"); len(argv) < 2 || argv[1] != egress.ProxySubcommand || ppidOf(pid) != h.hc.cmd.Process.Pid {
			continue
		}
		found++
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); exe != copyPath {
			t.Errorf("egress process %d executes %q, want the execute-only copy %s", pid, exe, copyPath)
		}
		if fi, err := os.Stat(fmt.Sprintf("/proc/%d/fd", pid)); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("egress process %d is dumpable (its /proc/<pid>/fd belongs to the user): %v", pid, err)
		}
	}
	if found != 1 {
		t.Errorf("%d egress processes of the helper, want 1", found)
	}
}

// ppidOf returns pid's parent pid from /proc/<pid>/stat (0 when unreadable).
func ppidOf(pid int) int {
	return ppid(fmt.Sprintf("/proc/%d", pid))
}

// clientHello returns the ClientHello crypto/tls sends for serverName (X25519 only, so it
// stays a few hundred bytes).
func clientHello(t *testing.T, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go tls.Client(a, &tls.Config{ServerName: serverName, CurvePreferences: []tls.CurveID{tls.X25519}}).Handshake()
	buf := make([]byte, 16<<10)
	n, err := b.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// octal renders b as printf octal escapes (every byte, so none is a format directive).
func octal(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		fmt.Fprintf(&sb, "\\%03o", c)
	}
	return sb.String()
}
