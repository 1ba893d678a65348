// Package lockedmem holds secrets in memory the kernel neither writes to swap nor to a
// core dump: anonymous private mappings (mmap(2)) marked MADV_DONTDUMP (madvise(2)) and
// locked with mlock(2), handed out in slots and zeroed on Free and Wipe. Strings made
// by Arena.String point into that memory, so code that reads them as ordinary Go
// strings keeps the bytes there (a copy it makes, such as []byte(s), is ordinary heap).
//
// Privilege: none. mlock(2) of a process without CAP_IPC_LOCK is bounded by its
// RLIMIT_MEMLOCK (getrlimit(2)); when a lock fails the mapping keeps MADV_DONTDUMP, is
// used unlocked (it may be swapped out), and Arena.LockErr reports the first failure.
package lockedmem

import (
	"fmt"
	"math/bits"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ChunkSize is the size of one mapping (bytes) that slots up to its size are cut from; a
// larger slot gets a mapping of its own.
const ChunkSize = 64 << 10

// minSlot is the smallest slot (bytes); every slot is a power of two at least this long,
// so freed slots are reused by values of the same size class.
const minSlot = 64

// Arena is a set of locked, non-dumpable mappings and the slots cut from them. It is
// safe for concurrent use. The mappings are never unmapped: a string made from a slot
// stays readable (zeroed after Free or Wipe) for the life of the process.
type Arena struct {
	mu      sync.Mutex
	chunks  [][]byte         // every mapping, for Wipe and Mappings
	tail    []byte           // the unused end of the last chunk
	free    map[int][][]byte // freed slots by size
	lockErr error            // the first mlock failure
}

// New returns an empty arena; it maps nothing until the first Alloc.
func New() *Arena { return &Arena{free: map[int][][]byte{}} }

// Alloc returns a zeroed slot of at least n bytes (n > 0), sliced to length n. The error
// is mmap(2)'s or madvise(2)'s; a failed mlock(2) is no error (LockErr).
func (a *Arena) Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("lockedmem: allocate %d bytes", n)
	}
	size := slotSize(n)
	a.mu.Lock()
	defer a.mu.Unlock()
	if l := a.free[size]; len(l) > 0 {
		s := l[len(l)-1]
		a.free[size] = l[:len(l)-1]
		return s[:n], nil
	}
	if size > ChunkSize {
		m, err := a.mapChunk(size)
		if err != nil {
			return nil, err
		}
		return m[:n:size], nil
	}
	if len(a.tail) < size {
		m, err := a.mapChunk(ChunkSize)
		if err != nil {
			return nil, err
		}
		a.tail = m
	}
	s := a.tail[:n:size]
	a.tail = a.tail[size:]
	return s, nil
}

// String copies s into a new slot and returns a string backed by that slot, and the slot
// (for Free). An empty s is returned as it is, with a nil slot.
func (a *Arena) String(s string) (string, []byte, error) {
	if s == "" {
		return "", nil, nil
	}
	b, err := a.Alloc(len(s))
	if err != nil {
		return "", nil, err
	}
	copy(b, s)
	return View(b), b, nil
}

// View returns a string that shares b's bytes (no copy): for a slot, or a prefix of one,
// that a caller filled itself. The string changes with b.
func View(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// Free zeroes slot (as Alloc or String returned it; nil is ignored) and keeps it for
// reuse. A string made from it then reads as zero bytes, or as a later value.
func (a *Arena) Free(slot []byte) {
	if cap(slot) == 0 {
		return
	}
	slot = slot[:cap(slot)]
	clear(slot)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.free[len(slot)] = append(a.free[len(slot)], slot)
}

// Wipe zeroes every mapping of the arena. The slots stay valid (all zero); Wipe is what
// a session's end does with its secrets.
func (a *Arena) Wipe() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.chunks {
		clear(c)
	}
}

// LockErr returns the first mlock(2) failure (wrapping its errno, ENOMEM or EPERM under
// RLIMIT_MEMLOCK), or nil when every mapping is locked.
func (a *Arena) LockErr() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lockErr
}

// Mappings returns the start address and length (bytes) of each mapping, in the order
// they were made: what /proc/PID/smaps lists for the arena.
func (a *Arena) Mappings() [][2]uintptr {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([][2]uintptr, len(a.chunks))
	for i, c := range a.chunks {
		out[i] = [2]uintptr{uintptr(unsafe.Pointer(&c[0])), uintptr(len(c))}
	}
	return out
}

// mapChunk maps size bytes (a multiple of the page size: every size is a power of two
// of at least ChunkSize), marks them MADV_DONTDUMP, then locks them. Called with a.mu.
func (a *Arena) mapChunk(size int) ([]byte, error) {
	m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("lockedmem: mmap %d bytes: %w", size, err)
	}
	if err := unix.Madvise(m, unix.MADV_DONTDUMP); err != nil {
		unix.Munmap(m)
		return nil, fmt.Errorf("lockedmem: madvise(MADV_DONTDUMP) %d bytes: %w", size, err)
	}
	if err := unix.Mlock(m); err != nil && a.lockErr == nil {
		a.lockErr = fmt.Errorf("lockedmem: mlock %d bytes (RLIMIT_MEMLOCK %s): %w", size, memlockLimit(), err)
	}
	a.chunks = append(a.chunks, m)
	return m, nil
}

// slotSize is the smallest power of two that is at least n and minSlot (one above
// ChunkSize is a multiple of it, so a dedicated mapping is whole pages).
func slotSize(n int) int { return max(minSlot, 1<<bits.Len(uint(n-1))) }

// memlockLimit formats the process's RLIMIT_MEMLOCK soft limit for an error.
func memlockLimit() string {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		return "unknown"
	}
	if lim.Cur == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return fmt.Sprintf("%d bytes", lim.Cur)
}
