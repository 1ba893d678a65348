package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/helperclient"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/frontend/sshclient"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox/guestcfg"
)

// vmWaiter watches the VM on its own helper connection (a helperclient.Client is not
// safe for concurrent use) so that Run learns at once when the VMM is gone.
type vmWaiter struct {
	done chan struct{}
	exit api.VMExit
	err  error
}

// startWaiter calls WaitVM on a connection of its own (which redials once when the
// helper closes it before the answer).
func (w *Workflow) startWaiter(id string, lifetime time.Duration) (*vmWaiter, error) {
	hc, err := w.Helper.Dial(context.Background())
	if err != nil {
		return nil, err
	}
	vw := &vmWaiter{done: make(chan struct{})}
	go func() {
		defer close(vw.done)
		defer hc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), lifetime+waitSlack)
		defer cancel()
		vw.exit, vw.err = hc.WaitVM(ctx, id)
	}()
	return vw, nil
}

// gone reports whether the waiter saw the VMM exit within d.
func (vw *vmWaiter) gone(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-vw.done:
		return vw.err == nil
	case <-t.C:
		return false
	}
}

// runningVM is one running VM of a run.
type runningVM struct {
	w         *Workflow
	spec      RunSpec
	hc        helperclient.Client
	id        string // helper session id
	sess      *session.Session
	waiter    *vmWaiter
	waitErr   error // starting the waiter failed: the agent is not attached
	prog      Progress
	rec       *VMRecord
	bootStart time.Time
	exit      api.VMExit
	detached  bool
	// overLifetime: Run gave up on the VM lifetimeGrace after the timeout.
	overLifetime bool
}

// destroy destroys the helper session, best effort: the helper also destroys it when
// the run's connection ends.
func (v *runningVM) destroy() {
	ctx, cancel := context.WithTimeout(context.Background(), destroyWait)
	defer cancel()
	_ = v.hc.DestroySession(ctx, v.id)
}

// attachAndRun connects over SSH and runs the agent until it exits, the developer
// detaches (ErrDetached), the VM ends, or ctx is cancelled.
func (v *runningVM) attachAndRun(ctx context.Context, info api.VMInfo, signer ssh.Signer, stdio Stdio) error {
	hostKey, err := sshclient.ParseHostKey(info.HostKey)
	if err != nil {
		return err
	}
	runCtx, cancel := v.runContext(ctx)
	defer cancel()
	client, err := v.connect(runCtx, signer, hostKey)
	if err != nil {
		return err
	}
	defer client.Close()
	boot := time.Since(v.bootStart)
	v.rec.BootSeconds = boot.Seconds()
	v.prog.Done(fmt.Sprintf("%s, boot to prompt %s", info.Accel, boot.Round(time.Millisecond)))

	if err := v.prepareHome(runCtx, client); err != nil { // homefiles.go
		return err
	}
	env, err := v.trustSessionCA(runCtx, client, info) // homefiles.go
	if err != nil {
		return err
	}
	o := sshclient.Options{Command: v.spec.Command, Env: env}
	for _, kv := range o.Env {
		v.prog.Printf("forwarding $%s", kv[0])
	}
	if v.spec.SSHAgent != nil {
		pol, err := v.agentPolicy(info) // sshagentrun.go
		if err != nil {
			return err
		}
		serveAgent(client, pol)
		defer func() { v.rec.SSHAgent = printAgentLog(v.prog, pol.Log) }()
		o.Agent = true
	}
	closeIO, err := v.wireStdio(&o, stdio, cancel)
	if err != nil {
		return err
	}
	defer closeIO()
	code, err := sshclient.Run(runCtx, client, o)
	if errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		v.overLifetime = true
	}
	if v.detached {
		v.rec.Detached = true
		return ErrDetached
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: %w", ctx.Err())
		}
		return err
	}
	v.rec.ExitStatus = &code
	return nil
}

// runContext is ctx ending early when the VMM goes away under the session, and at the
// latest lifetimeGrace after the timeout even if the helper has not stopped the VM yet.
func (v *runningVM) runContext(ctx context.Context) (context.Context, context.CancelFunc) {
	runCtx, cancel := context.WithCancel(ctx)
	if t := v.spec.timeout(); t > 0 {
		var c2 context.CancelFunc
		runCtx, c2 = context.WithTimeout(runCtx, t+lifetimeGrace)
		c1 := cancel
		cancel = func() { c2(); c1() }
	}
	go func() {
		select {
		case <-v.waiter.done:
			// The SSH connection normally ends with the VMM (and delivers the exit
			// status first); cut it only if it lingers.
			select {
			case <-time.After(vmGoneGrace):
				cancel()
			case <-runCtx.Done():
			}
		case <-runCtx.Done():
		}
	}()
	return runCtx, cancel
}

// connect attaches to the guest's SSH server through the helper and completes the
// handshake against the pinned host key (bounded by maxHandshake or the timeout).
func (v *runningVM) connect(ctx context.Context, signer ssh.Signer, hostKey ssh.PublicKey) (*ssh.Client, error) {
	f, err := v.hc.Attach(ctx, v.id)
	if err != nil {
		return nil, fmt.Errorf("attach to VM: %w", err)
	}
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("attach to VM: %w", err)
	}
	hsTimeout := maxHandshake
	if t := v.spec.timeout(); t > 0 && t < hsTimeout {
		hsTimeout = t
	}
	hctx, hcancel := context.WithTimeout(ctx, hsTimeout)
	defer hcancel()
	client, err := sshclient.Handshake(hctx, nc, guestcfg.DefaultUser, signer, hostKey, hsTimeout)
	if err != nil {
		return nil, fmt.Errorf("connect to guest: %w", err)
	}
	return client, nil
}

// wireStdio connects the session options to the caller's terminal: a PTY in raw mode
// with the detach key on a TTY, plain streams otherwise. The returned function restores
// the terminal and stops reading stdin.
func (v *runningVM) wireStdio(o *sshclient.Options, stdio Stdio, cancel context.CancelFunc) (func(), error) {
	inF, _ := stdio.In.(*os.File)
	outF, _ := stdio.Out.(*os.File)
	var closers []func() error
	done := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	var inp *input
	o.Stdin = stdio.In
	if inF != nil {
		var err error
		if inp, err = openInput(inF); err != nil {
			return nil, err
		}
		closers = append(closers, inp.Close)
		o.Stdin = inp
	}
	if !stdio.TTY {
		o.Stdout, o.Stderr = tee(stdio.Out, stdio.Tail), tee(stdio.Err, stdio.Tail) // agentnotes.go
		return done, nil
	}
	v.prog.Printf("attached to %s; Ctrl-] detaches and stops the VM", v.spec.Describe)
	t, err := attachTerminal(inF, outF)
	if err != nil {
		done()
		return nil, err
	}
	closers = append(closers, t.Close)
	o.PTY, o.Term, o.Size, o.Resize = true, os.Getenv("TERM"), t.Size(), t.Resize
	o.Stdin = &escapeReader{r: inp, onDetach: func() { v.detached = true; cancel() }}
	o.Stdout, o.Stderr = tee(outF, stdio.Tail), tee(outF, stdio.Tail)
	return done, nil
}

// stop makes sure the VM is gone: it waits PoweroffWait for the guest to power off by
// itself (it does when the SSH connection ends), then asks the helper to stop it. It
// returns an error only when it cannot confirm that the VMM is gone.
func (v *runningVM) stop() error {
	v.prog.Start("stop VM")
	exit := api.VMExit{Outcome: api.OutcomeStopped} // StopVM returned: the VMM is gone
	if v.waiter != nil && v.waiter.gone(v.w.poweroffWait()) {
		exit = v.waiter.exit
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), stopWait)
		defer cancel()
		err := v.hc.StopVM(ctx, v.id)
		if api.IsCode(err, api.CodeNotFound) {
			err = nil // the helper destroyed the session (and its VM) already
		}
		if err != nil {
			return fmt.Errorf("stop VM of session %s: %w (the session is kept; brood doctor checks the helper)", v.sess.ID, err)
		}
		if v.waiter != nil && v.waiter.gone(stopWait) {
			exit = v.waiter.exit
		}
	}
	if v.overLifetime && (exit.Outcome == api.OutcomeStopped || exit.Outcome == "") {
		exit = api.VMExit{Outcome: api.OutcomeTimeout, Detail: "stopped by brood after --timeout", ConsoleTail: exit.ConsoleTail}
	}
	v.exit = exit
	v.rec.Outcome, v.rec.Detail, v.rec.Egress = exit.Outcome, exit.Detail, exit.Egress
	if e := exit.Egress; e != nil {
		v.prog.Printf("network: %d name(s) allowed, %d refused, %d address(es) pinned, %d connection(s) refused by the name gate (details: %s in the session dir)",
			max(e.AllowedNames, len(e.Allowed)), max(e.RefusedNames, len(e.Refused)), len(e.Pinned), e.ConnsRefused, VMRecordFile)
		v.rec.EgressLog = v.keepEgressLog(e)
		printEgressLog(v.prog, v.rec.EgressLog)
		for _, host := range slices.Sorted(maps.Keys(e.Secrets)) {
			c := e.Secrets[host]
			v.prog.Printf("secrets: %s: %d request(s) with real values swapped in, %d refused, %d token refresh(es)",
				diff.Escape(host), c.Swaps, c.Blocks, c.Refreshes)
		}
		v.afterRefresh(e)
	}
	v.rec.VMSeconds = time.Since(v.bootStart).Seconds()
	v.prog.Done(string(exit.Outcome))
	return nil
}

// abnormal returns an error wrapping ErrVMOutcome when the VM timed out or failed, or
// was stopped while the agent had not finished and the developer did not detach.
func (v *runningVM) abnormal() error { return Abnormal(v.exit) }

// Abnormal returns an error wrapping ErrVMOutcome when e says the VM timed out, failed
// or ended in a way brood does not know; nil for a power-off or a stop.
func Abnormal(e api.VMExit) error {
	switch {
	case e.Outcome == api.OutcomeTimeout:
		return fmt.Errorf("%w: timeout: the VM was stopped after its time limit%s", ErrVMOutcome, detailSuffix(e.Detail))
	case e.Outcome == api.OutcomeFailed:
		return fmt.Errorf("%w: failed%s", ErrVMOutcome, detailSuffix(e.Detail))
	case e.Outcome != api.OutcomePoweroff && e.Outcome != api.OutcomeStopped:
		return fmt.Errorf("%w: outcome %q%s", ErrVMOutcome, diff.Escape(string(e.Outcome)), detailSuffix(e.Detail))
	}
	return nil
}

func detailSuffix(d string) string {
	if d == "" {
		return ""
	}
	return " (" + diff.Escape(d) + ")"
}

// save writes vm.json and the console tail into the session directory.
func (v *runningVM) save() {
	if v.exit.ConsoleTail != "" {
		p := filepath.Join(v.sess.Dir, ConsoleFile)
		if err := os.WriteFile(p, []byte(v.exit.ConsoleTail), 0o600); err == nil {
			v.rec.Console = p
		}
	}
	b, err := json.MarshalIndent(v.rec, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(v.sess.Dir, VMRecordFile), append(b, '\n'), 0o600)
	}
	if err != nil {
		v.prog.Warn("save %s: %v", VMRecordFile, err)
	}
	if v.abnormal() != nil && v.rec.Console != "" {
		v.prog.Printf("guest console tail saved in %s (--console prints it)", diff.Escape(v.rec.Console))
	}
}
