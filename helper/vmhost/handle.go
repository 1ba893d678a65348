package vmhost

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress"
	"brood.dev/brood/helper/runner"
	"brood.dev/brood/helper/spawner"
)

// Timing of the runner protocol.
const (
	// runnerStartTimeout bounds the runner's start: exec, confinement, QEMU exec.
	runnerStartTimeout = 30 * time.Second
	// runnerStopGrace is how long stop waits for the runner after asking it to stop
	// before it kills the runner and QEMU.
	runnerStopGrace = 10 * time.Second
	// runnerTimeoutSlack is how long past the VM's timeout the helper waits for the
	// runner's own timeout handling before killing it.
	runnerTimeoutSlack = 15 * time.Second
)

// Handle is the daemon's side of one running VM: the runner process and its control
// socket. Start returns it; Attach, Stop and Wait are safe for concurrent use.
type Handle struct {
	id      string
	log     *slog.Logger
	pid     int             // the runner's pid
	spawner *spawner.Client // the runner's parent, which kills it on request
	conn    *api.Conn
	runDir  string

	attachMu sync.Mutex        // one attach at a time (answers are not tagged)
	writeMu  sync.Mutex        // one request frame at a time
	attached chan attachResult // answers to runner.OpAttach
	started  chan runner.Event // the first event: started or error
	done     chan struct{}     // closed when the runner is reaped and exit is set
	exit     api.VMExit        // how the VM ended, valid after done
	vmmPid   int               // QEMU's pid (logs, tests)
	onExit   func(api.VMExit)  // updates the session table
	egress   *egress.Manager   // non-nil: the session's network is removed when the VM ends

	logMu     sync.Mutex
	egressLog *os.File // the session's unlinked decision log once the VM ended; nil: none or released
	// refreshed are the logins the session's egress process saw refreshed, with their
	// new real values (write-back only), until RefreshedLogins hands them out.
	refreshed []api.RefreshedLogin

	pidMu       sync.Mutex
	runnerPidfd *os.File // closed (nil) once the runner is gone
	vmmPidfd    *os.File // QEMU's pidfd from the runner; nil until started, or once gone
}

type attachResult struct {
	f   *os.File
	err error
}

// readEvents reads runner events until the control socket closes, then reaps the runner
// and records how the VM ended (finish). timeout is the VM's lifetime: the runner
// enforces it; the daemon kills a runner that overstays it by runnerTimeoutSlack.
func (v *Handle) readEvents(timeout time.Duration) {
	backstop := time.AfterFunc(timeout+runnerTimeoutSlack, func() {
		v.log.Warn("runner overstayed the VM timeout, killing it")
		v.kill()
	})
	defer backstop.Stop()
	r := eventState{exit: api.VMExit{Outcome: api.OutcomeFailed, Detail: "runner exited without reporting"}}
	for {
		body, files, err := v.conn.ReadFrame()
		if err != nil {
			closeFiles(files)
			break
		}
		var ev runner.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			closeFiles(files)
			v.log.Warn("bad runner event", "err", err)
			continue
		}
		v.onEvent(&r, ev, files)
	}
	v.finish(r)
}

// eventState is what readEvents learned from the runner so far.
type eventState struct {
	startedSent bool       // the first started or error event went to v.started
	startedOK   bool       // ... and it was started
	exit        api.VMExit // how the VM ended, as far as the runner said
}

// onEvent handles one runner event with the descriptors it carried (it owns files).
func (v *Handle) onEvent(r *eventState, ev runner.Event, files []*os.File) {
	switch ev.Event {
	case runner.EvStarted, runner.EvError:
		if ev.Event == runner.EvStarted && len(files) == 1 && v.vmmPidfd == nil {
			v.pidMu.Lock()
			v.vmmPidfd = files[0]
			v.pidMu.Unlock()
			files = nil
		}
		if !r.startedSent {
			r.startedSent, r.startedOK = true, ev.Event == runner.EvStarted
			v.started <- ev
		}
		closeFiles(files)
		if ev.Event == runner.EvError {
			r.exit.Detail = ev.Detail
		}
	case runner.EvAttached:
		v.onAttached(ev, files)
	case runner.EvExit:
		closeFiles(files)
		r.exit = api.VMExit{Outcome: ev.Outcome, Detail: ev.Detail, ConsoleTail: ev.ConsoleTail}
	default:
		closeFiles(files)
	}
}

// onAttached passes an attach answer to the waiting Attach: the connected stream socket,
// or the runner's error; an answer nobody waits for is closed.
func (v *Handle) onAttached(ev runner.Event, files []*os.File) {
	r := attachResult{err: fmt.Errorf("attach session %s: %w: %s", v.id, runner.ErrRunner, ev.Detail)}
	if len(files) == 1 && ev.Detail == "" {
		r = attachResult{f: files[0]}
		if err := checkStreamSocket(files[0]); err != nil {
			files[0].Close()
			r = attachResult{err: fmt.Errorf("attach session %s: %w", v.id, err)}
		}
	} else {
		closeFiles(files)
	}
	select {
	case v.attached <- r:
	default:
		if r.f != nil {
			r.f.Close()
		}
	}
}

// finish runs once the control socket is closed (the runner is exiting; the VMM never
// holds it): it waits until the runner and the VMM are really gone (their pidfds turn
// readable), killing what lingers, removes the run directory and the session's network,
// records the exit and releases every waiter.
func (v *Handle) finish(r eventState) {
	v.conn.Close()
	v.reapPidfd(&v.runnerPidfd, "runner")
	v.reapPidfd(&v.vmmPidfd, "VMM")
	if !r.startedSent {
		v.started <- runner.Event{Event: runner.EvError, Detail: r.exit.Detail}
	}
	if err := removeRunDir(v.runDir); err != nil {
		v.log.Warn("run dir left in place", "err", err)
	}
	exit := r.exit
	if v.egress != nil {
		// The VM is gone: its network goes at once (proxy, chains, sets, conntrack, tap).
		end, err := v.egress.StopKeep(v.id)
		if err != nil {
			v.log.Warn("egress teardown", "err", err)
		}
		exit.Egress = end.Summary
		v.logMu.Lock()
		v.egressLog, v.refreshed = end.Log, end.Refreshed
		v.logMu.Unlock()
	}
	v.exit = exit
	v.log.Info("audit: VM exited", "outcome", exit.Outcome, "detail", exit.Detail)
	if v.onExit != nil && r.startedOK { // a failed start leaves the session "created"
		v.onExit(exit)
	}
	close(v.done)
	select { // an attach still waiting gets an answer
	case v.attached <- attachResult{err: fmt.Errorf("attach session %s: the VM has exited: %w", v.id, api.ErrState)}:
	default:
	}
}

// logLines copies the runner's stderr into the helper's log.
func (v *Handle) logLines(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		v.log.Info("runner", "line", sc.Text())
	}
}

// request sends one request to the runner.
func (v *Handle) request(op runner.Op) error {
	v.writeMu.Lock()
	defer v.writeMu.Unlock()
	b, _ := json.Marshal(runner.Request{Op: op})
	if err := v.conn.WriteFrame(b); err != nil {
		return fmt.Errorf("runner request %s: %w: %w", op, runner.ErrRunner, err)
	}
	return nil
}

// Attach asks the runner for a connected stream to the guest's SSH server.
func (v *Handle) Attach(ctx context.Context) (*os.File, error) {
	v.attachMu.Lock()
	defer v.attachMu.Unlock()
	select {
	case <-v.done:
		return nil, fmt.Errorf("attach session %s: the VM has exited: %w", v.id, api.ErrState)
	default:
	}
	if err := v.request(runner.OpAttach); err != nil {
		return nil, err
	}
	select {
	case r := <-v.attached:
		return r.f, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("attach session %s: %w", v.id, ctx.Err())
	case <-time.After(runner.AttachTimeout + 5*time.Second):
		return nil, fmt.Errorf("attach session %s: runner did not answer: %w", v.id, runner.ErrRunner)
	}
}

// Stop asks the runner to stop the VM and waits until it is reaped; a runner that does
// not finish within runnerStopGrace is killed. Stopping an exited VM does nothing.
func (v *Handle) Stop() {
	select {
	case <-v.done:
		return
	default:
	}
	if err := v.request(runner.OpStop); err != nil {
		v.kill()
	}
	select {
	case <-v.done:
	case <-time.After(runnerStopGrace):
		v.log.Warn("runner did not stop in time, killing it", "grace", runnerStopGrace)
		v.kill()
		<-v.done
	}
}

// kill has the spawner SIGKILL the runner (QEMU follows through its Pdeathsig). The
// helper cannot signal it itself: Landlock's signal scope confines it to its own domain.
func (v *Handle) kill() {
	if err := v.spawner.Kill(v.pid); err != nil {
		v.log.Error("kill runner", "pid", v.pid, "err", err)
	}
}

// reapGrace is how long a process may take to exit after its control socket closed (or
// after SIGKILL) before the helper kills it (or gives up waiting).
const reapGrace = 5 * time.Second

// reapPidfd waits until the process of *pf has exited (its pidfd polls readable),
// SIGKILLs it when it lingers past reapGrace, then closes the pidfd.
func (v *Handle) reapPidfd(pf **os.File, what string) {
	v.pidMu.Lock()
	f := *pf
	v.pidMu.Unlock()
	if f == nil {
		return
	}
	if !pidfdExited(f, reapGrace) {
		v.log.Warn("process still alive after its runner hung up, killing the runner", "process", what)
		v.kill()
		if !pidfdExited(f, reapGrace) {
			v.log.Error("process survives its runner's SIGKILL", "process", what)
		}
	}
	v.pidMu.Lock()
	*pf = nil
	v.pidMu.Unlock()
	f.Close()
}

// pidfdExited polls a pidfd for up to d and reports whether its process has exited.
func pidfdExited(f *os.File, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(time.Until(deadline)/time.Millisecond))
		if err == unix.EINTR {
			continue
		}
		if n > 0 {
			return true
		}
		if err != nil || time.Now().After(deadline) {
			return false
		}
	}
}

// Wait blocks until the VM is gone or ctx ends.
func (v *Handle) Wait(ctx context.Context) (api.VMExit, error) {
	select {
	case <-v.done:
		return v.exit, nil
	case <-ctx.Done():
		return api.VMExit{}, fmt.Errorf("wait for the VM of session %s: %w", v.id, ctx.Err())
	}
}

// EgressLog returns a new read-only descriptor of the session's whole egress decision
// log (JSON lines, at most egress.MaxDecisionLogBytes), an unlinked file: the VM must have
// ended (api.ErrState before), the session must have had a network and its log not be
// released (api.ErrNotFound). The descriptor shares its file offset with the handle's
// own (F_DUPFD_CLOEXEC, fcntl(2)): read it at explicit offsets (pread, io.SectionReader).
func (v *Handle) EgressLog() (*os.File, error) {
	select {
	case <-v.done:
	default:
		return nil, fmt.Errorf("egress log of session %s: the VM is running: %w", v.id, api.ErrState)
	}
	v.logMu.Lock()
	defer v.logMu.Unlock()
	if v.egressLog == nil {
		return nil, fmt.Errorf("egress log of session %s: none kept (no network, or released): %w", v.id, api.ErrNotFound)
	}
	fd, err := unix.FcntlInt(v.egressLog.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("egress log of session %s: duplicate descriptor: %w", v.id, err)
	}
	return os.NewFile(uintptr(fd), "egress-log-"+v.id), nil
}

// RefreshedLogins returns the logins the session's egress process saw refreshed, with
// their new real values (api.CallRefreshedLogins), and forgets them: a second call
// answers none. The VM must have ended (api.ErrState before). A session whose bindings
// did not ask for write-back, or that saw no refresh, answers an empty list.
func (v *Handle) RefreshedLogins() (api.RefreshedLogins, error) {
	select {
	case <-v.done:
	default:
		return api.RefreshedLogins{}, fmt.Errorf("refreshed logins of session %s: the VM is running: %w", v.id, api.ErrState)
	}
	v.logMu.Lock()
	defer v.logMu.Unlock()
	r := api.RefreshedLogins{Logins: v.refreshed}
	if r.Logins == nil {
		r.Logins = []api.RefreshedLogin{}
	}
	v.refreshed = nil
	return r, nil
}

// Release frees what the handle keeps after the VM ended (the egress decision log, the
// refreshed logins). The session table calls it when the session goes.
func (v *Handle) Release() {
	v.logMu.Lock()
	defer v.logMu.Unlock()
	v.refreshed = nil
	if v.egressLog != nil {
		v.egressLog.Close()
		v.egressLog = nil
	}
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
