package helper

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/hostexec"
)

// SpawnerSubcommand is the hidden subcommand of broodd-helper that starts VM runners.
//
// Why a separate process: the helper confines itself with Landlock, and Landlock domains
// are inherited by every child, so a runner started by the confined helper could never
// open the user's share (the snapshot lives in the user's home, which the helper's rules
// rightly exclude). The helper therefore starts the spawner once, before it confines
// itself; the spawner does nothing but start runners as non-root users with the
// descriptors the helper sends, on a SOCK_SEQPACKET socketpair (no path, no listener).
const SpawnerSubcommand = "vm-spawn"

func init() { subcommands[SpawnerSubcommand] = spawnerMain }

// spawnerFD is the spawner's end of the socketpair.
const spawnerFD = 3

// spawnFDs is the number of descriptors a spawn request carries: the runner's stderr
// (a pipe the helper reads) followed by the runner's descriptors 3..8 (runnerFD*).
const spawnFDs = 1 + runnerFDCount

// spawnMsgMax bounds a spawn request or reply in bytes.
const spawnMsgMax = 4096

// spawnRequest asks the spawner to start `<exe> vm-run` as UID/GID with Groups (Op
// "spawn"), or to SIGKILL its runner Pid (Op "kill": the confined helper cannot signal
// processes outside its Landlock domain, and only the runner's parent knows for sure that
// a pid is still its runner).
type spawnRequest struct {
	Op     string   `json:"op"`
	UID    uint32   `json:"uid,omitempty"`
	GID    uint32   `json:"gid,omitempty"`
	Groups []uint32 `json:"groups,omitempty"`
	Pid    int      `json:"pid,omitempty"`
}

// Spawner operations.
const (
	spawnOpSpawn = "spawn"
	spawnOpKill  = "kill"
)

// spawnReply answers a spawnRequest: the runner's pid (also its process group), or Error.
// A successful reply carries the runner's pidfd (pidfd_open by its parent, before the
// runner can have been reaped, so it names the runner even after its pid is reused).
type spawnReply struct {
	Pid   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
}

// checkSpawn validates a request: never root (a zero uid or gid is an error, not a
// default), and at most the one extra group the helper may grant (kvm).
func checkSpawn(r spawnRequest, kvmGID int) error {
	if r.UID == 0 || r.GID == 0 {
		return fmt.Errorf("spawn runner as uid %d gid %d: root is refused: %w", r.UID, r.GID, ErrRunner)
	}
	for _, g := range r.Groups {
		if kvmGID < 0 || g != uint32(kvmGID) || len(r.Groups) > 1 {
			return fmt.Errorf("spawn runner with groups %v: only the kvm group may be added: %w", r.Groups, ErrRunner)
		}
	}
	return nil
}

// Spawner is the helper's client of the spawner process.
type Spawner struct {
	mu  sync.Mutex
	fd  int // SOCK_SEQPACKET, close-on-exec
	cmd *hostexec.Cmd
}

// StartSpawner starts `exe vm-spawn` with a scrubbed environment; it dies with the
// helper (Pdeathsig) and exits when the helper closes its socket.
func StartSpawner(exe string) (*Spawner, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socketpair", err)
	}
	child := os.NewFile(uintptr(fds[1]), "spawner")
	defer child.Close()
	cmd := hostexec.Self(exe, SpawnerSubcommand)
	cmd.ExtraFiles = []*os.File{child}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("start runner spawner %s: %w", exe, err)
	}
	return &Spawner{fd: fds[0], cmd: cmd}, nil
}

// Spawn starts a runner; files are its stderr and descriptors 3..8. The caller keeps
// (and closes) files. It returns the runner's pid and pidfd.
func (s *Spawner) Spawn(req spawnRequest, files []*os.File) (int, *os.File, error) {
	req.Op = spawnOpSpawn
	if len(files) != spawnFDs {
		return 0, nil, fmt.Errorf("spawn runner: %d descriptors, want %d: %w", len(files), spawnFDs, ErrRunner)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return 0, nil, err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := unix.Sendmsg(s.fd, b, unix.UnixRights(fds...), nil, 0); err != nil {
		return 0, nil, fmt.Errorf("spawn runner: %w: %w", ErrRunner, os.NewSyscallError("sendmsg", err))
	}
	buf := make([]byte, spawnMsgMax)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(s.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || n == 0 {
		return 0, nil, fmt.Errorf("spawn runner: spawner gone: %w (%v)", ErrRunner, err)
	}
	got, _ := api.ParseRights(oob[:oobn], "spawn")
	var rep spawnReply
	if err := json.Unmarshal(buf[:n], &rep); err != nil {
		closeFiles(got)
		return 0, nil, fmt.Errorf("spawn runner: bad reply: %w: %w", ErrRunner, err)
	}
	if rep.Error != "" || len(got) != 1 {
		closeFiles(got)
		return 0, nil, fmt.Errorf("spawn runner: %w: %s (%d descriptors)", ErrRunner, rep.Error, len(got))
	}
	return rep.Pid, got[0], nil
}

// Kill asks the spawner to SIGKILL its runner pid (QEMU follows through Pdeathsig). A
// runner that is already gone is not an error.
func (s *Spawner) Kill(pid int) error {
	b, _ := json.Marshal(spawnRequest{Op: spawnOpKill, Pid: pid})
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := unix.Sendmsg(s.fd, b, nil, nil, 0); err != nil {
		return fmt.Errorf("kill runner %d: %w: %w", pid, ErrRunner, os.NewSyscallError("sendmsg", err))
	}
	buf := make([]byte, spawnMsgMax)
	n, _, _, _, err := unix.Recvmsg(s.fd, buf, nil, 0)
	if err != nil || n == 0 {
		return fmt.Errorf("kill runner %d: spawner gone: %w (%v)", pid, ErrRunner, err)
	}
	var rep spawnReply
	if err := json.Unmarshal(buf[:n], &rep); err != nil || rep.Error != "" {
		return fmt.Errorf("kill runner %d: %w: %s %v", pid, ErrRunner, rep.Error, err)
	}
	return nil
}

// Close stops the spawner (it exits when its socket closes) and reaps it.
func (s *Spawner) Close() {
	unix.Close(s.fd)
	s.cmd.Wait()
}

// spawnerMain is `broodd-helper vm-spawn`.
func spawnerMain(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("process", "vm-spawn")
	if len(args) != 0 {
		log.Error("vm-spawn takes no arguments")
		return 2
	}
	exe, err := os.Executable()
	if err != nil {
		log.Error("find own executable", "err", err)
		return 1
	}
	unix.CloseOnExec(spawnerFD)
	kvm := lookupKVMGID()
	live := &liveRunners{byPid: map[int]*hostexec.Cmd{}}
	buf := make([]byte, spawnMsgMax)
	oob := make([]byte, unix.CmsgSpace(4*spawnFDs))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(spawnerFD, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return 0 // the helper is gone
		}
		files, ferr := api.ParseRights(oob[:oobn], "spawn")
		var rep spawnReply
		pidfd := -1
		switch {
		case flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0:
			rep.Error = "truncated spawn request"
		case ferr != nil:
			rep.Error = ferr.Error()
		default:
			var req spawnRequest
			if err := json.Unmarshal(buf[:n], &req); err != nil {
				rep.Error = "decode spawn request: " + err.Error()
			} else if req.Op == spawnOpKill {
				if len(files) != 0 {
					rep.Error = "kill request with descriptors"
				} else {
					live.kill(req.Pid)
				}
			} else if req.Op != spawnOpSpawn {
				rep.Error = fmt.Sprintf("unknown spawner op %q", req.Op)
			} else if len(files) != spawnFDs {
				rep.Error = fmt.Sprintf("%d descriptors, want %d", len(files), spawnFDs)
			} else if err := checkSpawn(req, kvm); err != nil {
				rep.Error = err.Error()
			} else if rep.Pid, pidfd, err = live.start(exe, req, files); err != nil {
				rep.Error = err.Error()
			} else {
				log.Info("runner started", "pid", rep.Pid, "uid", req.UID)
			}
		}
		closeFiles(files)
		b, _ := json.Marshal(rep)
		var rights []byte
		if pidfd >= 0 {
			rights = unix.UnixRights(pidfd)
		}
		err = unix.Sendmsg(spawnerFD, b, rights, nil, 0)
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		if err != nil {
			return 0
		}
	}
}

// liveRunners are the spawner's children not yet reaped.
type liveRunners struct {
	mu    sync.Mutex
	byPid map[int]*hostexec.Cmd
}

// kill SIGKILLs runner pid if it is still the spawner's unreaped child.
func (l *liveRunners) kill(pid int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cmd, ok := l.byPid[pid]; ok {
		_ = cmd.Process.Kill()
	}
}

// start starts `exe vm-run` as req's user with files[0] as stdout and stderr and
// files[1:] as descriptors 3..8, in its own process group, killed when the spawner dies.
// It returns the runner's pid and a pidfd opened before a goroutine reaps it.
func (l *liveRunners) start(exe string, req spawnRequest, files []*os.File) (int, int, error) {
	groups := req.Groups
	if groups == nil {
		groups = []uint32{}
	}
	cmd := hostexec.Self(exe, RunnerSubcommand)
	cmd.Stdout, cmd.Stderr = files[0], files[0]
	cmd.ExtraFiles = files[1:]
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: req.UID, Gid: req.GID, Groups: groups},
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return 0, -1, fmt.Errorf("start runner: %w", err)
	}
	pid := cmd.Process.Pid
	pidfd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return 0, -1, fmt.Errorf("start runner: %w", os.NewSyscallError("pidfd_open", err))
	}
	l.mu.Lock()
	l.byPid[pid] = cmd
	l.mu.Unlock()
	go func() {
		cmd.Wait()
		l.mu.Lock()
		delete(l.byPid, pid)
		l.mu.Unlock()
	}()
	return pid, pidfd, nil
}
