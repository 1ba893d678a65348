package lockedmem

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/testenv"
)

const canary = "sk-canary-REAL-lockedmem-0123456789abcdef"

// mappingOf returns the smaps entry of this process that holds s's bytes.
func mappingOf(t *testing.T, s string) testenv.Mapping {
	t.Helper()
	maps, err := testenv.Smaps("self")
	if err != nil {
		t.Fatal(err)
	}
	addr := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	for _, m := range maps {
		if m.Contains(addr, uintptr(len(s))) {
			return m
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return testenv.Mapping{}
}

// TestArenaLockedAndNotDumped: a string made by the arena lies in a mapping the kernel
// lists as locked ("lo", Locked equal to its size) and excluded from core dumps ("dd");
// an ordinary heap string's mapping has neither flag.
func TestArenaLockedAndNotDumped(t *testing.T) {
	a := New()
	s, _, err := a.String(canary)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.LockErr(); err != nil {
		t.Fatalf("lock under this process's RLIMIT_MEMLOCK: %v", err)
	}
	if s != canary {
		t.Fatalf("arena string %q", s)
	}
	m := mappingOf(t, s)
	if !m.Has("lo") || !m.Has("dd") || m.Locked != m.Size || m.Size != ChunkSize>>10 {
		t.Errorf("arena mapping %#x-%#x: flags %v, locked %d kB of %d kB; want lo and dd, all %d kB locked",
			m.Start, m.End, m.Flags, m.Locked, m.Size, ChunkSize>>10)
	}
	if got := a.Mappings(); len(got) != 1 || got[0][0] != m.Start || got[0][1] != ChunkSize {
		t.Errorf("Mappings() = %#x, want the one at %#x", got, m.Start)
	}
	heap := strings.Clone(canary)
	if h := mappingOf(t, heap); h.Has("lo") || h.Has("dd") {
		t.Errorf("control: a heap string's mapping has flags %v", h.Flags)
	}
}

// TestArenaWipeAndFree: Free zeroes a slot and hands it to the next value of its size;
// Wipe zeroes every value; a value over ChunkSize gets a mapping of its own.
func TestArenaWipeAndFree(t *testing.T) {
	a := New()
	s1, slot1, _ := a.String(canary)
	s2, _, _ := a.String(canary + "-two")
	big, _, err := a.String(strings.Repeat("x", ChunkSize+1))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(a.Mappings()); n != 2 {
		t.Fatalf("%d mappings, want 2 (a chunk and the big value's)", n)
	}
	a.Free(slot1)
	if s1 != strings.Repeat("\x00", len(canary)) {
		t.Errorf("freed value reads %q, want zeros", s1)
	}
	s3, slot3, _ := a.String("another-value-of-that-size")
	if &slot3[0] != &slot1[0] {
		t.Errorf("a freed slot of the same size class was not reused")
	}
	a.Wipe()
	for _, s := range []string{s2, s3, big} {
		if strings.Trim(s, "\x00") != "" {
			t.Errorf("after Wipe a value reads %q, want zeros", s[:min(len(s), 40)])
		}
	}
	for _, c := range a.chunks {
		if strings.Trim(string(c), "\x00") != "" {
			t.Errorf("a mapping of %d bytes holds non-zero bytes after Wipe", len(c))
		}
	}
}

// TestArenaLockRefused: on a thread without CAP_IPC_LOCK and with RLIMIT_MEMLOCK 0,
// mlock(2) fails (EPERM); the arena still works, reports the failure, and its mapping
// is excluded from core dumps but not locked.
func TestArenaLockRefused(t *testing.T) {
	var saved unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &saved); err != nil {
		t.Fatal(err)
	}
	zero := unix.Rlimit{Cur: 0, Max: saved.Max}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &zero); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_MEMLOCK, &saved)
	type res struct {
		s   string
		a   *Arena
		err error
	}
	done := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread without the capability ends with it
		if err := dropIPCLock(); err != nil {
			done <- res{err: err}
			return
		}
		a := New()
		s, _, err := a.String(canary)
		done <- res{s, a, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.a.LockErr(); !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), "RLIMIT_MEMLOCK 0 bytes") {
		t.Errorf("LockErr() = %v, want EPERM naming the limit", err)
	}
	if m := mappingOf(t, r.s); m.Has("lo") || !m.Has("dd") || m.Locked != 0 {
		t.Errorf("unlocked arena mapping: flags %v, locked %d kB; want dd without lo", m.Flags, m.Locked)
	}
	if r.s != canary {
		t.Errorf("value %q", r.s)
	}
}

// dropIPCLock removes CAP_IPC_LOCK from the calling thread's effective and permitted
// sets (capabilities are per thread; capset(2)).
func dropIPCLock() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	bit := uint32(1) << unix.CAP_IPC_LOCK
	data[0].Effective &^= bit
	data[0].Permitted &^= bit
	return unix.Capset(&hdr, &data[0])
}
