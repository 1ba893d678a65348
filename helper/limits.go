package helper

import (
	"context"
	"fmt"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/vmhost"
)

// cgroupPlacer puts a VM runner (before it starts its VMM) in its owner's cgroup, with
// the owner's quota as its limits, and lets go of an owner's cgroup when their VM ends:
// userCgroups (cgroupfs, without systemd) or systemdScopes (transient scopes, with).
type cgroupPlacer interface {
	Place(pid int, uid uint32, q userQuota) error
	Release(uid uint32)
}

// userQuota is what all of one uid's VMs together may use at once: vCPUs and guest
// memory in MiB (docs/helper-limits.md).
type userQuota struct {
	VCPUs     int
	MemoryMiB int
}

// userQuotaFor returns the configured per-uid quota, with the keys left at 0 derived
// from the host h: max_vcpus_per_user = 2 × the host's CPUs (an agent's vCPUs mostly
// wait for the model, so two per CPU still lets a user run several default-sized VMs on
// a laptop, while one user can no longer queue 16 sessions × the host's CPUs of vCPU
// threads); max_memory_mib_per_user = 3/4 of the host's RAM (a quarter stays for the host
// and the other users, so one user's guests cannot push the host into the OOM killer).
// A host whose size is unknown (0) leaves that key at 0: unlimited.
func userQuotaFor(cfg *Config, h vmhost.Resources) userQuota {
	q := userQuota{VCPUs: cfg.MaxVCPUsPerUser, MemoryMiB: cfg.MaxMemoryMiBPerUser}
	if q.VCPUs == 0 {
		q.VCPUs = 2 * h.CPUs
	}
	if q.MemoryMiB == 0 {
		q.MemoryMiB = h.MemoryMiB / 4 * 3
	}
	return q
}

// reserve books sizes (the VM session s is starting) against the quota of s's owner:
// the sum over the owner's other sessions that run a VM or are starting one, plus
// sizes, must stay within q. It fails with api.ErrLimit naming the quota key, the
// current use and the request; on success s holds sizes until its VM stops or the start
// fails (endStart). The caller has begun the start (beginStart).
func (t *Table) reserve(s *sessionRecord, sizes vmhost.Sizes, q userQuota) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	cpus, mem := 0, 0
	for _, o := range t.byID {
		if o == s || o.Owner != s.Owner || !o.holdsResources() {
			continue
		}
		cpus += o.cpus
		mem += o.memMiB
	}
	if q.VCPUs > 0 && cpus+sizes.CPUs > q.VCPUs {
		return fmt.Errorf("start VM of session %s: uid %d uses %d vCPUs in other sessions, %d more exceed max_vcpus_per_user %d: %w",
			s.ID, s.Owner, cpus, sizes.CPUs, q.VCPUs, api.ErrLimit)
	}
	if q.MemoryMiB > 0 && mem+sizes.MemoryMiB > q.MemoryMiB {
		return fmt.Errorf("start VM of session %s: uid %d uses %d MiB in other sessions, %d MiB more exceed max_memory_mib_per_user %d: %w",
			s.ID, s.Owner, mem, sizes.MemoryMiB, q.MemoryMiB, api.ErrLimit)
	}
	s.cpus, s.memMiB = sizes.CPUs, sizes.MemoryMiB
	return nil
}

// holdsResources reports whether s counts against its owner's quota: its VM is starting
// (with sizes reserved) or running. The caller holds the table's lock.
func (s *sessionRecord) holdsResources() bool {
	return s.starting || s.vm != nil && s.State == api.SessionRunning
}

// reapUnstarted destroys every session that is still "created" (never started, no
// start under way) ttl after its creation, as of now, and returns their ids. A
// non-positive ttl reaps nothing.
func (t *Table) reapUnstarted(now time.Time, ttl time.Duration) []string {
	if ttl <= 0 {
		return nil
	}
	t.mu.Lock()
	var stale []*sessionRecord
	for id, s := range t.byID {
		if s.State == api.SessionCreated && !s.starting && s.vm == nil && now.Sub(time.Unix(s.Created, 0)) >= ttl {
			stale = append(stale, s)
			delete(t.byID, id)
		}
	}
	t.mu.Unlock()
	ids := make([]string, 0, len(stale))
	for _, s := range stale {
		t.release(s)
		ids = append(ids, s.ID)
	}
	return ids
}

// reapInterval is how often the daemon looks for never-started sessions: a tenth of the
// TTL, at least a second, so a session lives at most 1.1 × the TTL.
func reapInterval(ttl time.Duration) time.Duration { return max(ttl/10, time.Second) }

// watchUnstarted runs Table.reapUnstarted every reapInterval until ctx ends, logging
// each reaped session.
func (s *Server) watchUnstarted(ctx context.Context) {
	ttl := s.cfg.UnstartedTTL()
	if ttl <= 0 {
		return
	}
	tick := time.NewTicker(reapInterval(ttl))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			for _, id := range s.sessions.reapUnstarted(now, ttl) {
				s.lastBusy.Store(time.Now().UnixNano())
				s.log.Info("audit: session never started: destroyed", "session", id, "unstarted_session_ttl_seconds", s.cfg.UnstartedTTLSeconds)
			}
		}
	}
}
