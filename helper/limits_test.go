package helper

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/vmhost"
)

// startingSession creates a session of owner in tab and begins its start.
func startingSession(t *testing.T, tab *Table, owner uint32) *sessionRecord {
	t.Helper()
	s, err := tab.Create(owner, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := tab.beginStart(s.ID, owner)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestUserQuotaPerUID: uid 1001 fills its vCPU quota with two VMs; a third is refused
// with an error naming max_vcpus_per_user and the use, while uid 1002 still starts; a
// failed start and an exited VM give their share back; the memory quota is refused the
// same way.
func TestUserQuotaPerUID(t *testing.T) {
	tab := NewTable(16)
	q := userQuota{VCPUs: 4, MemoryMiB: 2048}
	size := func(cpus, mem int) vmhost.Sizes { return vmhost.Sizes{CPUs: cpus, MemoryMiB: mem} }
	a1, a2, a3 := startingSession(t, tab, 1001), startingSession(t, tab, 1001), startingSession(t, tab, 1001)
	if err := tab.reserve(a1, size(2, 512), q); err != nil {
		t.Fatal(err)
	}
	tab.endStart(a1, new(vmhost.Handle)) // running
	if err := tab.reserve(a2, size(2, 512), q); err != nil {
		t.Fatal(err)
	}
	err := tab.reserve(a3, size(1, 512), q)
	if !errors.Is(err, api.ErrLimit) || !strings.Contains(err.Error(), "uid 1001 uses 4 vCPUs in other sessions, 1 more exceed max_vcpus_per_user 4") {
		t.Errorf("third VM of uid 1001: %v, want the vCPU quota refusal", err)
	}
	b1 := startingSession(t, tab, 1002)
	if err := tab.reserve(b1, size(4, 2048), q); err != nil {
		t.Errorf("uid 1002 while uid 1001 is at its quota: %v", err)
	}
	tab.endStart(a2, nil) // a failed start books nothing
	if err := tab.reserve(a3, size(1, 512), q); err != nil {
		t.Errorf("after uid 1001's failed start: %v", err)
	}
	b2 := startingSession(t, tab, 1002)
	err = tab.reserve(b2, size(0, 1), q)
	if !errors.Is(err, api.ErrLimit) || !strings.Contains(err.Error(), "uid 1002 uses 2048 MiB in other sessions, 1 MiB more exceed max_memory_mib_per_user 2048") {
		t.Errorf("uid 1002 over its memory quota: %v", err)
	}
	tab.vmExited(a1) // an exited VM books nothing
	a4 := startingSession(t, tab, 1001)
	if err := tab.reserve(a4, size(3, 512), q); err != nil {
		t.Errorf("after uid 1001's VM exited: %v", err)
	}
}

// TestUserQuotaDefaults: keys left at 0 are derived from the host (2 × CPUs, 3/4 of
// RAM); set keys win; an unknown host size leaves the quota unlimited.
func TestUserQuotaDefaults(t *testing.T) {
	cfg := DefaultConfig()
	if got := userQuotaFor(&cfg, vmhost.Resources{CPUs: 2, MemoryMiB: 24000}); got != (userQuota{VCPUs: 4, MemoryMiB: 18000}) {
		t.Errorf("derived quota = %+v", got)
	}
	cfg.MaxVCPUsPerUser, cfg.MaxMemoryMiBPerUser = 3, 1000
	if got := userQuotaFor(&cfg, vmhost.Resources{CPUs: 2, MemoryMiB: 24000}); got != (userQuota{VCPUs: 3, MemoryMiB: 1000}) {
		t.Errorf("configured quota = %+v", got)
	}
	cfg = DefaultConfig()
	if got := userQuotaFor(&cfg, vmhost.Resources{}); got != (userQuota{}) {
		t.Errorf("unknown host: %+v", got)
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.MaxVCPUsPerUser = -1 },
		func(c *Config) { c.MaxMemoryMiBPerUser = -1 },
		func(c *Config) { c.UnstartedTTLSeconds = -1 },
	} {
		c := DefaultConfig()
		c.AllowGroup = ""
		bad(&c)
		if err := c.Validate(func(string) {}); !errors.Is(err, ErrConfig) {
			t.Errorf("negative quota key accepted: %v", err)
		}
	}
}

// TestReapUnstarted: with a TTL of 10 minutes on an injected clock, a session created
// at t0 and never started is destroyed at t0+10m, one whose start is under way and one
// created later are kept; the later one goes at its own TTL.
func TestReapUnstarted(t *testing.T) {
	tab := NewTable(16)
	t0 := time.Unix(1_800_000_000, 0)
	old, err := tab.createAt(1001, 1001, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	starting, _ := tab.createAt(1001, 1001, nil, t0)
	if _, err := tab.beginStart(starting.ID, 1001); err != nil {
		t.Fatal(err)
	}
	fresh, _ := tab.createAt(1002, 1002, nil, t0.Add(9*time.Minute))
	const ttl = 10 * time.Minute
	if got := tab.reapUnstarted(t0.Add(ttl-time.Second), ttl); len(got) != 0 {
		t.Errorf("reaped before the TTL: %v", got)
	}
	if got := tab.reapUnstarted(t0.Add(ttl), ttl); !slices.Equal(got, []string{old.ID}) {
		t.Errorf("reaped at t0+TTL = %v, want [%s]", got, old.ID)
	}
	if _, err := tab.Get(old.ID, 1001); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("reaped session still there: %v", err)
	}
	if got := tab.reapUnstarted(t0.Add(19*time.Minute), ttl); !slices.Equal(got, []string{fresh.ID}) {
		t.Errorf("reaped at t0+19m = %v, want [%s]", got, fresh.ID)
	}
	if _, err := tab.Get(starting.ID, 1001); err != nil {
		t.Errorf("session being started was reaped: %v", err)
	}
	if got := tab.reapUnstarted(t0.Add(time.Hour), 0); len(got) != 0 {
		t.Errorf("TTL 0 reaped %v", got)
	}
}

// TestDaemonReapsUnstarted: the serving daemon itself destroys a session that was never
// started once unstarted_session_ttl_seconds (1 s here) has passed.
func TestDaemonReapsUnstarted(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.UnstartedTTLSeconds = 1 })
	c := ts.dial(t)
	s := createSession(t, c)
	// Reaped at the first tick (each second) at least 1 s after creation; the deadline
	// only bounds a broken reaper on a loaded machine.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := ts.srv.sessions.Get(s.ID, uint32(os.Getuid())); errors.Is(err, api.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("session never started still there after 30 s with a TTL of 1 s")
		}
	}
}
