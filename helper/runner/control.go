package runner

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox"
)

// control is the runner's end of the control socket; writes are serialized.
type control struct {
	mu   sync.Mutex
	conn *api.Conn
}

// send writes one event with files (the caller keeps them).
func (c *control) send(ev Event, files ...*os.File) {
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn.WriteFrame(b, files...)
}

// readConfig reads the daemon's Config and, when it says the VM has a network, the
// tap's queue descriptor: exactly one character device (/dev/net/tun). Errors wrap
// ErrRunner or the frame's error.
func (c *control) readConfig() (Config, *os.File, error) {
	body, files, err := c.conn.ReadFrame()
	if err != nil {
		closeFiles(files)
		return Config{}, nil, fmt.Errorf("read runner config: %w", err)
	}
	var cfg Config
	if err := api.DecodeArgs(body, &cfg); err != nil {
		closeFiles(files)
		return Config{}, nil, fmt.Errorf("runner config: %w", err)
	}
	if !cfg.Tap {
		closeFiles(files)
		return cfg, nil, nil
	}
	if len(files) != 1 || checkCharDevice(files[0]) != nil {
		closeFiles(files)
		return Config{}, nil, fmt.Errorf("runner config: tap descriptor missing or not a character device: %w", ErrRunner)
	}
	return cfg, files[0], nil
}

// reportStarted sends EvStarted with the VMM's pidfd, which lets the daemon know for sure
// when the VMM is gone. The backend may already have reaped a VMM that died at once:
// then there is no pidfd to send.
func (c *control) reportStarted(vm sandbox.VM) {
	qfd, err := unix.PidfdOpen(vm.Pid(), 0)
	if err != nil {
		c.send(Event{Event: EvStarted, Pid: vm.Pid()})
		return
	}
	qf := os.NewFile(uintptr(qfd), "vmm-pidfd")
	c.send(Event{Event: EvStarted, Pid: vm.Pid()}, qf)
	qf.Close()
}

// serve answers the daemon's requests until it hangs up; a stop request or the hang-up
// stops vm and sets stopRequested first.
func (c *control) serve(log *slog.Logger, vm sandbox.VM, stopRequested *atomic.Bool) {
	s := &stopOnce{vm: vm}
	for {
		body, files, err := c.conn.ReadFrame()
		closeFiles(files)
		if err != nil {
			stopRequested.Store(true)
			s.stop()
			return
		}
		var req Request
		if err := api.DecodeArgs(body, &req); err != nil {
			log.Warn("bad runner request", "err", err)
			continue
		}
		switch req.Op {
		case OpAttach:
			c.attach()
		case OpStop:
			stopRequested.Store(true)
			s.stop()
		}
	}
}

// attach connects to the VMM's SSH socket (retrying until the VMM has created it, at
// most AttachTimeout) and sends the connected descriptor to the daemon.
func (c *control) attach() {
	path := fdPath(FDRunDir) + "/" + SSHSocketName
	deadline := time.Now().Add(AttachTimeout)
	for {
		uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err == nil {
			f, ferr := uc.File()
			uc.Close()
			if ferr != nil {
				c.send(Event{Event: EvAttached, Detail: ferr.Error()})
				return
			}
			c.send(Event{Event: EvAttached}, f)
			f.Close()
			return
		}
		if time.Now().After(deadline) {
			c.send(Event{Event: EvAttached, Detail: fmt.Sprintf("connect to the VMM's SSH socket: %v", err)})
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
