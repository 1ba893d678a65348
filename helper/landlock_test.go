package helper

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
)

type llSpec struct {
	Runtime, State, HomeDir, Outside string
	Require                          bool
}

type llReport struct {
	Before, After map[string]string
	Status        api.Landlock
	Err           string
}

// llProbes are the accesses the confinement test checks, run before and after Confine.
func llProbes(s llSpec) map[string]string {
	res := func(err error) string {
		if err != nil {
			return err.Error()
		}
		return "ok"
	}
	r := map[string]string{}
	_, err := os.ReadFile(filepath.Join(s.HomeDir, "secret"))
	r["read home file"] = res(err)
	_, err = os.ReadDir(s.HomeDir)
	r["list home dir"] = res(err)
	r["write outside"] = res(os.WriteFile(filepath.Join(s.Outside, "x"), []byte("x"), 0o600))
	r["write runtime dir"] = res(os.WriteFile(filepath.Join(s.Runtime, "x"), []byte("x"), 0o600))
	r["write state dir"] = res(os.MkdirAll(filepath.Join(s.State, "sub"), 0o700))
	_, err = os.ReadDir("/usr")
	r["list /usr"] = res(err)
	// Classic TCP (Go's Dial does not use MPTCP): port 9 on loopback has no listener, so
	// before confinement this is "connection refused", after it "permission denied".
	d := net.Dialer{Timeout: time.Second}
	d.SetMultipathTCP(false)
	conn, err := d.Dial("tcp4", "127.0.0.1:9")
	if err == nil {
		conn.Close()
	}
	r["tcp connect"] = res(err)
	return r
}

func childLandlock() int {
	var s llSpec
	if err := json.Unmarshal([]byte(os.Getenv("BROOD_TEST_LL")), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	cfg := DefaultConfig()
	cfg.RuntimeDir, cfg.StateDir, cfg.RequireLandlock = s.Runtime, s.State, s.Require
	rep := llReport{Before: llProbes(s)}
	st, err := Confine(&cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	rep.Status = st
	if err != nil {
		rep.Err = err.Error()
	}
	rep.After = llProbes(s)
	json.NewEncoder(os.Stdout).Encode(rep)
	return 0
}

// TestLandlockConfinement confines a re-executed child with the helper's ruleset and
// checks that it can no longer read /home or write outside its directories, while its own
// directories and system paths still work. The same probes succeed before confinement, so
// the test fails if the restriction silently did nothing.
func TestLandlockConfinement(t *testing.T) {
	requireRoot(t)
	if abi, _ := llsys.LandlockGetABIVersion(); abi < PinnedABI {
		testenv.Skip(t, fmt.Sprintf("kernel Landlock ABI %d < pinned ABI %d", abi, PinnedABI))
	}
	if err := os.MkdirAll("/home", 0o755); err != nil {
		t.Fatal(err)
	}
	home, err := os.MkdirTemp("/home", "brood-landlock-probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	if err := os.WriteFile(filepath.Join(home, "secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	s := llSpec{Runtime: filepath.Join(base, "run"), State: filepath.Join(base, "state"), HomeDir: home, Outside: filepath.Join(base, "outside")}
	for _, d := range []string{s.Runtime, s.State, s.Outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rep := runLandlockChild(t, s)
	if rep.Err != "" || !rep.Status.Enforced || rep.Status.Mode != api.LandlockEnforced || rep.Status.ABI < PinnedABI {
		t.Fatalf("Confine = %+v, err %q", rep.Status, rep.Err)
	}
	if !strings.Contains(rep.Before["tcp connect"], "refused") {
		t.Errorf("before confinement tcp connect = %q, want connection refused", rep.Before["tcp connect"])
	}
	for probe, before := range rep.Before {
		if before != "ok" && probe != "tcp connect" {
			t.Errorf("before confinement %q failed: %s (the probe itself is broken)", probe, before)
		}
	}
	for _, denied := range []string{"read home file", "list home dir", "write outside", "tcp connect"} {
		if !strings.Contains(rep.After[denied], "permission denied") {
			t.Errorf("after confinement %q = %q, want permission denied", denied, rep.After[denied])
		}
	}
	for _, allowed := range []string{"write runtime dir", "write state dir", "list /usr"} {
		if rep.After[allowed] != "ok" {
			t.Errorf("after confinement %q = %q, want ok", allowed, rep.After[allowed])
		}
	}
	if _, err := os.Stat(filepath.Join(s.Outside, "x")); err != nil {
		t.Errorf("probe file written before confinement is missing: %v", err)
	}
}

func runLandlockChild(t *testing.T, s llSpec) llReport {
	t.Helper()
	js, _ := json.Marshal(s)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=landlock", "BROOD_TEST_LL="+string(js))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("landlock child: %v\n%s", err, stderr.String())
	}
	var rep llReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("landlock child output %q: %v\n%s", out, err, stderr.String())
	}
	return rep
}

func TestConfinementRules(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RuntimeDir, cfg.StateDir = "/run/x", "/var/lib/x"
	var got []string
	for _, r := range ConfinementRules(&cfg) {
		got = append(got, fmt.Sprint(r))
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{"/run/x", "/var/lib/x", "/usr", "/dev/null"} {
		if !strings.Contains(all, want) {
			t.Errorf("rules lack %s:\n%s", want, all)
		}
	}
	for _, never := range []string{"/home", "/root", "/tmp", "\"/\""} {
		if strings.Contains(all, never) {
			t.Errorf("rules grant %s:\n%s", never, all)
		}
	}
}

// TestConfineWithoutLandlock simulates a kernel without Landlock (no restriction is
// attempted on that path, so it runs in-process): require_landlock refuses, otherwise the
// helper reports an explicit degraded mode.
func TestConfineWithoutLandlock(t *testing.T) {
	saved := landlockABI
	t.Cleanup(func() { landlockABI = saved })
	landlockABI = func() (int, error) { return 0, errors.New("landlock disabled at boot") }
	cfg := DefaultConfig()
	cfg.RequireLandlock = true
	if _, err := Confine(&cfg, discardLog()); !errors.Is(err, ErrNoLandlock) {
		t.Errorf("required: %v, want ErrNoLandlock", err)
	}
	var logs syncBuffer
	cfg.RequireLandlock = false
	st, err := Confine(&cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil || st.Mode != api.LandlockDegraded || st.Enforced || !strings.Contains(st.Detail, "disabled at boot") {
		t.Errorf("degraded: %+v, %v", st, err)
	}
	if !strings.Contains(logs.String(), "DEGRADED") {
		t.Errorf("degraded mode not logged: %s", logs.String())
	}
}
