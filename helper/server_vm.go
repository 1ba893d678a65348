package helper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/vmhost"
)

// vmCall runs start_vm, attach, stop_vm, wait_vm, egress_log and refreshed_logins for the
// caller, after the owner check every session call makes (Table.lookup).
func (s *Server) vmCall(ctx context.Context, st *connState, req *api.Request, _ []*os.File) (any, []*os.File, error) {
	uid := st.cred.UID
	if req.Call == api.CallStartVM {
		var a api.StartVMArgs
		if err := api.DecodeArgs(req.Args, &a); err != nil {
			return nil, nil, err
		}
		if !api.ValidSessionID(a.ID) {
			return nil, nil, fmt.Errorf("start VM of session %q: malformed id: %w", a.ID, api.ErrBadRequest)
		}
		if err := s.checkDirect(uid, a); err != nil { // direct.go
			return nil, nil, err
		}
		if err := s.checkSSHAgent(uid, a); err != nil { // direct.go
			return nil, nil, err
		}
		if err := s.checkSecrets(&a); err != nil {
			return nil, nil, err
		}
		sess, err := s.sessions.beginStart(a.ID, uid)
		if err != nil {
			return nil, nil, err
		}
		vm, info, err := s.startVM(sess, a, func(api.VMExit) {
			s.sessions.vmExited(sess)
			s.lastBusy.Store(time.Now().UnixNano())
		})
		s.sessions.endStart(sess, vm)
		if err != nil {
			return nil, nil, err
		}
		st.vms = append(st.vms, a.ID)
		return info, nil, nil
	}
	var a api.SessionArgs
	if err := api.DecodeArgs(req.Args, &a); err != nil {
		return nil, nil, err
	}
	if !api.ValidSessionID(a.ID) {
		return nil, nil, fmt.Errorf("%s session %q: malformed id: %w", req.Call, a.ID, api.ErrBadRequest)
	}
	vm, err := s.sessions.vmOf(a.ID, uid)
	if err != nil {
		return nil, nil, err
	}
	switch req.Call {
	case api.CallAttach:
		f, err := vm.Attach(ctx)
		if err != nil {
			return nil, nil, err
		}
		s.log.Info("audit: attached", "uid", uid, "session", a.ID)
		return api.Empty{}, []*os.File{f}, nil
	case api.CallEgressLog:
		f, err := vm.EgressLog()
		if err != nil {
			return nil, nil, err
		}
		return api.Empty{}, []*os.File{f}, nil
	case api.CallRefreshedLogins:
		r, err := vm.RefreshedLogins()
		if err == nil {
			s.log.Info("audit: refreshed logins handed to the owner", "uid", uid, "session", a.ID, "logins", len(r.Logins))
		}
		return r, nil, err
	case api.CallStopVM:
		vm.Stop()
		s.log.Info("audit: VM stopped", "uid", uid, "session", a.ID)
		return api.Empty{}, nil, nil
	case api.CallWaitVM:
		ctx, stop := hangupContext(ctx, st.uc)
		defer stop()
		exit, err := vm.Wait(ctx)
		if err != nil {
			return nil, nil, err
		}
		return exit, nil, nil
	}
	return nil, nil, fmt.Errorf("call %q: %w", req.Call, api.ErrUnknownCall)
}

// checkLogins refuses (api.ErrBadRequest) a start whose Logins names a login that no
// OAuth binding of its Secrets belongs to: a login's hosts are allowed only for a
// session that forwards its tokens.
func checkLogins(a api.StartVMArgs) error {
	for _, l := range a.Logins {
		if a.Secrets == nil || !slices.ContainsFunc(a.Secrets.Bindings, func(b api.SecretBinding) bool { return b.Login == l }) {
			return fmt.Errorf("start VM of session %s: login %q: %w: no secret binding of the session belongs to it", a.ID, l, api.ErrBadRequest)
		}
	}
	return nil
}

// checkSecrets checks a's logins (checkLogins) and secret bindings (api.SessionSecrets.Validate). A session
// without a network has no route to any bound host: its bindings are dropped here (the
// guest keeps only placeholders, which work nowhere) and no CA is answered. A session
// with one hands them to its egress process (egress.Manager.Start). They are never
// logged.
func (s *Server) checkSecrets(a *api.StartVMArgs) error {
	if err := checkLogins(*a); err != nil {
		return err
	}
	if a.Secrets == nil {
		return nil
	}
	if err := a.Secrets.Validate(); err != nil {
		return fmt.Errorf("start VM of session %s: %w: %w", a.ID, api.ErrBadRequest, err)
	}
	if a.Egress == "" {
		s.log.Info("audit: secret bindings dropped: the session has no network", "session", a.ID, "bindings", len(a.Secrets.Bindings))
		a.Secrets = nil
	}
	return nil
}

// hangupContext returns a context that also ends when the peer of uc hangs up, so that a
// client killed during a call that blocks for hours (wait_vm) does not hold its
// connection slot until the VM ends. It only peeks (MSG_PEEK): a byte the client sends
// meanwhile ends the watch without being consumed. stop ends the watch; call it before
// reading from uc again.
func hangupContext(ctx context.Context, uc *net.UnixConn) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	if uc == nil {
		return ctx, cancel
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return ctx, cancel
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		rc.Read(func(fd uintptr) bool {
			n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if errors.Is(err, unix.EAGAIN) {
				return false // nothing yet: wait for readability
			}
			if n == 0 {
				cancel() // EOF or error: the client is gone
			}
			return true
		})
	}()
	return ctx, func() {
		uc.SetReadDeadline(time.Now()) // ends rc.Read
		<-done
		cancel()
	}
}

// The connection that started a VM holds it as a lease. While the VM runs the connection
// is never closed for idleness (the client is legitimately silent during boot and while
// the agent runs: a 30 s read timeout once orphaned a slow-booting VM), and when the
// connection ends for any reason (client exit, SIGKILL, helper shutdown) its sessions
// are destroyed: a running VM is stopped, its tap and share released. A VM thus never
// outlives the frontend that started it.

// readDeadline is the read deadline for the next request on st's connection: none while
// a VM it started is alive, else cfg.ReadTimeout from now.
func (s *Server) readDeadline(st *connState) time.Time {
	for _, id := range st.vms {
		if sess, err := s.sessions.Get(id, st.cred.UID); err == nil && sess.State != api.SessionStopped {
			return time.Time{}
		}
	}
	return time.Now().Add(s.cfg.ReadTimeout())
}

// releaseLeases destroys the sessions whose VM was started on st's connection and that
// still exist; it runs when the connection ends.
func (s *Server) releaseLeases(st *connState) {
	for _, id := range st.vms {
		err := s.sessions.Destroy(id, st.cred.UID)
		if errors.Is(err, api.ErrNotFound) {
			continue // destroyed by the client already
		}
		s.lastBusy.Store(time.Now().UnixNano())
		s.log.Info("audit: connection that started the VM closed: session destroyed", "uid", st.cred.UID, "session", id, "err", err)
	}
	st.vms = nil
}

// vmCaps adds to Hello's capabilities what a client checks before it snapshots: the
// bootable images and the host's vCPU and memory limits (nil/0 without a VM backend).
func (s *Server) vmCaps(c *api.Capabilities) {
	if s.vmHost == nil {
		return
	}
	c.Images = builtImages(s.cfg)
	h := vmhost.HostResources()
	c.HostCPUs, c.HostMemoryMiB = h.CPUs, h.MemoryMiB
}
