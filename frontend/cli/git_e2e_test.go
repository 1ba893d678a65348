package cli_test

// The end-to-end test of git with the developer's credentials (testing tier 3): one
// `brood run shell --git-token --ssh-agent KEY` in a real VM clones from and pushes to a
// fake code host over HTTPS and over SSH, on the agent rig (agent_e2e_test.go): the fake
// code host lives in its "internet" netns under the real names github.com and gitlab.com,
// which its fake upstream DNS answers.

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"brood.dev/brood/internal/testenv"
)

// The fake code hosts' addresses (documentation range, RFC 5737): github.com, whose SSH
// host key is in the developer's known_hosts, and gitlab.com, an allowed code host whose
// host key is not.
const (
	githubAddr = "192.0.2.21"
	gitlabAddr = "192.0.2.22"
	// unnamedAddr serves SSH too, but no name resolves to it.
	unnamedAddr = "192.0.2.23"
)

// fakeGitHost is a code host serving the bare repositories under root: smart HTTP (git
// http-backend through CGI) for requests with Basic credentials x-access-token:token, and
// git-upload-pack / git-receive-pack execs over SSH for the keys in authorized.
type fakeGitHost struct {
	root, git  string
	token      string
	authorized []ssh.PublicKey
	mu         sync.Mutex
	http       []string // "PATH?QUERY AUTHORIZATION" of every HTTP request
	offered    []string // "HOST FINGERPRINT" of the keys SSH clients offered or tried
	logins     []string // "HOST FINGERPRINT" of the keys SSH logins completed with
	execs      []string
}

func (h *fakeGitHost) note(list *[]string, s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*list = append(*list, s)
}

func (h *fakeGitHost) seen(list *[]string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(*list)
}

// ServeHTTP asks for credentials (401) until the request carries the token, then hands
// it to git http-backend; REMOTE_USER set enables receive-pack (git-http-backend(1)).
func (h *fakeGitHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.note(&h.http, r.URL.Path+"?"+r.URL.RawQuery+" "+r.Header.Get("Authorization"))
	if u, p, ok := r.BasicAuth(); !ok || u != "x-access-token" || p != h.token {
		w.Header().Set("WWW-Authenticate", `Basic realm="fake code host"`)
		http.Error(w, "credentials required", http.StatusUnauthorized)
		return
	}
	(&cgi.Handler{Path: h.git, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + h.root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=x-access-token"}}).ServeHTTP(w, r)
}

// serveSSH accepts SSH connections on l as host (its name in the notes) with hostKey
// until l is closed.
func (h *fakeGitHost) serveSSH(l net.Listener, host string, hostKey ssh.Signer) {
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		fp := host + " " + ssh.FingerprintSHA256(k)
		h.note(&h.offered, fp)
		for _, a := range h.authorized {
			if string(a.Marshal()) == string(k.Marshal()) {
				// Called for a key only offered too: the login counts once the
				// handshake, the signature's check included, succeeded.
				return &ssh.Permissions{Extensions: map[string]string{"key": fp}}, nil
			}
		}
		return nil, fmt.Errorf("unknown key %s", fp)
	}}
	cfg.AddHostKey(hostKey)
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go h.serveConn(c, cfg)
	}
}

func (h *fakeGitHost) serveConn(c net.Conn, cfg *ssh.ServerConfig) {
	defer c.Close()
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	h.note(&h.logins, sc.Permissions.Extensions["key"])
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "session only")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go h.serveSession(ch, creqs)
	}
}

// serveSession runs the session's exec, "git-upload-pack 'PATH'" or "git-receive-pack
// 'PATH'" on root/PATH, and ends the channel with its exit status.
func (h *fakeGitHost) serveSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for r := range reqs {
		if r.Type != "exec" {
			r.Reply(false, nil)
			continue
		}
		var x struct{ Command string }
		ok := ssh.Unmarshal(r.Payload, &x) == nil
		h.note(&h.execs, x.Command)
		name, arg, _ := strings.Cut(x.Command, " ")
		if !ok || (name != "git-upload-pack" && name != "git-receive-pack") {
			r.Reply(false, nil)
			return
		}
		r.Reply(true, nil)
		cmd := exec.Command(h.git, strings.TrimPrefix(name, "git-"), filepath.Join(h.root, filepath.Clean("/"+strings.Trim(arg, "'"))))
		cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
		in, err := cmd.StdinPipe()
		status := uint32(1)
		if err == nil && cmd.Start() == nil {
			go func() { io.Copy(in, ch); in.Close() }()
			if cmd.Wait() == nil {
				status = 0
			}
		}
		ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
		return
	}
}

// newSSHSigner makes an ed25519 key and its signer.
func newSSHSigner(t *testing.T) (ssh.Signer, ed25519.PrivateKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s, priv
}

// randomToken is a GitHub-shaped token made at run time (no binary or source holds it).
func randomToken(t *testing.T) string {
	const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := []byte("ghp_")
	for range 36 {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(alnum))))
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, alnum[n.Int64()])
	}
	return string(b)
}

// devAgent serves keyring as the developer's SSH agent on a socket in a directory of
// theirs and returns the socket's path.
func devAgent(t *testing.T, r *agentRig, keyring agent.Agent) string {
	t.Helper()
	dir := filepath.Join(r.base, "ssh-agent")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); os.RemoveAll(dir) })
	for _, p := range []string{dir, sock} {
		if err := os.Chown(p, agentUID, agentGID); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); agent.ServeAgent(keyring, c) }()
		}
	}()
	return sock
}

// startGitHosts puts a bare repository o/r.git with one commit under a new root, serves
// it as github.com (HTTPS and SSH, host key ghKey) and gitlab.com (SSH, host key glKey)
// in the rig's internet netns, and adds both names to its fake DNS.
func startGitHosts(t *testing.T, r *agentRig, h *fakeGitHost, ghKey, glKey ssh.Signer) {
	t.Helper()
	h.root = filepath.Join(r.base, "codehost")
	seed := filepath.Join(r.base, "codehost-seed")
	for _, args := range [][]string{{"init", "-q", "--bare", "-b", "main", filepath.Join(h.root, "o", "r.git")},
		{"init", "-q", "-b", "main", seed}, {"-C", seed, "commit", "-q", "--allow-empty", "-m", "upstream"},
		{"-C", seed, "push", "-q", filepath.Join(h.root, "o", "r.git"), "main"}} {
		cmd := exec.Command(h.git, append([]string{"-c", "user.name=u", "-c", "user.email=u@example.com"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	for _, a := range []string{githubAddr, gitlabAddr, unnamedAddr} {
		if err := ipCmd("-n", r.inet, "addr", "add", a+"/32", "dev", "lo"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ipCmd("-n", r.inet, "addr", "del", a+"/32", "dev", "lo") })
	}
	if err := r.up.Add("github.com. 60 IN A "+githubAddr, "gitlab.com. 60 IN A "+gitlabAddr); err != nil {
		t.Fatal(err)
	}
	cert, err := r.ca.Issue("github.com")
	if err != nil {
		t.Fatal(err)
	}
	var ls []net.Listener
	if err := testenv.InNetns(r.inet, func() error {
		for _, a := range []string{githubAddr + ":443", githubAddr + ":22", gitlabAddr + ":22", unnamedAddr + ":22"} {
			l, err := net.Listen("tcp", a)
			if err != nil {
				return err
			}
			ls = append(ls, l)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}}
	go srv.ServeTLS(ls[0], "", "")
	go h.serveSSH(ls[1], "github.com", ghKey)
	go h.serveSSH(ls[2], "gitlab.com", glKey)
	go h.serveSSH(ls[3], "unnamed", ghKey)
	t.Cleanup(func() {
		srv.Close()
		for _, l := range ls[1:] {
			l.Close()
		}
	})
}

// gitScript is what the guest runs: it prints its environment, git's configuration and
// the credential helper's answer, then clones and pushes over HTTPS and SSH, and tries
// gitlab.com over SSH. Each step prints a STEP=status line.
const gitScript = `export GIT_TERMINAL_PROMPT=0
echo ENV-BEGIN; env; echo ENV-END
echo CFG-BEGIN; git config --list --show-origin; echo CFG-END
printf 'protocol=https\nhost=github.com\n\n' | git credential fill; echo credential=$?
ssh-add -l; echo ssh-add=$?
commit() { echo "$1" > "$1.txt" && git add -A && git -c user.name=agent -c user.email=agent@vm commit -qm "$1"; }
cd /tmp && git clone -q https://github.com/o/r.git h && cd h && commit https && git push -q origin HEAD:refs/heads/from-https; echo https=$?
export GIT_SSH_COMMAND="ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR"
cd /tmp && git clone -q git@github.com:o/r.git s && cd s && commit ssh && git push -q origin HEAD:refs/heads/from-ssh; echo ssh=$?
git ls-remote git@gitlab.com:o/r.git; echo gitlab=$?
ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o ConnectTimeout=10 git@` + unnamedAddr + ` git-upload-pack /o/r.git </dev/null; echo unnamed=$?
`

// TestGitEndToEnd: in one real VM, `brood run shell --git-token --ssh-agent KEY` with the
// developer's token (GH_TOKEN, made at run time) and an SSH agent holding a listed and an
// unlisted key.
//
// HTTPS: the guest clones from and pushes to github.com (the fake code host, TLS with the
// test CA, through the session's egress, which terminates it and swaps the placeholder);
// the host got the real token on the clone's and the push's requests, the push landed,
// and the guest's environment, git configuration and credential helper hold the
// placeholder, never the token; no file of the session holds it.
//
// SSH: the guest's agent lists only the listed key; the guest clones and pushes over SSH
// to github.com, whose host key is the developer's known_hosts' (the login used the
// listed key); gitlab.com, an allowed code host whose key is not in known_hosts, gets no
// signature (its login fails, the filter's refusal is printed); the unlisted key was never
// offered to either; an SSH server on an address no name resolved to is not reached.
//
// One boot: the brood run takes 20 to 45 s under TCG on the loaded 2-core machine.
func TestGitEndToEnd(t *testing.T) {
	r := getAgentRig(t)
	gitBin := testenv.RequireCommand(t, "git")
	token := randomToken(t)
	listed, listedPriv := newSSHSigner(t)
	unlisted, unlistedPriv := newSSHSigner(t)
	ghKey, _ := newSSHSigner(t)
	glKey, _ := newSSHSigner(t)
	h := &fakeGitHost{git: gitBin, token: token, authorized: []ssh.PublicKey{listed.PublicKey(), unlisted.PublicKey()}}
	startGitHosts(t, r, h, ghKey, glKey)
	keyring := agent.NewKeyring()
	for _, k := range []agent.AddedKey{{PrivateKey: listedPriv, Comment: "listed"}, {PrivateKey: unlistedPriv, Comment: "unlisted"}} {
		if err := keyring.Add(k); err != nil {
			t.Fatal(err)
		}
	}
	sock := devAgent(t, r, keyring)
	kh := filepath.Join(r.home, ".ssh", "known_hosts")
	writeDevFile(t, kh, "github.com "+string(ssh.MarshalAuthorizedKey(ghKey.PublicKey())))
	t.Cleanup(func() { os.Remove(kh) })

	w := r.workspace(t, "w-git-remote")
	listedFP := ssh.FingerprintSHA256(listed.PublicKey())
	// `brood run shell` boots the test image; $BROOD_TEST_GIT_IMAGE names another image
	// (an agent's: they all have ssh and git) to run the same script on, as a custom agent.
	run := []string{"run", "--egress", "standard", "--git-token", "--ssh-agent", listedFP, "shell", "--", "sh", "-c", gitScript}
	if img := os.Getenv("BROOD_TEST_GIT_IMAGE"); img != "" {
		requireAgentImage(t, img)
		cfg := filepath.Join(r.home, ".config", "brood", "config.toml")
		writeDevFile(t, cfg, fmt.Sprintf("[agents.gitprobe]\nimage = %q\ncommand = [\"sh\", \"-c\", '''%s''']\n", img, gitScript))
		t.Cleanup(func() { os.Remove(cfg) })
		run = append(run[:len(run)-5], "gitprobe")
	}
	cmd := r.command(w, []string{"GH_TOKEN=" + token, "SSH_AUTH_SOCK=" + sock}, run...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	took := time.Since(t0)
	out, errOut := stdout.String(), stderr.String()
	defer func() {
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s\nhttp: %q\nssh offered %q logins %q execs %q", out, errOut,
				h.seen(&h.http), h.seen(&h.offered), h.seen(&h.logins), h.seen(&h.execs))
		}
	}()
	if err != nil {
		t.Fatalf("brood run: %v", err)
	}
	id := sessionID(t, errOut)
	checkGitHTTPS(t, r, h, out, errOut, id)
	checkGitSSH(t, h, out, errOut, listedFP, ssh.FingerprintSHA256(unlisted.PublicKey()), ssh.FingerprintSHA256(glKey.PublicKey()))
	if testing.Verbose() {
		t.Logf("guest output:\n%s\nbrood's stderr:\n%s\nhttp: %q\nssh offered %q", out, errOut, h.seen(&h.http), h.seen(&h.offered))
	}
	rec := readAgentRecord(t, r, id)
	t.Logf("brood run took %v (boot %.1fs, VM %.1fs)", took.Round(time.Second), rec.BootSeconds, rec.VMSeconds)
}

// writeDevFile writes body to p, p and its directory owned by the developer.
func writeDevFile(t *testing.T, p, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{filepath.Dir(p), p} {
		if err := os.Chown(q, agentUID, agentGID); err != nil {
			t.Fatal(err)
		}
	}
}

// stepStatus returns the status the script printed for step ("STEP=N"), or -1.
func stepStatus(out, step string) int {
	m := regexp.MustCompile(`(?m)^` + step + `=(\d+)$`).FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	var n int
	fmt.Sscanf(m[1], "%d", &n)
	return n
}

// checkGitHTTPS checks the HTTPS half of TestGitEndToEnd.
func checkGitHTTPS(t *testing.T, r *agentRig, h *fakeGitHost, out, errOut, id string) {
	t.Helper()
	if stepStatus(out, "https") != 0 || stepStatus(out, "credential") != 0 {
		t.Errorf("the HTTPS clone and push or the credential helper failed in the guest")
	}
	// The host got the real token on the clone's and on the push's requests.
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+h.token))
	authed := map[string]bool{}
	for _, q := range h.seen(&h.http) {
		if strings.HasSuffix(q, " "+basic) {
			authed[strings.SplitN(q, " ", 2)[0]] = true
		}
	}
	for _, want := range []string{"/o/r.git/info/refs?service=git-upload-pack", "/o/r.git/git-upload-pack?",
		"/o/r.git/info/refs?service=git-receive-pack", "/o/r.git/git-receive-pack?"} {
		if !authed[want] {
			t.Errorf("the code host got no request %s with the real token: %v", want, authed)
		}
	}
	bare := filepath.Join(h.root, "o", "r.git")
	if got := gitIn(t, bare, "log", "-1", "--format=%s", "from-https"); got != "https" {
		t.Errorf("from-https in the code host's repository: %q", got)
	}
	// The guest saw a placeholder of the token's shape where the token would be.
	m := regexp.MustCompile(`(?m)^password=(ghp_[A-Za-z0-9]{36})$`).FindStringSubmatch(out)
	if m == nil || m[1] == h.token || !strings.Contains(out, "username=x-access-token") {
		t.Errorf("the guest's credential helper did not answer x-access-token and a placeholder of the token's shape")
	}
	for _, part := range []string{"ENV-BEGIN", "CFG-BEGIN"} {
		if m != nil && !strings.Contains(section(out, part), m[1]) {
			t.Errorf("the placeholder is not in the guest's %s section", part)
		}
	}
	if strings.Contains(out, h.token) || strings.Contains(errOut, h.token) {
		t.Errorf("the token reached the guest or the run output")
	}
	sessionDir := filepath.Join(r.state, "sessions", id)
	filepath.Walk(sessionDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), h.token) {
				t.Errorf("%s holds the token", p)
			}
		}
		return nil
	})
	if !strings.Contains(errOut, "secrets: github.com:") {
		t.Errorf("the run output does not count the swaps for github.com")
	}
}

// section returns what out holds between the line NAME-BEGIN and the next *-END line.
func section(out, begin string) string {
	_, rest, _ := strings.Cut(out, begin+"\n")
	s, _, _ := strings.Cut(rest, strings.TrimSuffix(begin, "-BEGIN")+"-END")
	return s
}

// checkGitSSH checks the SSH half of TestGitEndToEnd.
func checkGitSSH(t *testing.T, h *fakeGitHost, out, errOut, listedFP, unlistedFP, gitlabFP string) {
	t.Helper()
	if stepStatus(out, "ssh-add") != 0 || !strings.Contains(out, listedFP) || strings.Contains(out, unlistedFP) {
		t.Errorf("ssh-add -l in the guest: want the listed key %s only", listedFP)
	}
	if stepStatus(out, "ssh") != 0 {
		t.Errorf("the SSH clone and push to github.com failed in the guest")
	}
	if got := gitIn(t, filepath.Join(h.root, "o", "r.git"), "log", "-1", "--format=%s", "from-ssh"); got != "ssh" {
		t.Errorf("from-ssh in the code host's repository: %q", got)
	}
	// Two logins to github.com (clone, push), none to gitlab.com, every one with the
	// listed key; the unlisted key never reached either host.
	gh := "github.com " + listedFP
	if got := h.seen(&h.logins); len(got) != 2 || got[0] != gh || got[1] != gh {
		t.Errorf("SSH logins %q, want two to github.com with %s (the clone and the push)", got, listedFP)
	}
	offered := h.seen(&h.offered)
	if !slices.Contains(offered, "gitlab.com "+listedFP) {
		t.Errorf("gitlab.com was never offered the listed key (was it reached?): %q", offered)
	}
	for _, o := range offered {
		if strings.HasSuffix(o, " "+unlistedFP) {
			t.Errorf("the unlisted key %s was offered to a code host: %q", unlistedFP, o)
		}
	}
	if s := stepStatus(out, "gitlab"); s == 0 || s == -1 {
		t.Errorf("git ls-remote of gitlab.com (host key not in known_hosts): status %d, want a failed login", s)
	}
	// Port 22 of an address no name resolved to is not reached (the firewall pins port 22
	// only for the addresses of allowed code hosts brood's DNS answered).
	if stepStatus(out, "unnamed") <= 0 || slices.ContainsFunc(offered, func(o string) bool { return strings.HasPrefix(o, "unnamed ") }) {
		t.Errorf("ssh to %s (no name resolves to it): status %d, offered %q; want no connection", unnamedAddr, stepStatus(out, "unnamed"), offered)
	}
	if !regexp.MustCompile(`ssh-agent: 2 signature\(s\) \(2 for github\.com\), [1-9]\d* request\(s\) refused`).MatchString(errOut) {
		t.Errorf("the run output does not count 2 signatures for github.com and the refusals")
	}
	if !regexp.MustCompile(`ssh-agent refused sign ` + regexp.QuoteMeta(listedFP) + `: .*host key ` + regexp.QuoteMeta(gitlabFP) + `, which no allowed code host has`).MatchString(errOut) {
		t.Errorf("the run output does not show the refused signature for gitlab.com")
	}
}
