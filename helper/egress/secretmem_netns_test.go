package egress

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy/dnsproxy"
)

// secretMemNetnsEnv carries the bed's netns names to the re-executed scenario.
const secretMemNetnsEnv = "BROOD_SECRETMEM_NETNS"

// TestSecretsLockedNetns starts real egress processes with secret bindings, as the
// daemon does (under the unit's capability set plus CAP_SYS_PTRACE, which only the test
// uses, to read the non-dumpable process's smaps and memory). With the inherited
// RLIMIT_MEMLOCK, both real values lie in mappings the kernel lists as locked ("lo",
// Locked equal to their size) and excluded from core dumps ("dd"), and the process's
// VmLck is not zero. With RLIMIT_MEMLOCK 0 the session still starts, and the values lie
// in "dd" mappings that are not locked. No other writable mapping (the Go heap and
// stacks) holds a copy once the session started (before any request).
func TestSecretsLockedNetns(t *testing.T) {
	if v := os.Getenv(secretMemNetnsEnv); v != "" {
		secretMemScenario(t, strings.Split(v, ","))
		return
	}
	names := newEgressBed(t)
	testenv.IP(t, "-n", names[1], "addr", "add", "192.0.2.10/32", "dev", "lo")
	runInHost(t, "TestSecretsLockedNetns", secretMemNetnsEnv, names, unitCaps+",+sys_ptrace")
}

func secretMemScenario(t *testing.T, names []string) {
	up, err := dnsproxy.NewFakeUpstream([]string{"api.bound.test. 600 IN A 192.0.2.10"})
	if err != nil {
		t.Fatal(err)
	}
	var upSrv *dnsproxy.Server
	if err := testenv.InNetns(names[1], func() (err error) { upSrv, err = dnsproxy.Listen(up, "192.0.2.53:53"); return err }); err != nil {
		t.Fatal(err)
	}
	defer upSrv.Close(t.Context())
	cert, _, rootPEM := testenv.TestCAPEM(t, "api.bound.test")
	host := &boundHost{}
	serveBound(t, names[1], "192.0.2.10", cert, host)
	e, _ := secretsManager(t, names)
	e.TestRoots = rootPEM
	bindings := []api.SecretBinding{
		{Name: "$API_KEY", Placeholder: phAPI, Value: canaryAPI, Hosts: []string{"api.bound.test"}},
		{Name: "$OTHER_KEY", Placeholder: phOther, Value: canaryOther, Hosts: []string{"other.bound.test"}},
	}
	start := func(id string) *Session {
		t.Helper()
		s, err := e.Start(api.StartVMArgs{ID: id, Egress: "locked", Agent: "shell", Secrets: &api.SessionSecrets{Bindings: bindings}}, 1000, 1000)
		if err != nil || s.SecretsCA == "" {
			t.Fatalf("start %s: %v", id, err)
		}
		return s
	}
	t.Run("locked", func(t *testing.T) {
		s := start("smem0001")
		pid := s.proc.cmd.Process.Pid
		in, elsewhere := canaryMappings(t, pid)
		t.Logf("egress process %d: real values in %d locked, non-dumped mapping(s); %d copies in other memory", pid, len(in), elsewhere)
		for _, m := range in {
			if !m.Has("lo") || !m.Has("dd") || m.Locked != m.Size {
				t.Errorf("mapping %#x-%#x holding a value: flags %v, locked %d of %d kB", m.Start, m.End, m.Flags, m.Locked, m.Size)
			}
		}
		if len(in) == 0 {
			t.Error("no locked, non-dumped mapping holds the real values")
		}
		if elsewhere != 0 {
			t.Errorf("%d copies of the real values in other writable memory, want none", elsewhere)
		}
		if lck, err := testenv.StatusKB(strconv.Itoa(pid), "VmLck"); err != nil || lck == 0 {
			t.Errorf("VmLck %d kB (%v), want > 0", lck, err)
		}
		// One swapped request: what it leaves in ordinary memory is measured, not asserted.
		client := guestClient(t, names[2], net.JoinHostPort(s.Info.DNS, "53"), s.SecretsCA)
		req, _ := http.NewRequest("GET", "https://api.bound.test/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+phAPI)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := host.seen(); resp.StatusCode != 200 || len(got) != 1 || got[0] != "Bearer "+canaryAPI {
			t.Fatalf("swap: %d, the host saw %q", resp.StatusCode, got)
		}
		_, after := canaryMappings(t, pid)
		t.Logf("after one swapped request: %d copies in other writable memory", after)
		e.Stop("smem0001")
	})
	t.Run("RLIMIT_MEMLOCK 0: not locked, still not dumped", func(t *testing.T) {
		var saved unix.Rlimit
		unix.Getrlimit(unix.RLIMIT_MEMLOCK, &saved)
		zero := unix.Rlimit{Cur: 0, Max: saved.Max}
		if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &zero); err != nil {
			t.Fatal(err)
		}
		pid := start("smem0002").proc.cmd.Process.Pid
		unix.Setrlimit(unix.RLIMIT_MEMLOCK, &saved)
		in, _ := canaryMappings(t, pid)
		if len(in) == 0 {
			t.Fatal("no non-dumped mapping holds the real values")
		}
		for _, m := range in {
			if m.Has("lo") || !m.Has("dd") {
				t.Errorf("mapping %#x holding a value under RLIMIT_MEMLOCK 0: flags %v, want dd without lo", m.Start, m.Flags)
			}
		}
		e.Stop("smem0002")
	})
}

// canaryMappings reads every readable, resident mapping of process pid and returns
// those marked "dd" that hold both canary values, and how many times the canaries occur
// in the other writable mappings.
func canaryMappings(t *testing.T, pid int) ([]testenv.Mapping, int) {
	t.Helper()
	maps, err := testenv.Smaps(strconv.Itoa(pid))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	var in []testenv.Mapping
	elsewhere := 0
	for _, m := range maps {
		if m.Rss == 0 || !strings.HasPrefix(m.Perms, "r") {
			continue
		}
		buf := make([]byte, m.End-m.Start)
		if _, err := mem.ReadAt(buf, int64(m.Start)); err != nil {
			continue // [vvar] and the like
		}
		api, other := bytes.Count(buf, []byte(canaryAPI)), bytes.Count(buf, []byte(canaryOther))
		if m.Has("dd") && api > 0 && other > 0 {
			in = append(in, m)
			continue
		}
		if m.Perms[1] == 'w' { // not the test binary's own read-only data, which holds the canaries
			elsewhere += api + other
		}
	}
	return in, elsewhere
}
