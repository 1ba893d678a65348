package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
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
	names = append(names, testenv.NewNetns(t, "g")) // a third guest: writeBackScenario's second session
	ipAll(t, [][]string{
		{"-n", names[1], "addr", "add", "192.0.2.10/32", "dev", "lo"},
		{"-n", names[1], "addr", "add", "192.0.2.20/32", "dev", "lo"},
	})
	runInHost(t, "TestSecretsNetns", secretsNetnsEnv, names, unitCaps)
}

// boundHost is a fake provider: it records the Authorization header of every request,
// and the body of each POST to its token endpoint (/oauth/token), which it answers with
// new tokens (canaryNewAccess, canaryNewRefresh).
type boundHost struct {
	mu     sync.Mutex
	auth   []string
	bodies []string
}

// The new real tokens the fake token endpoint answers ("canary" past the 16 bytes a
// placeholder may keep of a value's prefix).
const (
	canaryNewAccess  = "zz0123456789abcdefghcanaryNEWaccessXYZ"
	canaryNewRefresh = "yy0123456789abcdefghcanaryNEWrefreshXYZ"
)

func (b *boundHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.auth = append(b.auth, r.Header.Get("Authorization"))
	if r.URL.Path == "/oauth/token" {
		b.bodies = append(b.bodies, string(body))
	}
	b.mu.Unlock()
	if r.Method == "POST" && r.URL.Path == "/oauth/token" {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"refresh_token":%q,"expires_in":3600,"token_type":"Bearer"}`, canaryNewAccess, canaryNewRefresh)
		return
	}
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
	fakeUpstream(t, inet,
		"api.bound.test. 600 IN A 192.0.2.10",
		"other.bound.test. 600 IN A 192.0.2.20",
	)
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
	t.Run("a refresh reaches the daemon's memory only with write-back", func(t *testing.T) {
		writeBackScenario(t, e, names, apiHost)
	})
	assertNoCanary(t, logDir)
	if hl, _ := os.ReadFile(filepath.Join(logDir, "helper.log")); !strings.Contains(string(hl), `msg="audit: refreshed login kept for write-back" session=secr0010 login=test`) {
		t.Errorf("the daemon's log lacks the kept login:\n%s", hl)
	}
}

// writeBackScenario: two sessions with an OAuth login bound to api.bound.test (its token
// endpoint /oauth/token), one asking for write-back and one not, each refreshing once
// from its guest through the real egress process. The guest gets only placeholders back;
// the session that asked yields the login's new real values and expires_in from StopKeep
// (what refreshed_logins hands the owner), and the daemon's log names the login only;
// the other yields nothing, though it refreshed too.
func writeBackScenario(t *testing.T, e *Manager, names []string, apiHost *boundHost) {
	const refreshPH = "rt-PLACEHOLDERrefresh0123456789abcdefgh"
	login := []api.SecretBinding{
		{Name: "~/.test/auth.json access", Placeholder: "sk-PLACEHOLDERaccess0123456789abcdef", Value: canaryAPI, Hosts: []string{"api.bound.test"}, Login: "test", Role: api.RoleAccess},
		{Name: "~/.test/auth.json refresh", Placeholder: refreshPH, Value: "rt-canary-REAL-refresh-0123456789abcdef", Hosts: []string{"api.bound.test"},
			Login: "test", Role: api.RoleRefresh, TokenURLs: []string{"https://api.bound.test/oauth/token"}},
	}
	for i, writeBack := range []bool{true, false} {
		id := fmt.Sprintf("secr001%d", i)
		s, err := e.Start(api.StartVMArgs{ID: id, Egress: "locked", Agent: "shell",
			Secrets: &api.SessionSecrets{Bindings: login, WriteBack: writeBack}}, 1000, 1000)
		if err != nil {
			t.Fatal(err)
		}
		client := guestClient(t, names[3+i], net.JoinHostPort(s.Info.DNS, "53"), s.SecretsCA)
		resp, err := client.Post("https://api.bound.test/oauth/token", "application/x-www-form-urlencoded",
			strings.NewReader("grant_type=refresh_token&refresh_token="+refreshPH))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.Contains(string(body), "canary") || !strings.Contains(string(body), `"refresh_token":"`) {
			t.Fatalf("write-back %v: the guest got %d %s", writeBack, resp.StatusCode, body)
		}
		if got := apiHost.lastBody(); !strings.Contains(got, "refresh_token=rt-canary-REAL-refresh-") {
			t.Fatalf("write-back %v: the token endpoint got %q", writeBack, got)
		}
		end, err := e.StopKeep(id)
		if err != nil {
			t.Fatal(err)
		}
		end.Log.Close()
		if end.Summary.Secrets["api.bound.test"].Refreshes != 1 {
			t.Errorf("write-back %v: summary %v, want one refresh", writeBack, end.Summary.Secrets)
		}
		if !writeBack {
			if len(end.Refreshed) != 0 {
				t.Errorf("without write-back the daemon kept %d refreshed login(s)", len(end.Refreshed))
			}
			continue
		}
		want := map[string]string{api.RoleAccess: canaryNewAccess, api.RoleRefresh: canaryNewRefresh}
		if len(end.Refreshed) != 1 || end.Refreshed[0].Login != "test" || fmt.Sprint(end.Refreshed[0].Tokens) != fmt.Sprint(want) ||
			end.Refreshed[0].ExpiresIn != 3600 || end.Refreshed[0].At.IsZero() {
			t.Errorf("refreshed logins %+v, want login test with %v, expires_in 3600", end.Refreshed, want)
		}
	}
}

func (b *boundHost) lastBody() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.bodies) == 0 {
		return ""
	}
	return b.bodies[len(b.bodies)-1]
}

// secretsManager is startBedManager's Manager for the secrets bed: the policy allows the
// two bound hosts. It returns the Manager and its decision log directory, which also
// holds the Manager's own log (helper.log).
func secretsManager(t *testing.T, names []string) (*Manager, string) {
	b := newBed(t, bedOpts{upstream: "192.0.2.53:53", guests: names[2:], proxyProcess: true, helperLog: true,
		policy: "[[host]]\nname = \"api.bound.test\"\n[[host]]\nname = \"other.bound.test\"\n"})
	return b.e, b.logDir
}

// guestClient is an HTTPS client in netns ns that resolves through the session's DNS
// proxy at dnsAddr and trusts only caPEM (the session CA).
func guestClient(t *testing.T, ns, dnsAddr, caPEM string) *http.Client {
	waitAnsweredName(t, ns, dnsAddr, "api.bound.test.")
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
