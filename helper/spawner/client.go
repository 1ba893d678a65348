package spawner

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/hostexec"
)

// Client is the helper daemon's end of the spawner: it runs in the helper (root,
// Landlock-confined once the helper has confined itself) and is safe for concurrent use.
type Client struct {
	mu  sync.Mutex
	fd  int // SOCK_SEQPACKET, close-on-exec
	cmd *hostexec.Cmd
}

// Start starts `exe vm-spawn` (contract step 1) with a scrubbed environment; it dies with
// the helper (Pdeathsig) and exits when the helper closes its socket (Close).
func Start(exe string) (*Client, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socketpair", err)
	}
	child := os.NewFile(uintptr(fds[1]), "spawner")
	defer child.Close()
	cmd := hostexec.Self(exe, Subcommand)
	cmd.ExtraFiles = []*os.File{child}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("start runner spawner %s: %w", exe, err)
	}
	return &Client{fd: fds[0], cmd: cmd}, nil
}

// Spawn starts a runner as req's UID, GID and Groups; files are its stderr and
// descriptors 3..8 (RunnerFiles in all). The caller keeps (and closes) files. It returns
// the runner's pid and pidfd; errors wrap ErrSpawn.
func (c *Client) Spawn(req Request, files []*os.File) (int, *os.File, error) {
	req.Op = OpSpawn
	if len(files) != RunnerFiles {
		return 0, nil, fmt.Errorf("spawn runner: %d descriptors, want %d: %w", len(files), RunnerFiles, ErrSpawn)
	}
	pid, pidfd, err := c.start(req, files)
	if err != nil {
		return 0, nil, fmt.Errorf("spawn runner: %w", err)
	}
	return pid, pidfd, nil
}

// Build starts the build child for req (Op "build": a recipe Name, or a pull of Ref
// checked against Policy, into StateDir): `broodd-helper image-build`, root, its own
// process group, with progress (the write end of a pipe; the caller keeps and closes it)
// as its descriptor 3. It returns the child's pid and pidfd; errors wrap ErrSpawn.
func (c *Client) Build(req Request, progress *os.File) (int, *os.File, error) {
	req.Op = OpBuild
	pid, pidfd, err := c.start(req, []*os.File{progress})
	if err != nil {
		return 0, nil, fmt.Errorf("build image %s%s: %w", req.Name, req.Ref, err)
	}
	return pid, pidfd, nil
}

// start sends req with files and reads the reply that carries the child's pidfd.
func (c *Client) start(req Request, files []*os.File) (int, *os.File, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return 0, nil, err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := unix.Sendmsg(c.fd, b, unix.UnixRights(fds...), nil, 0); err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrSpawn, os.NewSyscallError("sendmsg", err))
	}
	buf := make([]byte, MsgMax)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(c.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || n == 0 {
		return 0, nil, fmt.Errorf("spawner gone: %w (%v)", ErrSpawn, err)
	}
	got, _ := api.ParseRights(oob[:oobn], "spawn")
	var rep Reply
	if err := json.Unmarshal(buf[:n], &rep); err != nil {
		closeFiles(got)
		return 0, nil, fmt.Errorf("bad reply: %w: %w", ErrSpawn, err)
	}
	if rep.Error != "" || len(got) != 1 {
		closeFiles(got)
		return 0, nil, fmt.Errorf("%w: %s (%d descriptors)", ErrSpawn, rep.Error, len(got))
	}
	return rep.Pid, got[0], nil
}

// Kill asks the spawner to SIGKILL its runner pid (QEMU follows through Pdeathsig). A
// runner that is already gone is not an error; errors wrap ErrSpawn.
func (c *Client) Kill(pid int) error {
	b, _ := json.Marshal(Request{Op: OpKill, Pid: pid})
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := unix.Sendmsg(c.fd, b, nil, nil, 0); err != nil {
		return fmt.Errorf("kill runner %d: %w: %w", pid, ErrSpawn, os.NewSyscallError("sendmsg", err))
	}
	buf := make([]byte, MsgMax)
	n, _, _, _, err := unix.Recvmsg(c.fd, buf, nil, 0)
	if err != nil || n == 0 {
		return fmt.Errorf("kill runner %d: spawner gone: %w (%v)", pid, ErrSpawn, err)
	}
	var rep Reply
	if err := json.Unmarshal(buf[:n], &rep); err != nil || rep.Error != "" {
		return fmt.Errorf("kill runner %d: %w: %s %v", pid, ErrSpawn, rep.Error, err)
	}
	return nil
}

// Close stops the spawner (it exits when its socket closes, contract step 8) and reaps it.
func (c *Client) Close() {
	unix.Close(c.fd)
	c.cmd.Wait()
}
