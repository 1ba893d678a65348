//go:build linux

package helper

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"kernel.org/pub/linux/libs/security/libcap/cap"
)

// unitCapabilityNames returns the capabilities of CapabilityBoundingSet= in
// systemd/broodd-helper.service, and AmbientCapabilities='s value.
func unitCapabilityNames(t *testing.T) (bounding []string, ambient string) {
	t.Helper()
	data, err := os.ReadFile(repoFile(t, "systemd/broodd-helper.service"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapabilityBoundingSet="); ok {
			bounding, found = strings.Fields(v), true
		}
		if v, ok := strings.CutPrefix(line, "AmbientCapabilities="); ok {
			ambient = v
		}
	}
	if !found {
		t.Fatal("broodd-helper.service has no CapabilityBoundingSet=")
	}
	return bounding, ambient
}

// TestUnitCapabilitiesMatchUnit: unitCapabilities (what the helper keeps when it drops
// capabilities itself) and the unit's CapabilityBoundingSet name the same capabilities,
// checked both ways, and the unit grants no ambient capability.
func TestUnitCapabilitiesMatchUnit(t *testing.T) {
	names, ambient := unitCapabilityNames(t)
	inUnit := map[cap.Value]bool{}
	for _, n := range names {
		v, err := cap.FromName(strings.ToLower(n))
		if err != nil {
			t.Fatalf("unit capability %q: %v", n, err)
		}
		inUnit[v] = true
		if !containsValue(unitCapabilities, v) {
			t.Errorf("the unit grants %s but unitCapabilities lacks it", n)
		}
	}
	for _, v := range unitCapabilities {
		if !inUnit[v] {
			t.Errorf("unitCapabilities keeps %s but the unit's CapabilityBoundingSet lacks it", v)
		}
	}
	if len(names) != len(unitCapabilities) {
		t.Errorf("unit lists %d capabilities, unitCapabilities %d", len(names), len(unitCapabilities))
	}
	if ambient != "" {
		t.Errorf("AmbientCapabilities=%q, want empty", ambient)
	}
}

func containsValue(vs []cap.Value, v cap.Value) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// procCaps reads the Cap* lines of /proc/<pid>/status as bit masks.
func procCaps(t *testing.T, pid int) map[string]uint64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(k, "Cap") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			t.Fatalf("/proc/%d/status %s: %v", pid, k, err)
		}
		out[k] = n
	}
	return out
}

// childPids returns the pids of pid's children (every thread's).
func childPids(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, p := range tasks {
		data, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// TestHelperDropsCapabilities starts the real helper as root from this test (no systemd:
// it begins with every capability) and reads /proc/<pid>/status of the helper and of the
// runner spawner it started: effective = permitted = bounding = the unit's set exactly,
// ambient and inheritable empty, CAP_SYS_MODULE absent. Doctor's "capabilities" check
// shows the same set by name.
func TestHelperDropsCapabilities(t *testing.T) {
	requireRoot(t)
	if before := procCaps(t, os.Getpid()); before["CapBnd"]&(1<<cap.SYS_MODULE) == 0 {
		t.Fatal("the test process lacks CAP_SYS_MODULE in its bounding set: the helper would not start with it")
	}
	var want uint64
	for _, v := range unitCapabilities {
		want |= 1 << v
	}
	base, args := helperDirs(t)
	sock := filepath.Join(base, "h.sock")
	hc := startHelperChild(t, nil, nil, append(args, "--listen", sock, "--idle-timeout", "0")...)
	c := waitDial(t, hc, sock, 20*time.Second)
	defer c.Close()
	pids := append([]int{hc.cmd.Process.Pid}, childPids(t, hc.cmd.Process.Pid)...)
	if len(pids) < 2 {
		t.Fatalf("helper %d has no child (the runner spawner)", pids[0])
	}
	for _, pid := range pids {
		got := procCaps(t, pid)
		for _, k := range []string{"CapEff", "CapPrm", "CapBnd"} {
			if got[k] != want {
				t.Errorf("pid %d %s = %#x, want the unit's set %#x", pid, k, got[k], want)
			}
			if got[k]&(1<<cap.SYS_MODULE) != 0 {
				t.Errorf("pid %d %s holds CAP_SYS_MODULE", pid, k)
			}
		}
		for _, k := range []string{"CapInh", "CapAmb"} {
			if got[k] != 0 {
				t.Errorf("pid %d %s = %#x, want 0", pid, k, got[k])
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := c.Doctor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ch := range rep.Checks {
		if ch.Name != "capabilities" {
			continue
		}
		found = true
		wantDetail := "effective cap_chown,cap_kill,cap_setgid,cap_setuid,cap_net_bind_service,cap_net_admin; bounding cap_chown,cap_kill,cap_setgid,cap_setuid,cap_net_bind_service,cap_net_admin; ambient (none); inheritable (none)"
		if !ch.OK || ch.Warn || ch.Detail != wantDetail {
			t.Errorf("doctor capabilities = %+v, want OK with %q", ch, wantDetail)
		}
	}
	if !found {
		t.Errorf("doctor has no capabilities check: %+v", rep.Checks)
	}
}
