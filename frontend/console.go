package frontend

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"brood.dev/brood/frontend/sshclient"
)

// detachKey is the byte that ends an attached session and stops the VM: Ctrl-] (GS,
// 0x1d), the key telnet and `docker attach` users know. It is never sent to the guest.
const detachKey = 0x1d

// input reads the developer's stdin for the length of one session and can be stopped
// without leaving a goroutine blocked in read(2): the review that follows on the same
// terminal must get every key press. It reads a dup of the descriptor in non-blocking
// mode through Go's poller (so a read deadline interrupts it) and restores the original
// descriptor's blocking mode on Close.
type input struct {
	f        *os.File
	fd       int // the original descriptor (its file status flags are shared with f)
	wasNonBl bool
}

// openInput wraps in for cancellable reads. Descriptors the poller cannot watch
// (regular files) still work: reads just cannot be interrupted, which does not matter
// because they never block.
func openInput(in *os.File) (*input, error) {
	fd := int(in.Fd())
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("dup stdin", err)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		unix.Close(nfd)
		return nil, os.NewSyscallError("get stdin flags", err)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, os.NewSyscallError("set stdin non-blocking", err)
	}
	return &input{f: os.NewFile(uintptr(nfd), "stdin"), fd: fd, wasNonBl: fl&unix.O_NONBLOCK != 0}, nil
}

func (i *input) Read(p []byte) (int, error) { return i.f.Read(p) }

// Close interrupts a pending Read, closes the dup and restores the original blocking
// mode.
func (i *input) Close() error {
	_ = i.f.SetReadDeadline(time.Unix(1, 0))
	err := i.f.Close()
	if !i.wasNonBl {
		_ = unix.SetNonblock(i.fd, false)
	}
	return err
}

// escapeReader passes bytes through until the detach key, then calls onDetach once and
// reports end of input; the key and anything after it in the same read are dropped.
type escapeReader struct {
	r        io.Reader
	onDetach func()
	once     sync.Once
	detached bool
}

func (e *escapeReader) Read(p []byte) (int, error) {
	if e.detached {
		return 0, io.EOF
	}
	n, err := e.r.Read(p)
	if i := bytes.IndexByte(p[:n], detachKey); i >= 0 {
		e.detached = true
		e.once.Do(e.onDetach)
		if i == 0 {
			return 0, io.EOF
		}
		return i, nil
	}
	return n, err
}

// terminal is the developer's terminal attached to the agent's PTY: raw mode, window
// size changes forwarded, restored on Close.
type terminal struct {
	in, out *os.File
	state   *term.State
	sigs    chan os.Signal
	Resize  chan sshclient.WindowSize
	done    chan struct{}
}

// attachTerminal puts in in raw mode and starts forwarding SIGWINCH as sizes of out.
func attachTerminal(in, out *os.File) (*terminal, error) {
	st, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return nil, fmt.Errorf("set raw mode on %s: %w", in.Name(), err)
	}
	t := &terminal{in: in, out: out, state: st, sigs: make(chan os.Signal, 1),
		Resize: make(chan sshclient.WindowSize, 1), done: make(chan struct{})}
	signal.Notify(t.sigs, syscall.SIGWINCH)
	go func() {
		for {
			select {
			case <-t.done:
				return
			case <-t.sigs:
				ws := t.Size()
				select {
				case t.Resize <- ws:
				default: // a newer size replaces one not yet sent
					select {
					case <-t.Resize:
					default:
					}
					t.Resize <- ws
				}
			}
		}
	}()
	return t, nil
}

// Size returns the terminal's current size (24x80 when it cannot be read).
func (t *terminal) Size() sshclient.WindowSize {
	cols, rows, err := term.GetSize(int(t.out.Fd()))
	if err != nil || rows <= 0 || cols <= 0 {
		return sshclient.WindowSize{Rows: 24, Cols: 80}
	}
	return sshclient.WindowSize{Rows: rows, Cols: cols}
}

// Close stops forwarding window changes and restores the terminal mode.
func (t *terminal) Close() error {
	signal.Stop(t.sigs)
	close(t.done)
	if err := term.Restore(int(t.in.Fd()), t.state); err != nil {
		return fmt.Errorf("restore terminal %s: %w", t.in.Name(), err)
	}
	return nil
}
