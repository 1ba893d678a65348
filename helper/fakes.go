package helper

import (
	"slices"
	"sync"
)

// FakeRunners is an in-memory Runners: Orphans are the live orphan pids; Killed records
// Kill calls.
type FakeRunners struct {
	mu      sync.Mutex
	Orphans []int
	Killed  []int
}

var _ Runners = (*FakeRunners)(nil)

// ListOrphans returns the fake orphans.
func (f *FakeRunners) ListOrphans() ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.Orphans), nil
}

// Kill removes pid from Orphans and records it.
func (f *FakeRunners) Kill(pid int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Killed = append(f.Killed, pid)
	f.Orphans = slices.DeleteFunc(f.Orphans, func(p int) bool { return p == pid })
	return nil
}
