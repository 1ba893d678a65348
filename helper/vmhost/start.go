package vmhost

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress"
	"brood.dev/brood/helper/runner"
	"brood.dev/brood/helper/spawner"
)

// Launch is what Start needs besides the plan: the descriptors the runner gets, and where
// and through whom it is started. The caller keeps (and closes) every file.
type Launch struct {
	Log     *slog.Logger
	RunDirs string           // <runtime dir>/RunParent, created and checked by the caller
	Spawner *spawner.Client  // starts the runner outside the daemon's Landlock domain
	Share   *os.File         // the session's share directory (runner fd 4)
	Kernel  *os.File         // vmlinux (runner fd 6)
	Initrd  *os.File         // the base initramfs; the session archive goes on a copy (fd 7)
	Image   *os.File         // the rootfs image (runner fd 8)
	Tap     *os.File         // the tap's queue when the plan has a network (sent with the config)
	Egress  *egress.Manager  // non-nil: the session's network is removed when the VM ends
	OnExit  func(api.VMExit) // runs once the VM is gone (before waiters are released)
	// Place, when set, moves the runner (pid) into its cgroup before the runner gets its
	// config, so the VMM it starts then is there too; an error fails the start.
	Place func(pid int) error
}

// Start applies p: (1) the run directory and the session initramfs, handed to the owner;
// (2) the runner, spawned as the owner with descriptors 3..8; (3) the config handshake,
// until the runner reports the VMM started. On error nothing it made is left (the run
// directory is removed, the runner killed and reaped).
func Start(p Plan, l Launch) (*Handle, error) {
	id := p.Runner.Session
	// 1. Run directory and session initramfs.
	runDir, dirf, err := makeRunDir(l.RunDirs, id)
	if err != nil {
		return nil, err
	}
	defer dirf.Close()
	initrd, err := writeSessionInitrd(l.Initrd, dirf, runDir, p.Guest, p.Spawn.UID, p.Spawn.GID)
	if err == nil {
		defer initrd.Close()
		// The run directory is the owner's from here on: the VMM creates its SSH socket in it.
		if cerr := unix.Fchown(int(dirf.Fd()), int(p.Spawn.UID), int(p.Spawn.GID)); cerr != nil {
			err = &os.PathError{Op: "chown", Path: runDir, Err: cerr}
		}
	}
	if err != nil {
		if rerr := removeRunDir(runDir); rerr != nil {
			l.Log.Warn("run dir left in place", "err", rerr)
		}
		return nil, err
	}
	// 2. The runner.
	v, err := spawn(p, l, runDir, []*os.File{l.Share, dirf, l.Kernel, initrd, l.Image})
	if err != nil {
		if rerr := removeRunDir(runDir); rerr != nil {
			l.Log.Warn("run dir left in place", "err", rerr)
		}
		return nil, err
	}
	// 3. The handshake; from here on readEvents owns the run directory and removes it.
	if err := v.handshake(p, l.Tap, l.Place); err != nil {
		return nil, err
	}
	return v, nil
}

// spawn starts the runner with p.Spawn's credentials, a log pipe as its stderr, its end
// of a new control socketpair as fd 3 and files as fds 4..8, and returns its handle
// (readEvents not started yet).
func spawn(p Plan, l Launch, runDir string, files []*os.File) (*Handle, error) {
	id := p.Runner.Session
	if l.Spawner == nil {
		return nil, fmt.Errorf("start VM: no runner spawner: %w", api.ErrUnavailable)
	}
	hs, rs, err := socketpair()
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	logR, logW, err := os.Pipe()
	if err != nil {
		hs.Close()
		return nil, fmt.Errorf("runner log pipe: %w", err)
	}
	defer logW.Close()
	pid, pidfd, err := l.Spawner.Spawn(p.Spawn, append([]*os.File{logW, rs}, files...))
	if err != nil {
		hs.Close()
		logR.Close()
		return nil, fmt.Errorf("start VM of session %s: %w: %w", id, runner.ErrRunner, err)
	}
	v := &Handle{
		id: id, log: l.Log.With("session", id), conn: api.NewConn(hs), runDir: runDir, spawner: l.Spawner,
		attached: make(chan attachResult, 1), started: make(chan runner.Event, 1), done: make(chan struct{}),
		onExit: l.OnExit, egress: l.Egress, pid: pid, runnerPidfd: pidfd,
	}
	go v.logLines(logR)
	return v, nil
}

// handshake places the runner (place, when set), sends it its config (with the tap when
// the plan has a network) and waits for its first event, at most runnerStartTimeout. On
// error the runner is killed and reaped.
func (v *Handle) handshake(p Plan, tap *os.File, place func(pid int) error) error {
	var files []*os.File
	if p.Runner.Tap && tap != nil {
		files = []*os.File{tap}
	}
	cfg := p.Runner
	cfg.Tap = len(files) == 1
	msg, _ := json.Marshal(cfg)
	go v.readEvents(p.Timeout) // from here on it owns the control socket and the pidfds
	if place != nil {
		if err := place(v.pid); err != nil {
			v.kill()
			<-v.done
			return fmt.Errorf("start VM of session %s: %w", v.id, err)
		}
	}
	if err := v.conn.WriteFrame(msg, files...); err != nil {
		v.kill()
		<-v.done
		return fmt.Errorf("send runner config: %w: %w", runner.ErrRunner, err)
	}
	select {
	case ev := <-v.started:
		if ev.Event != runner.EvStarted {
			<-v.done
			return fmt.Errorf("start VM of session %s: %w: %s", v.id, runner.ErrRunner, ev.Detail)
		}
		v.vmmPid = ev.Pid
		return nil
	case <-time.After(runnerStartTimeout):
		v.kill()
		<-v.done
		return fmt.Errorf("start VM of session %s: runner silent for %v: %w", v.id, runnerStartTimeout, runner.ErrRunner)
	}
}

// Pids returns the runner's and the VMM's process ids (logs, tests).
func (v *Handle) Pids() (runnerPid, vmmPid int) { return v.pid, v.vmmPid }
