package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy/dnsproxy"
	"brood.dev/brood/netpolicy/nftrules"
)

// secretsNetnsEnv carries the bed's netns names to the re-executed scenario.
const secretsNetnsEnv = "BROOD_SECRETS_NETNS"

// The canary real values and their placeholders.
const (
	canaryAPI   = "sk-canary-REAL-api-0123456789abcdefXYZ"
	canaryOther = "sk-canary-REAL-other-0123456789abcdefXYZ"
	phAPI       = "sk-PLACEHOLDERapi0123456789abcdef"
	phOther     = "sk-PLACEHOLDERother0123456789abcdef"
)

// TestSecretsNetns runs the secret swap as it runs for a VM: the helper's egress layer
// under the unit's capability set, the session's real egress process (this test binary,
// the session's uid) with the TLS terminator behind its name gate, a guest netns, and in
// the internet netns two fake bound hosts over TLS (api.bound.test 192.0.2.10,
// other.bound.test 192.0.2.20; certificates of a test CA the egress process trusts
// through Manager.TestRoots, which only a test binary's process accepts). The guest
// trusts only the session CA. Checked: the bound host receives the real value while the
// guest sent the placeholder; the placeholder sent to another bound, allowed host is
// refused before that host sees it; a binding whose hosts the policy does not allow is
// refused at start, by name, and so are bindings in a permissive session; the summary and the decision log count both, and no real
// value is in the decision log, the log directory, or the process's argv.
func TestSecretsNetns(t *testing.T) {
	if v := os.Getenv(secretsNetnsEnv); v != "" {
		secretsScenario(t, strings.Split(v, ","))
		return
	}
	names := newEgressBed(t)
	for _, a := range []string{"192.0.2.10/32", "192.0.2.20/32"} {
		testenv.IP(t, "-n", names[1], "addr", "add", a, "dev", "lo")
	}
	runInHost(t, "TestSecretsNetns", secretsNetnsEnv, names, unitCaps)
}

// boundHost is a fake provider: it records the Authorization header of every request.
type boundHost struct {
	mu   sync.Mutex
	auth []string
}

func (b *boundHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.auth = append(b.auth, r.Header.Get("Authorization"))
	b.mu.Unlock()
	fmt.Fprintf(w, "hello from %s", r.Host)
}

func (b *boundHost) seen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.auth...)
}

// serveBound starts an HTTPS server (cert) for h at addr:443 in netns ns.
func serveBound(t *testing.T, ns, addr string, cert tls.Certificate, h http.Handler) {
	var l net.Listener
	if err := testenv.InNetns(ns, func() (err error) { l, err = net.Listen("tcp", addr+":443"); return err }); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go srv.ServeTLS(l, "", "")
	t.Cleanup(func() { srv.Close() })
}

func secretsScenario(t *testing.T, names []string) {
	inet, g1 := names[1], names[2]
	up, err := dnsproxy.NewFakeUpstream([]string{
		"api.bound.test. 600 IN A 192.0.2.10",
		"other.bound.test. 600 IN A 192.0.2.20",
	})
	if err != nil {
		t.Fatal(err)
	}
	var upSrv *dnsproxy.Server
	if err := testenv.InNetns(inet, func() (err error) { upSrv, err = dnsproxy.Listen(up, "192.0.2.53:53"); return err }); err != nil {
		t.Fatal(err)
	}
	defer upSrv.Close(t.Context())
	cert, _, rootPEM := testenv.TestCAPEM(t, "api.bound.test", "other.bound.test")
	apiHost, otherHost := &boundHost{}, &boundHost{}
	serveBound(t, inet, "192.0.2.10", cert, apiHost)
	serveBound(t, inet, "192.0.2.20", cert, otherHost)
	e, logDir := secretsManager(t, names)
	e.TestRoots = rootPEM

	bindings := []api.SecretBinding{
		{Name: "$API_KEY", Placeholder: phAPI, Value: canaryAPI, Hosts: []string{"api.bound.test"}},
		{Name: "$OTHER_KEY", Placeholder: phOther, Value: canaryOther, Hosts: []string{"other.bound.test"}},
	}
	t.Run("a binding whose hosts the policy does not allow is refused by name", func(t *testing.T) {
		bad := append([]api.SecretBinding{}, bindings...)
		bad = append(bad, api.SecretBinding{Name: "$NOWHERE_KEY", Placeholder: "sk-PLACEHOLDERnowhere0123456789ab", Value: "sk-canary-REAL-nowhere-0123456789", Hosts: []string{"not.allowed.test"}})
		_, err := e.Start(api.StartVMArgs{ID: "secr0002", Egress: "locked", Agent: "shell", Secrets: &api.SessionSecrets{Bindings: bad}}, 1000, 1000)
		if !errors.Is(err, api.ErrPolicy) || !strings.Contains(err.Error(), "$NOWHERE_KEY") || !strings.Contains(err.Error(), "not.allowed.test") {
			t.Fatalf("start with an unreachable binding: %v", err)
		}
		if strings.Contains(err.Error(), "sk-canary") {
			t.Fatalf("the error holds a value: %v", err)
		}
	})
	t.Run("a permissive session, which is not gated, refuses bindings", func(t *testing.T) {
		_, err := e.Start(api.StartVMArgs{ID: "secr0003", Egress: "permissive", Agent: "shell", Secrets: &api.SessionSecrets{Bindings: bindings}}, 1000, 1000)
		if !errors.Is(err, api.ErrPolicy) || !strings.Contains(err.Error(), "gated") || strings.Contains(err.Error(), "canary") {
			t.Fatalf("permissive start with bindings: %v", err)
		}
	})
	s, err := e.Start(api.StartVMArgs{ID: "secr0001", Egress: "locked", Agent: "shell", Secrets: &api.SessionSecrets{Bindings: bindings}}, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if s.SecretsCA == "" {
		t.Fatal("no session CA answered")
	}
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.proc.cmd.Process.Pid)); err != nil || strings.Contains(string(cmdline), "canary") {
		t.Errorf("egress process argv %q (%v)", cmdline, err)
	}
	client := guestClient(t, g1, net.JoinHostPort(s.Info.DNS, "53"), s.SecretsCA)
	get := func(host, ph string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://"+host+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+ph)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", host, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	t.Run("the bound host gets the real value, the guest sent the placeholder", func(t *testing.T) {
		code, body := get("api.bound.test", phAPI)
		if code != 200 || body != "hello from api.bound.test" {
			t.Fatalf("answer %d %q", code, body)
		}
		if got := apiHost.seen(); len(got) != 1 || got[0] != "Bearer "+canaryAPI {
			t.Fatalf("api.bound.test saw %q", got)
		}
	})
	t.Run("the placeholder sent to another bound host is refused before it arrives", func(t *testing.T) {
		code, body := get("other.bound.test", phAPI)
		if code != http.StatusForbidden || strings.Contains(body, "canary") {
			t.Fatalf("answer %d %q", code, body)
		}
		if got := otherHost.seen(); len(got) != 0 {
			t.Fatalf("other.bound.test saw %q", got)
		}
	})
	// The log as Stop leaves it, having read every decision the process still sent: an
	// event may reach the daemon after the guest got the answer it belongs to.
	sum, logFile, err := e.StopKeepLog("secr0001")
	if err != nil {
		t.Fatal(err)
	}
	logData, err := io.ReadAll(logFile)
	logFile.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]api.SecretCounts{"api.bound.test": {Swaps: 1}, "other.bound.test": {Blocks: 1}}
	if fmt.Sprint(sum.Secrets) != fmt.Sprint(want) {
		t.Errorf("summary secrets = %v, want %v", sum.Secrets, want)
	}
	if sum.ConnsAdmitted != 2 {
		t.Errorf("gate admitted %d connections, want 2", sum.ConnsAdmitted)
	}
	log := string(logData)
	if !strings.Contains(log, `"secret":"swap","host":"api.bound.test","binding":"$API_KEY"`) ||
		!strings.Contains(log, `"secret":"block","host":"other.bound.test","binding":"$API_KEY"`) {
		t.Errorf("decision log lacks the swap or the block:\n%s", log)
	}
	if strings.Contains(log, "canary") || strings.Contains(log, "PLACEHOLDER") {
		t.Errorf("decision log holds a value or placeholder:\n%s", log)
	}
	assertNoCanary(t, logDir)
}

// secretsManager is startBedManager's Manager for the secrets bed: the policy allows the
// two bound hosts. It returns the Manager and its decision log directory.
func secretsManager(t *testing.T, names []string) (*Manager, string) {
	links, err := NewNetlinkLinks(-1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { links.Close() })
	fw, err := nftrules.NewNFT()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Close() })
	cfg := DefaultConfig()
	cfg.Upstream = "192.0.2.53:53"
	cfg.PolicyPath = writeRootPolicy(t, "[[host]]\nname = \"api.bound.test\"\n[[host]]\nname = \"other.bound.test\"\n")
	logDir := t.TempDir()
	e, err := New(cfg, logDir, &vethTaps{NetlinkLinks: links, guests: names[2:]}, fw, nil,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e.ProxyExe = publicTestBinary(t)
	t.Cleanup(e.StopAll)
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(publicBin)) })
	return e, logDir
}

// guestClient is an HTTPS client in netns ns that resolves through the session's DNS
// proxy at dnsAddr and trusts only caPEM (the session CA).
func guestClient(t *testing.T, ns, dnsAddr, caPEM string) *http.Client {
	// A fresh veth drops packets until its carrier is up (see waitAnswered).
	for deadline := time.Now().Add(10 * time.Second); ; {
		r, err := queryIn(ns, "tcp", dnsAddr, "api.bound.test.", dns.TypeA)
		if err == nil && r.Rcode == dns.RcodeSuccess {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("query %s from %s = %v, %v", dnsAddr, ns, r, err)
		}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		t.Fatal("session CA: no certificate")
	}
	dial := func(ctx context.Context, _, addr string) (net.Conn, error) {
		host, port, _ := net.SplitHostPort(addr)
		r, err := queryIn(ns, "udp", dnsAddr, host+".", dns.TypeA)
		if err != nil || len(r.Answer) == 0 {
			return nil, fmt.Errorf("resolve %s: %v %v", host, r, err)
		}
		a, ok := r.Answer[len(r.Answer)-1].(*dns.A)
		if !ok {
			return nil, fmt.Errorf("resolve %s: %v", host, r.Answer)
		}
		return dialIn(ns, "tcp", net.JoinHostPort(a.A.String(), port), 5*time.Second)
	}
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: dial,
		TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
}

// assertNoCanary fails t when any file under dir holds a canary value.
func assertNoCanary(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "canary") {
			t.Errorf("%s holds a canary", p)
		}
		return nil
	})
}
