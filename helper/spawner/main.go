package spawner

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

// Main is `broodd-helper vm-spawn` (the contract in the package doc, steps 2 to 8);
// recipes are the image names a build request may name (the recipe table compiled into
// the binary). It returns the exit code: 0 when the helper is gone, 1 when the spawner
// cannot find its own executable, 2 on arguments.
func Main(args []string, recipes []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("process", Subcommand)
	// 2. No arguments; fd 3 close-on-exec; the kvm gid.
	if len(args) != 0 {
		log.Error("vm-spawn takes no arguments")
		return 2
	}
	exe, err := os.Executable()
	if err != nil {
		log.Error("find own executable", "err", err)
		return 1
	}
	unix.CloseOnExec(SocketFD)
	s := &server{log: log, exe: exe, kvmGID: KVMGID(), recipes: recipes, live: map[int]*hostexec.Cmd{}}
	// 3. to 8. One request at a time until the helper hangs up.
	buf := make([]byte, MsgMax)
	oob := make([]byte, unix.CmsgSpace(4*RunnerFiles))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(SocketFD, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return 0 // the helper is gone
		}
		files, ferr := api.ParseRights(oob[:oobn], "spawn")
		rep, pidfd := s.handle(buf[:n], flags, files, ferr)
		closeFiles(files)
		if err := s.answer(rep, pidfd); err != nil {
			return 0
		}
	}
}

// server is the spawner's state: its executable, the kvm gid and its unreaped runners.
type server struct {
	log     *slog.Logger
	exe     string
	kvmGID  int
	recipes []string // the names a build request may name

	mu   sync.Mutex
	live map[int]*hostexec.Cmd // the spawner's children not yet reaped, by pid
}

// handle answers one request (contract steps 3 to 7); msg is its JSON, flags recvmsg's
// flags, files the descriptors it carried (the caller closes them) or ferr. It returns
// the reply and the runner's pidfd (-1 for none).
func (s *server) handle(msg []byte, flags int, files []*os.File, ferr error) (Reply, int) {
	if flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0 {
		return Reply{Error: "truncated spawn request"}, -1
	}
	if ferr != nil {
		return Reply{Error: ferr.Error()}, -1
	}
	var req Request
	if err := json.Unmarshal(msg, &req); err != nil {
		return Reply{Error: "decode spawn request: " + err.Error()}, -1
	}
	switch {
	case req.Op == OpKill && len(files) != 0:
		return Reply{Error: "kill request with descriptors"}, -1
	case req.Op == OpKill:
		s.kill(req.Pid)
		return Reply{}, -1
	case req.Op == OpBuild:
		return s.build(req, files)
	case req.Op != OpSpawn:
		return Reply{Error: fmt.Sprintf("unknown spawner op %q", req.Op)}, -1
	case len(files) != RunnerFiles:
		return Reply{Error: fmt.Sprintf("%d descriptors, want %d", len(files), RunnerFiles)}, -1
	}
	if err := Check(req, s.kvmGID); err != nil {
		return Reply{Error: err.Error()}, -1
	}
	pid, pidfd, err := s.start(req, files)
	if err != nil {
		return Reply{Error: err.Error()}, -1
	}
	s.log.Info("runner started", "pid", pid, "uid", req.UID)
	return Reply{Pid: pid}, pidfd
}

// build answers a build request (contract steps 5b and 6b): it checks the request
// (CheckBuild, exactly BuildFiles descriptors) and execs `exe image-build` (BuildArgs) as
// root with the progress pipe as its descriptor 3.
func (s *server) build(req Request, files []*os.File) (Reply, int) {
	if len(files) != BuildFiles {
		return Reply{Error: fmt.Sprintf("build request: %d descriptors, want %d", len(files), BuildFiles)}, -1
	}
	if err := CheckBuild(req, s.recipes); err != nil {
		return Reply{Error: err.Error()}, -1
	}
	cmd := hostexec.Self(s.exe, append([]string{BuildSubcommand}, BuildArgs(req)...)...)
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pid, pidfd, err := s.track(cmd)
	if err != nil {
		return Reply{Error: fmt.Sprintf("start image build %s%s: %v", req.Name, req.Ref, err)}, -1
	}
	s.log.Info("image build started", "pid", pid, "image", req.Name, "ref", req.Ref)
	return Reply{Pid: pid}, pidfd
}

// answer sends rep, with pidfd when it is >= 0, and closes pidfd.
func (s *server) answer(rep Reply, pidfd int) error {
	b, _ := json.Marshal(rep)
	var rights []byte
	if pidfd >= 0 {
		rights = unix.UnixRights(pidfd)
		defer unix.Close(pidfd)
	}
	return unix.Sendmsg(SocketFD, b, rights, nil, 0)
}

// kill SIGKILLs runner pid if it is still the spawner's unreaped child (contract step 4).
func (s *server) kill(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cmd, ok := s.live[pid]; ok {
		_ = cmd.Process.Kill()
	}
}

// start execs `exe vm-run` as req's user (contract steps 6 and 7) with files[0] as stdout
// and stderr and files[1:] as descriptors 3..8, in its own process group, killed when the
// spawner dies. It returns the runner's pid and a pidfd opened before a goroutine reaps it.
func (s *server) start(req Request, files []*os.File) (int, int, error) {
	groups := req.Groups
	if groups == nil {
		groups = []uint32{}
	}
	cmd := hostexec.Self(s.exe, RunnerSubcommand)
	cmd.Stdout, cmd.Stderr = files[0], files[0]
	cmd.ExtraFiles = files[1:]
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: req.UID, Gid: req.GID, Groups: groups},
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	pid, pidfd, err := s.track(cmd)
	if err != nil {
		return 0, -1, fmt.Errorf("start runner: %w", err)
	}
	return pid, pidfd, nil
}

// track starts cmd, opens its pidfd before a goroutine can reap it, and keeps it in
// s.live (so that a kill request reaches it) until it exits.
func (s *server) track(cmd *hostexec.Cmd) (int, int, error) {
	if err := cmd.Start(); err != nil {
		return 0, -1, err
	}
	pid := cmd.Process.Pid
	pidfd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return 0, -1, os.NewSyscallError("pidfd_open", err)
	}
	s.mu.Lock()
	s.live[pid] = cmd
	s.mu.Unlock()
	go func() {
		cmd.Wait()
		s.mu.Lock()
		delete(s.live, pid)
		s.mu.Unlock()
	}()
	return pid, pidfd, nil
}
