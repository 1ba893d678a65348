package helper

import (
	"slices"
	"strings"
	"sync"
)

// FakeLinks is an in-memory Links for tests: Taps are the existing tap names; Deleted
// records every DeleteLink call.
type FakeLinks struct {
	mu      sync.Mutex
	Taps    []string
	Deleted []string
}

var _ Links = (*FakeLinks)(nil)

// ListTaps returns the fake taps with prefix.
func (f *FakeLinks) ListTaps(prefix string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, t := range f.Taps {
		if strings.HasPrefix(t, prefix) {
			out = append(out, t)
		}
	}
	return out, nil
}

// DeleteLink removes name from Taps and records the call.
func (f *FakeLinks) DeleteLink(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Deleted = append(f.Deleted, name)
	f.Taps = slices.DeleteFunc(f.Taps, func(t string) bool { return t == name })
	return nil
}

// Calls returns a copy of Deleted.
func (f *FakeLinks) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.Deleted)
}

// FakeFirewall is an in-memory Firewall: Table reports whether "inet brood" exists;
// Deletes counts DeleteTable calls.
type FakeFirewall struct {
	mu      sync.Mutex
	Table   bool
	Deletes int
}

var _ Firewall = (*FakeFirewall)(nil)

// DeleteTable removes the fake table.
func (f *FakeFirewall) DeleteTable() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Table = false
	f.Deletes++
	return nil
}

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
