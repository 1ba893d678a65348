package fakehelper

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"brood.dev/brood/helper/api"
)

// Serve answers the helper protocol (package api) on every connection ln accepts until
// ln is closed. Each call runs the same code as the in-memory client's, so a test of the
// command line sees what a test of the workflow sees; DropAfter and DropWait apply here.
func (h *Helper) Serve(ln *net.UnixListener) {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		go h.serveConn(api.NewConn(c))
	}
}

// serveConn answers the calls of one connection in order.
func (h *Helper) serveConn(c *api.Conn) {
	defer c.Close()
	for {
		body, files, err := c.ReadFrame()
		if err != nil {
			return
		}
		req, err := api.DecodeRequest(body)
		if err != nil {
			closeAll(files)
			return
		}
		h.record(req.Call)
		if req.Call == api.CallCreateSession && len(files) > 0 {
			h.createSession(files[0])
		}
		closeAll(files)
		if req.Call == api.CallWaitVM && h.dropWait() {
			return
		}
		result, out, cerr := h.dispatch(req)
		var resp api.Response
		var ae *api.Error
		switch {
		case errors.As(cerr, &ae):
			resp.Error = ae
		case cerr != nil:
			resp.Error = &api.Error{Code: api.CodeInternal, Message: cerr.Error()}
		default:
			raw, _ := json.Marshal(result)
			resp.Result, resp.FDs = raw, len(out)
		}
		b, _ := json.Marshal(resp)
		err = c.WriteFrame(b, out...)
		for _, o := range out {
			o.Close()
		}
		if err != nil || h.dropAfter(req.Call) {
			return
		}
	}
}

// dropWait reports whether this wait_vm is to be answered by hanging up (once).
func (h *Helper) dropWait() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.DropWait
	h.DropWait = false
	return d
}

// dropAfter reports whether the connection is to be closed after answering call (once).
func (h *Helper) dropAfter(call api.Call) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.DropAfter == "" || h.DropAfter != call {
		return false
	}
	h.DropAfter = ""
	return true
}

// dispatch runs one decoded call: its result, the files to pass, or its error.
func (h *Helper) dispatch(req *api.Request) (any, []*os.File, error) {
	switch req.Call {
	case api.CallHello:
		return h.hello(), nil, nil
	case api.CallListSessions:
		h.mu.Lock()
		defer h.mu.Unlock()
		return api.SessionList{Sessions: h.Sessions}, nil, nil
	case api.CallCreateSession:
		return api.Session{ID: SessionID, State: api.SessionCreated}, nil, nil // share: serveConn
	case api.CallStartVM:
		var a api.StartVMArgs
		json.Unmarshal(req.Args, &a)
		info, err := h.startVM(a)
		return info, nil, err
	case api.CallAttach:
		f, err := h.attach()
		if err != nil {
			return nil, nil, err
		}
		return api.Empty{}, []*os.File{f}, nil
	case api.CallEgressLog:
		f, err := h.egressLog()
		if err != nil {
			return nil, nil, err
		}
		return api.Empty{}, []*os.File{f}, nil
	case api.CallRefreshedLogins:
		r, err := h.refreshedLogins()
		return r, nil, err
	case api.CallStopVM:
		h.end(api.OutcomeStopped)
	case api.CallWaitVM:
		exit, err := h.waitVM(context.Background())
		return exit, nil, err
	case api.CallListImages:
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.Images, nil, nil
	case api.CallDoctor:
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.Doctor, nil, nil
	case api.CallBuildImage:
		var a api.BuildImageArgs
		json.Unmarshal(req.Args, &a)
		st, err := h.buildImage(a)
		return st, nil, err
	case api.CallResolvePolicy:
		var a api.ResolvePolicyArgs
		json.Unmarshal(req.Args, &a)
		p, err := h.resolvePolicy(a)
		return p, nil, err
	}
	return api.Empty{}, nil, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// Start returns a new fake helper (New) serving a unix socket in a temporary directory of
// t until t ends, and the socket's path.
func Start(t testing.TB) (*Helper, string) {
	t.Helper()
	h, err := New()
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "helper.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go h.Serve(ln)
	return h, sock
}
