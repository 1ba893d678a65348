package helper

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"brood.dev/brood/helper/api"
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
	for _, a := range []string{"192.0.2.10/32", "192.0.2.20/32", "192.0.2.30/32", "192.0.2.53/32"} {
		testenv.IP(t, "-n", inet, "addr", "add", a, "dev", "lo")
	}
	for _, a := range []string{"2001:db8::10/128", "2001:db8::50/128"} {
		testenv.IP(t, "-n", inet, "addr", "add", a, "dev", "lo", "nodad")
	}
	up, err := dnsproxy.NewFakeUpstream([]string{"ok.pkg.test. 60 IN A 192.0.2.10", "ok.pkg.test. 60 IN AAAA 2001:db8::10",
		"evil.pkg.test. 60 IN A 192.0.2.20", "api.bound.test. 60 IN A 192.0.2.30"})
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

	bound, rootPEM := startBoundHost(t, inet, "192.0.2.30:443", "api.bound.test")

	polDir := t.TempDir()
	policy := filepath.Join(polDir, "policy.toml")
	if err := os.WriteFile(policy, []byte("deny_hosts = [\"evil.pkg.test\"]\n[[host]]\nname = \"ok.pkg.test\"\n[[host]]\nname = \"api.bound.test\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startVMHelperEnv(t, fmt.Sprintf("[egress]\nupstream = \"192.0.2.53:53\"\npolicy_path = %q\n", policy),
		[]string{testRootsEnv + "=" + string(rootPEM)})
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
	if !hello.Caps.Secrets {
		t.Error("the helper does not say it takes secret bindings")
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
	st := a.must(vmCmd{Op: "start", ID: id, Timeout: 180, Egress: "locked", Secrets: &api.SessionSecrets{Bindings: []api.SecretBinding{
		{Name: "$OPENAI_API_KEY", Placeholder: vmPlaceholder, Value: vmCanary, Hosts: []string{"api.bound.test"}}}}})
	eg := st.Info.Egress
	if st.Info.SecretsCA == "" {
		t.Fatal("start_vm answered no session CA")
	}
	if eg == nil || eg.Profile != "locked" || eg.Tap != nftrules.TapPrefix+id || len(eg.Hosts) != 2 || !strings.HasPrefix(eg.Digest, "sha256:") ||
		eg.GuestV6 == "" || eg.DNS6 == "" {
		t.Fatalf("VMInfo.Egress = %+v", eg)
	}
	// The confined helper answers resolve_policy for the same inputs with this session's
	// hosts and digest.
	pol := a.must(vmCmd{Op: "policy", Egress: "locked"}).Policy
	var polHosts []string
	for _, h := range pol.Hosts {
		polHosts = append(polHosts, h.Name+" ("+strings.Join(h.Ports, ", ")+")")
	}
	slices.Sort(polHosts)
	if pol.Digest != eg.Digest || !slices.Equal(polHosts, eg.Hosts) {
		t.Errorf("resolve_policy = %+v; the session enforces %v, %s", pol, eg.Hosts, eg.Digest)
	}
	checkEgressProcess(t, h)
	// TCP 443 passes the session's name gate: the guest sends a real ClientHello (made
	// here by crypto/tls, written to a file by printf) with the allowed name's SNI, then
	// one with another name's SNI to the same address, which is reset. Stdin stays open a
	// while after the ClientHello so that nc waits for the greeting.
	run := a.do(vmCmd{Op: "run", ID: id, Cmd: "cat /etc/resolv.conf; " +
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
	if run.Code != "" {
		ex := a.do(vmCmd{Op: "wait", ID: id}).Exit
		t.Fatalf("guest run: %s; VM exit %s %s, console tail:\n%s", run.Code, ex.Outcome, ex.Detail, ex.ConsoleTail)
	}
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

	checkVMSecrets(t, a, h, id, st.Info.SecretsCA, bound, work)

	a.must(vmCmd{Op: "close"})
	ex := a.must(vmCmd{Op: "wait", ID: id}).Exit
	if ex.Egress == nil || ex.Egress.Allowed["ok.pkg.test."] == 0 || ex.Egress.Refused["evil.pkg.test."] == 0 ||
		ex.Egress.ConnsAdmitted < 3 || ex.Egress.RefusedConns["evil.pkg.test -> 192.0.2.10:443"] != 1 ||
		ex.Egress.Secrets["api.bound.test"].Swaps < 1 {
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

// The canary real value of TestVMEgress's secret binding, made at run time (the test
// binary, whose execute-only copy lies in the helper's run directory that the test
// scans, must not contain it), and its placeholder.
var vmCanary = "sk-proj-CANARY" + hex.EncodeToString(func() []byte {
	b := make([]byte, 14)
	rand.Read(b)
	return b
}()) + "xy"

const vmPlaceholder = "sk-proj-PLACEHOLDERvalue0123456789abcdefgh"

// boundHost records the Authorization header of every request it answers.
type boundHost struct {
	mu   sync.Mutex
	auth []string
}

func (b *boundHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.auth = append(b.auth, r.Header.Get("Authorization"))
	b.mu.Unlock()
	http.NotFound(w, r)
}

func (b *boundHost) seen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.auth)
}

// startBoundHost serves HTTPS for name at addr in netns ns, with a certificate of a new
// test CA, and returns the host and the CA (PEM).
func startBoundHost(t *testing.T, ns, addr, name string) (*boundHost, []byte) {
	cert, _, rootPEM := testenv.TestCAPEM(t, name)
	var l net.Listener
	if err := testenv.InNetns(ns, func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	b := &boundHost{}
	srv := &http.Server{Handler: b, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go srv.ServeTLS(l, "", "")
	t.Cleanup(func() { srv.Close() })
	return b, rootPEM
}

// checkVMSecrets runs TestVMEgress's secret checks in the booted guest: the agent's
// environment holds the placeholder; the guest prints its environment, every file in its
// home and every process's environment, and sends the placeholder to the bound host over
// HTTPS (git, trusting the session CA only) as a Bearer token. The bound host must get
// the real value, the guest's output must hold the placeholder and never the real value,
// and so must no file of the helper's run directory (console log, decision log), the
// session's share, nor the helper's log.
func checkVMSecrets(t *testing.T, a *vmClient, h *vmHelper, id, caPEM string, bound *boundHost, share string) {
	run := a.must(vmCmd{Op: "run", ID: id, Cmd: "export OPENAI_API_KEY=" + vmPlaceholder + "; " +
		"busybox printf '" + octal([]byte(caPEM)) + "' >/tmp/session-ca.pem; " +
		"echo ENV-BEGIN; env; echo HOME-BEGIN; find ~ -type f -exec cat {} + 2>/dev/null; " +
		"echo PROC-BEGIN; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; " +
		"git -c http.sslCAInfo=/tmp/session-ca.pem -c \"http.extraHeader=Authorization: Bearer $OPENAI_API_KEY\" " +
		"ls-remote https://api.bound.test/repo.git 2>&1; echo SECRETS-DONE"})
	out := run.Stdout
	t.Logf("secrets run: %d bytes of guest env, home files and /proc/*/environ; the bound host saw %d request(s)", len(out), len(bound.seen()))
	if !strings.Contains(out, "SECRETS-DONE") || !strings.Contains(out, "OPENAI_API_KEY="+vmPlaceholder) {
		t.Errorf("guest secrets run:\n%s", out)
	}
	if strings.Contains(out, vmCanary) {
		t.Errorf("the guest saw the real value:\n%s", out)
	}
	if got := bound.seen(); len(got) == 0 || !slices.Contains(got, "Bearer "+vmCanary) || slices.Contains(got, "Bearer "+vmPlaceholder) {
		t.Errorf("the bound host saw %q; guest output:\n%s", got, out)
	}
	for _, dir := range []string{h.runtime, share} {
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(vmCanary)) {
				t.Errorf("%s holds the real value", p)
			}
			return nil
		})
	}
	if strings.Contains(h.hc.stderr.String(), vmCanary) {
		t.Error("the helper's log holds the real value")
	}
	// The guest's memory: the VMM maps the guest's RAM into its own address space, so
	// reading the VMM's memory (as root) reads the guest's. The placeholder (in the
	// guest's environment) must be found there, the real value must not.
	m := regexp.MustCompile(`msg="audit: VM started" session=` + id + ` .*? vmm=(\d+)`).FindStringSubmatch(h.hc.stderr.String())
	if m == nil {
		t.Fatal("no VMM pid in the helper's log")
	}
	pid, _ := strconv.Atoi(m[1])
	found, scanned := scanProcMem(t, pid, vmPlaceholder, vmCanary)
	t.Logf("VMM %d memory: %d MiB scanned", pid, scanned>>20)
	if !found[vmPlaceholder] {
		t.Errorf("the placeholder is not in the VMM's memory (%d MiB scanned): the scan does not see the guest", scanned>>20)
	}
	if found[vmCanary] {
		t.Error("the real value is in the VMM's (the guest's) memory")
	}
}

// scanProcMem reads every readable mapping of process pid (/proc/PID/maps, /proc/PID/mem)
// and reports which needles occur, and how many bytes it read.
func scanProcMem(t *testing.T, pid int, needles ...string) (map[string]bool, int64) {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	found := map[string]bool{}
	var total int64
	const chunk = 4 << 20
	buf := make([]byte, chunk+256)
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[1][0] != 'r' || (len(f) >= 6 && (f[5] == "[vvar]" || f[5] == "[vsyscall]" || f[5] == "[vvar_vclock]")) {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil {
			continue
		}
		for off := start; off < end; off += chunk {
			n := min(end-off, chunk+256)
			got, _ := mem.ReadAt(buf[:n], int64(off))
			total += int64(min(got, chunk))
			for _, nd := range needles {
				if bytes.Contains(buf[:got], []byte(nd)) {
					found[nd] = true
				}
			}
		}
	}
	return found, total
}
