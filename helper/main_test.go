package helper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy"
	"brood.dev/brood/sandbox"
)

// childEnv selects what a re-executed test binary does instead of running tests.
const childEnv = "BROOD_HELPER_TEST_CHILD"

// testRootsEnv carries a test CA (PEM) to a helper child (testSecretRoots).
const testRootsEnv = "BROOD_HELPER_TEST_ROOTS"

func TestMain(m *testing.M) {
	// The test knob: these tests and their re-executed helpers use documentation ranges as
	// the internet, inside namespaces they make.
	netpolicy.AllowDocumentationRanges(true)
	egress.AcceptTestRoots() // the fake bound host's CA in the egress processes (TestVMEgress)
	if code, ok := vmChild(os.Getenv(childEnv)); ok {
		os.Exit(code)
	}
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "helper-main":
		// The fake bound hosts' test CA (TestVMEgress): a seam only this binary has.
		testSecretRoots = []byte(os.Getenv(testRootsEnv))
		os.Exit(Main(os.Args[1:]))
	case "client":
		os.Exit(childClient())
	case "landlock":
		os.Exit(childLandlock())
	case "scopes":
		os.Exit(childScopes())
	case "sleep":
		time.Sleep(time.Minute)
		os.Exit(0)
	case "hold", "steal", "race":
		os.Exit(dumpableChild(os.Getenv(childEnv)))
	default:
		fmt.Fprintf(os.Stderr, "unknown %s=%q\n", childEnv, os.Getenv(childEnv))
		os.Exit(3)
	}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// syncBufferMax bounds a syncBuffer (a helper under load logs every call); older output
// is dropped.
const syncBufferMax = 1 << 20

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len()+len(p) > syncBufferMax {
		s.b.Next(s.b.Len() / 2)
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testServer is an in-process helper server on a socket in a world-traversable dir.
type testServer struct {
	sock string
	srv  *Server
	log  *syncBuffer
	cfg  *Config
}

// publicTempDir returns a fresh directory other uids can traverse (t.TempDir is 0700).
func publicTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "brood-helper-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func startServer(t *testing.T, mutate func(*Config)) *testServer {
	t.Helper()
	return startServerWith(t, mutate, nil)
}

// startServerWith is startServer with enable run on the server before it serves (e.g.
// EnableEgress).
func startServerWith(t *testing.T, mutate func(*Config), enable func(*Server)) *testServer {
	t.Helper()
	cfg := DefaultConfig()
	cfg.AllowGroup = ""
	cfg.AllowUIDs = []uint32{uint32(os.Getuid())}
	cfg.IdleSeconds = 0
	cfg.ReadTimeoutSeconds = 2
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(func(string) {}); err != nil {
		t.Fatal(err)
	}
	dir := publicTempDir(t)
	sock := filepath.Join(dir, "helper.sock")
	ln, err := ListenPath(sock, -1)
	if err != nil {
		t.Fatal(err)
	}
	// Authorization is the helper's job here, not the file mode's.
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	buf := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(buf, nil))
	caps := api.Capabilities{Helper: "test", Backends: []string{}, Accel: sandbox.AccelTCG, Policy: "none"}
	srv := NewServer(&cfg, log, caps, []api.Check{{Name: "test", OK: true}})
	if enable != nil {
		enable(srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not stop")
		}
	})
	return &testServer{sock: sock, srv: srv, log: buf, cfg: &cfg}
}

// dial opens a typed client (after hello) as this process.
func (ts *testServer) dial(t *testing.T) *api.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := api.Dial(ctx, ts.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// createSession creates a session through c on a share of a new temporary directory,
// failing t on an error.
func createSession(t *testing.T, c *api.Client) api.Session {
	t.Helper()
	share, err := api.OpenShare(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer share.Close()
	s, err := c.CreateSession(t.Context(), share)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rawConn opens an unframed connection for malformed-input tests.
func (ts *testServer) rawConn(t *testing.T) *net.UnixConn {
	t.Helper()
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: ts.sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	return uc
}

// --- re-executed children ---------------------------------------------------------------

// childOp is one step of a re-executed client.
type childOp struct {
	Op   string `json:"op"`             // hello, create, list, destroy, raw, build
	Dir  string `json:"dir,omitempty"`  // create: the share directory to open
	ID   string `json:"id,omitempty"`   // destroy
	Body string `json:"body,omitempty"` // raw: request body
	Name string `json:"name,omitempty"` // build: the recipe (api.Client.BuildImage, up to 10 minutes); pull: the reference
}

// childResult is the outcome of one childOp: Code is "" on success, the helper's error
// code, or "io: ..." for transport failures.
type childResult struct {
	Code     string            `json:"code"`
	Caps     *api.Capabilities `json:"caps,omitempty"`
	Session  *api.Session      `json:"session,omitempty"`
	Sessions []api.Session     `json:"sessions,omitempty"`
	// build: the final status, how many progress records and answers the client saw,
	// the phases in order (each once), whether any answer said it joined, the error.
	Build   *api.BuildStatus `json:"build,omitempty"`
	Records int              `json:"records,omitempty"`
	Answers int              `json:"answers,omitempty"`
	Phases  []string         `json:"phases,omitempty"`
	Joined  bool             `json:"joined,omitempty"`
	Err     string           `json:"err,omitempty"`
}

type childSpec struct {
	Sock string    `json:"sock"`
	Bind string    `json:"bind,omitempty"` // bind the client socket to this path first
	Ops  []childOp `json:"ops"`
}

func childClient() int {
	var spec childSpec
	if err := json.Unmarshal([]byte(os.Getenv("BROOD_TEST_SPEC")), &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	var laddr *net.UnixAddr
	if spec.Bind != "" {
		laddr = &net.UnixAddr{Name: spec.Bind, Net: "unix"}
	}
	uc, err := net.DialUnix("unix", laddr, &net.UnixAddr{Name: spec.Sock, Net: "unix"})
	if err != nil {
		json.NewEncoder(os.Stdout).Encode([]childResult{{Code: "io: " + err.Error()}})
		return 0
	}
	c := api.NewClient(api.NewConn(uc))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []childResult
	for _, op := range spec.Ops {
		var r childResult
		var err error
		switch op.Op {
		case "hello":
			r.Caps = &api.Capabilities{}
			err = c.Call(ctx, api.CallHello, api.HelloArgs{Version: api.Version}, r.Caps)
		case "create":
			var f *os.File
			if f, err = api.OpenShare(op.Dir); err == nil {
				var s api.Session
				s, err = c.CreateSession(ctx, f)
				f.Close()
				r.Session = &s
			}
		case "list":
			r.Sessions, err = c.ListSessions(ctx)
		case "destroy":
			err = c.DestroySession(ctx, op.ID)
		case "raw":
			err = c.CallRaw(ctx, []byte(op.Body), nil)
		case "build", "pull":
			err = childBuild(c, op.Op, op.Name, &r)
		}
		if err != nil {
			var e *api.Error
			if errors.As(err, &e) {
				r.Code = string(e.Code)
			} else {
				r.Code = "io: " + err.Error()
			}
		}
		out = append(out, r)
	}
	json.NewEncoder(os.Stdout).Encode(out)
	return 0
}

// childBuild follows the build (op "build") or pull (op "pull") of name to its end,
// recording what the client saw.
func childBuild(c *api.Client, op, name string, r *childResult) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	follow := c.BuildImage
	if op == "pull" {
		follow = c.PullImage
	}
	st, err := follow(ctx, name, func(s api.BuildStatus, p *api.BuildProgress) {
		if p == nil {
			r.Answers++
			r.Joined = r.Joined || s.Joined
			return
		}
		r.Records++
		if !slices.Contains(r.Phases, p.Phase) {
			r.Phases = append(r.Phases, p.Phase)
		}
	})
	r.Build = &st
	if err != nil {
		r.Err = err.Error()
	}
	return err
}

// runChildClient runs spec in a re-executed test binary under cred (nil: as this process).
func runChildClient(t *testing.T, cred *syscall.Credential, spec childSpec) []childResult {
	t.Helper()
	bin := publicTestBinary(t)
	js, _ := json.Marshal(spec)
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=client", "BROOD_TEST_SPEC="+string(js))
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child client: %v\n%s", err, stderr.String())
	}
	var res []childResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("child client output %q: %v", out, err)
	}
	return res
}

// ownedDir creates a directory owned by uid:gid in a public temp dir.
func ownedDir(t *testing.T, parent string, name string, uid, gid int) string {
	t.Helper()
	d := filepath.Join(parent, name)
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, uid, gid); err != nil {
		t.Fatal(err)
	}
	return d
}

func requireRoot(t *testing.T) { testenv.RequireRoot(t) }

// waitGone waits until pid has exited (or is a zombie) or fails after d.
func waitGone(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if i := bytes.LastIndexByte(b, ')'); i > 0 && strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("process %d still alive after %v", pid, d)
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && !strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z")
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// publicTestBinary is testenv.PublicTestBinary: a copy of this test binary that other uids
// can execute.
func publicTestBinary(t *testing.T) string {
	t.Helper()
	return testenv.PublicTestBinary(t)
}
