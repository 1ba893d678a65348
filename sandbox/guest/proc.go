package guest

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// reaper is PID 1's child bookkeeping: it reaps every child (orphans re-parented to
// PID 1 included) on SIGCHLD and hands the exit status of the processes brood-guest
// started to whoever waits for them. exec.Cmd.Wait is never used: it would race the
// reaper's wait4(-1).
type reaper struct {
	mu      sync.Mutex
	waiters map[int]chan unix.WaitStatus
	early   map[int]unix.WaitStatus // exits reaped before start registered the pid
}

func newReaper() *reaper {
	r := &reaper{waiters: map[int]chan unix.WaitStatus{}, early: map[int]unix.WaitStatus{}}
	sig := make(chan os.Signal, 32)
	signal.Notify(sig, unix.SIGCHLD)
	go func() {
		for range sig {
			r.reapAll()
		}
	}()
	return r
}

func (r *reaper) reapAll() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.mu.Lock()
		if ch, ok := r.waiters[pid]; ok {
			ch <- ws
			delete(r.waiters, pid)
		} else {
			r.early[pid] = ws
		}
		r.mu.Unlock()
	}
}

// start starts cmd and returns a channel that receives its exit status once. The
// caller must not call cmd.Wait.
func (r *reaper) start(cmd *exec.Cmd) (<-chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	ch := make(chan unix.WaitStatus, 1)
	pid := cmd.Process.Pid
	if ws, ok := r.early[pid]; ok {
		ch <- ws
		delete(r.early, pid)
	} else {
		r.waiters[pid] = ch
	}
	return ch, nil
}
