package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/helperclient"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/frontend/snapshot"
	"brood.dev/brood/frontend/sshagent"
	"brood.dev/brood/frontend/sshclient"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/guestcfg"
)

// Timing of a VM session.
const (
	// stopWait bounds StopVM plus the WaitVM that confirms the VMM is gone.
	stopWait = 60 * time.Second
	// maxHandshake bounds boot plus SSH handshake when the VM has a longer lifetime;
	// a TCG boot takes ~2 s on a 2-core host, so minutes mean the guest is stuck.
	maxHandshake = 3 * time.Minute
	// waitSlack is added to the VM's lifetime for the WaitVM call's deadline.
	waitSlack = 5 * time.Minute
	// lifetimeGrace: with a timeout, Run itself stops the VM this long after the timeout
	// when the helper has not reported it gone by then.
	lifetimeGrace = 10 * time.Second
	// vmGoneGrace is how long the SSH session may outlive the VMM before it is cut.
	vmGoneGrace = 3 * time.Second
	// defaultLifetime is the WaitVM deadline base without a timeout (the helper's own
	// default applies to the VM).
	defaultLifetime = 24 * time.Hour
	// destroyWait bounds the best-effort DestroySession at the end of a run.
	destroyWait = 30 * time.Second
)

// Files Run writes into the session directory.
const (
	VMRecordFile  = "vm.json"      // VMRecord: how the VM ended, timings
	ConsoleFile   = "console.log"  // the guest console tail (raw bytes as the helper sent them)
	EgressLogFile = "egress.jsonl" // every egress decision (EgressLog), up to MaxEgressLogBytes
)

// RunSpec is one resolved run: what to snapshot, what to boot, what to run in it.
type RunSpec struct {
	// Agent names the agent in the session record ("run-image" for a bare command);
	// Describe names it in notes ("agent codex", "the command").
	Agent, Describe string
	// Workspace is the directory to snapshot.
	Workspace string
	// VM is the StartVM request without ID, ClientKey and Clock (Run fills them in):
	// image, sizes, timeout in seconds, egress profile and policy layers.
	VM api.StartVMArgs
	// Command is the guest command line for the login shell ("": an interactive shell);
	// Env the environment variables forwarded to it, as name/value pairs.
	Command string
	Env     [][2]string
	// HomeFiles are written into the agent's home in the guest before Command starts
	// (generated agent settings, sshclient.PutHomeFiles); Notes are printed then, one
	// line each (what was copied or dropped, how the key is used).
	HomeFiles []guestcfg.HomeFile
	Notes     []string
	// Check, when set, is called with the helper's capabilities before the snapshot is
	// taken; its error ends the run (an image the helper has not built, too many vCPUs).
	Check func(api.Capabilities) error
	// StartHint, when set, returns advice appended to StartVM's error.
	StartHint func(err error, caps api.Capabilities) string
	// Placeholders, when set, is the same run with every credential a placeholder
	// (frontend/secrets); Run uses it instead of Env, HomeFiles and Notes when the
	// helper's Capabilities say Secrets (secrets.go).
	Placeholders *Placeholders
	// SSHAgent, when set, forwards the developer's agent to the command through the
	// filter of package sshagent (--ssh-agent); VM.SSHAgent must be set too.
	SSHAgent *SSHAgent
	// WriteBackAsked names where writing refreshed logins back was asked for
	// ("--write-back-logins", or the config key and file); empty: it was not. The system
	// policy's forbid_login_write_back refuses it before the snapshot even when the run
	// has no login file (secretsAllowed).
	WriteBackAsked string
	// logins are Placeholders' login files, when the run uses them (withSecrets).
	logins *loginWriteBack
}

// timeout is the VM's lifetime the caller asked for (0: the helper's default).
func (s RunSpec) timeout() time.Duration { return time.Duration(s.VM.TimeoutSec) * time.Second }

// Stdio is the caller's terminal for the agent. With TTY the agent gets a PTY on In/Out
// (both must then be *os.File terminals) and the detach key (Ctrl-]) stops the VM;
// without it the agent's stdout and stderr go to Out and Err and In is its stdin.
type Stdio struct {
	In       io.Reader
	Out, Err io.Writer
	TTY      bool
	// Tail, when set, also receives everything the agent writes (stdout, stderr, or the
	// PTY's output), for the hint after an early exit.
	Tail io.Writer
}

// VMRecord is vm.json in the session directory.
type VMRecord struct {
	HelperSession string        `json:"helper_session"`
	Agent         string        `json:"agent"`
	Image         string        `json:"image"`
	Accel         sandbox.Accel `json:"accel,omitempty"`
	Backend       string        `json:"backend,omitempty"`
	Outcome       api.VMOutcome `json:"outcome"`
	Detail        string        `json:"detail,omitempty"`
	ExitStatus    *int          `json:"exit_status,omitempty"`
	Detached      bool          `json:"detached,omitempty"`
	BootSeconds   float64       `json:"boot_seconds"`  // StartVM to SSH handshake done (boot to prompt)
	VMSeconds     float64       `json:"vm_seconds"`    // StartVM to the VMM gone
	TotalSeconds  float64       `json:"total_seconds"` // whole run up to the review
	Console       string        `json:"console,omitempty"`
	// Network and Egress are the session's network (nil: none) and the summary of its DNS
	// decisions (allowed and refused names, pinned addresses) from the helper's log.
	Network *api.EgressInfo    `json:"network,omitempty"`
	Egress  *api.EgressSummary `json:"egress,omitempty"`
	// EgressLog says where the session's whole decision log was kept (nil: no network).
	EgressLog *EgressLog `json:"egress_log,omitempty"`
	// SSHAgent is every request the forwarded agent answered (--ssh-agent; at most 1,000).
	SSHAgent []sshagent.Event `json:"ssh_agent,omitempty"`
}

// RunResult is what a run left behind.
type RunResult struct {
	// Session is the session directory (nil when Run failed before creating it).
	Session *session.Session
	// Record is what vm.json records; Exit is the helper's account of the VM's end
	// (ConsoleTail: the guest console's last bytes).
	Record VMRecord
	Exit   api.VMExit
	// Stopped: the VM is confirmed gone and the session marked stopped, so the caller
	// may point at the kept session (review, apply, rm).
	Stopped bool
	// Failed: the VM ended abnormally (timeout, failure) or the agent could not be run
	// (no SSH connection, interrupted); Run's error says which. The session is kept.
	Failed bool
	// Gate is the stopped session's diff, computed once, for Review (nil unless the VM
	// ended normally and the diff succeeded).
	Gate *Gate
}

// Run snapshots spec.Workspace into a new session, boots the VM on the snapshot, runs
// the agent on stdio until it exits (or the developer detaches, the VM ends, ctx is
// cancelled), stops the VM and, when it ended normally, computes the diff of the stopped
// session (RunResult.Gate). The result is non-nil once the session exists. The error is
// the run's failure (wrapping ErrVMOutcome or ErrDetached where they apply); the agent's
// own exit status is in Record.ExitStatus, not in the error.
func (w *Workflow) Run(ctx context.Context, spec RunSpec, stdio Stdio) (res *RunResult, err error) {
	total := time.Now()
	prog := w.progress()
	defer func() {
		if err != nil {
			prog.Fail("")
		}
	}()
	// 1. The helper: fail before snapshotting when it is not there.
	prog.Start("connect to helper")
	hc, err := w.Helper.Dial(ctx)
	if err != nil {
		return nil, w.hinted(err)
	}
	defer hc.Close()
	prog.Done(string(hc.Caps().Accel))
	if spec.Check != nil {
		if err := spec.Check(hc.Caps()); err != nil {
			return nil, err
		}
	}
	if spec, err = w.useSecrets(ctx, hc, spec, prog); err != nil { // secrets.go
		return nil, err
	}
	if err := w.directAllowed(ctx, hc, spec); err != nil { // direct.go: forbid_direct, before anything exists
		return nil, err
	}
	// 2. The snapshot S, in a new session directory.
	sess, err := w.newSession(ctx, spec) // direct.go: takeSnapshot unless direct mode
	if err != nil {
		return nil, err
	}
	res = &RunResult{Session: sess}
	// 3. The helper's session on the snapshot share, and the VM booted on it.
	vm, info, signer, err := w.boot(ctx, hc, spec, res)
	if err != nil {
		return bootFailed(res, err) // direct.go: a direct session is removed
	}
	// 4. The agent. From here on the VM is running: every path stops it and waits for it
	// to be gone before the snapshot is looked at (the guest must not change S while it
	// is diffed).
	runErr := vm.waitErr
	if runErr == nil {
		runErr = vm.attachAndRun(ctx, info, signer, stdio)
	}
	if runErr != nil && !errors.Is(runErr, ErrDetached) {
		prog.Fail("") // the step that was running (boot, when the handshake failed)
	}
	if errors.Is(runErr, ErrDetached) {
		prog.Printf("detached (Ctrl-]): stopping the VM; %s may not have finished", spec.Describe)
	}
	goneErr := vm.stop()
	vm.destroy()
	if goneErr != nil {
		// The VMM may still run: no diff, and the session stays "running".
		return res, errors.Join(runErr, goneErr)
	}
	if err := sess.SetState(session.StateStopped); err != nil {
		return res, err
	}
	res.Stopped, res.Exit = true, vm.exit
	res.Record.TotalSeconds = time.Since(total).Seconds()
	vm.save()
	// 5. How it ended; 6. on a normal end, the diff of the stopped VM's snapshot.
	if abnormal := vm.abnormal(); abnormal != nil {
		if runErr != nil {
			abnormal = fmt.Errorf("%w (%v)", abnormal, runErr)
		}
		res.Failed = true
		return res, fmt.Errorf("run session %s: %w", sess.ID, abnormal)
	}
	if runErr != nil && !errors.Is(runErr, ErrDetached) {
		res.Failed = true
		return res, fmt.Errorf("run session %s: %w", sess.ID, runErr)
	}
	if !sess.Direct { // direct.go: nothing to review
		res.Gate, err = w.runGate(ctx, sess)
	}
	return res, err
}

// boot creates the helper session on the snapshot share of res.Session, starts the VM
// with an ephemeral client key and starts watching it. On error the helper session is
// destroyed again and the snapshot kept (state ready).
func (w *Workflow) boot(ctx context.Context, hc helperclient.Client, spec RunSpec, res *RunResult) (*runningVM, api.VMInfo, ssh.Signer, error) {
	sess, prog := res.Session, w.progress()
	share, err := api.OpenShare(shareDir(sess)) // direct.go
	if err != nil {
		return nil, api.VMInfo{}, nil, fmt.Errorf("run session %s: %w", sess.ID, err)
	}
	hs, err := hc.CreateSession(ctx, share)
	share.Close()
	if err != nil {
		return nil, api.VMInfo{}, nil, fmt.Errorf("run session %s: create helper session: %w", sess.ID, err)
	}
	res.Record = VMRecord{HelperSession: hs.ID, Agent: spec.Agent, Image: spec.VM.Image}
	vm := &runningVM{w: w, spec: spec, hc: hc, id: hs.ID, sess: sess, prog: prog, rec: &res.Record}
	signer, pub, err := sshclient.NewKey()
	if err != nil {
		vm.destroy()
		return nil, api.VMInfo{}, nil, err
	}
	prog.Start(fmt.Sprintf("start VM (image %s)", spec.VM.Image))
	vm.bootStart = time.Now()
	args := spec.VM
	args.ID, args.ClientKey, args.Clock = hs.ID, pub, time.Now().Unix()
	info, err := hc.StartVM(ctx, args)
	if err != nil {
		vm.destroy()
		hint := ""
		if spec.StartHint != nil {
			hint = spec.StartHint(err, hc.Caps())
		}
		if policyRefusal(err) { // bootFailed removes the session
			return nil, api.VMInfo{}, nil, fmt.Errorf("run: start VM: %w%s", err, hint)
		}
		return nil, api.VMInfo{}, nil, fmt.Errorf("run session %s: start VM: %w%s%s", sess.ID, err, hint, keptNote(sess))
	}
	res.Record.Accel, res.Record.Backend, res.Record.Network = info.Accel, info.Backend, info.Egress
	prog.Done(info.Backend + ", " + string(info.Accel))
	// The helper session id lets later commands ask whether this VM still runs.
	sess.HelperSession = hs.ID
	if err := sess.SetState(session.StateRunning); err != nil {
		prog.Warn("%v", err)
	}
	w.bootNotes(spec, info)
	prog.Start("boot")
	lifetime := defaultLifetime
	if t := spec.timeout(); t > 0 {
		lifetime = t
	}
	if vm.waiter, err = w.startWaiter(hs.ID, lifetime); err != nil {
		vm.waitErr = fmt.Errorf("watch VM: %w", err)
	}
	return vm, info, signer, nil
}

// bootNotes reports the helper's warning, what runs on which image (agentNote), and the
// VM's network with the LLM provider's hosts.
func (w *Workflow) bootNotes(spec RunSpec, info api.VMInfo) {
	prog := w.progress()
	if info.Warning != "" {
		prog.Warn("%s", diff.Escape(strings.TrimPrefix(info.Warning, "WARNING: ")))
	}
	prog.Printf("%s", agentNote(spec, info)) // agentnotes.go
	if e := info.Egress; e != nil {
		prog.Printf("network: profile %s%s, guest %s, %d allowed host entr(ies), policy %s (brood policy show prints it)",
			diff.Escape(e.Profile), providerNote(e), diff.Escape(e.GuestV4), len(e.Hosts), diff.Escape(e.Digest))
		if e.Warning != "" {
			prog.Warn("egress: %s", diff.Escape(e.Warning))
		}
	} else {
		prog.Printf("network: none (the VM has no network device)")
	}
}

// takeSnapshot creates the session directory and the snapshot of workspace in it (the
// code path of `brood session new`), reporting the session id first.
func (w *Workflow) takeSnapshot(ctx context.Context, workspace, agent string) (*session.Session, error) {
	prog := w.progress()
	fi, err := os.Stat(workspace)
	if err != nil {
		return nil, &InvalidError{fmt.Errorf("run: workspace: %v", err)}
	}
	if !fi.IsDir() {
		return nil, &InvalidError{fmt.Errorf("run: workspace %q is not a directory", workspace)}
	}
	sess, err := session.Create(workspace)
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	sess.Agent = agent
	prog.Printf("session %s (workspace %s)", sess.ID, diff.Escape(sess.Workspace))
	fail := func(err error) error {
		if rerr := session.Remove(sess.ID); rerr != nil {
			return fmt.Errorf("run: snapshot: %w (and removing session %s failed: %v)", err, sess.ID, rerr)
		}
		return fmt.Errorf("run: snapshot: %w", err)
	}
	prog.Start("snapshot")
	m, rep, err := snapshot.Take(ctx, sess.Workspace, sess.SnapshotDir(), snapshot.Options{BaseDir: sess.BaseDir(), SkipDirs: StateDirs()})
	if err != nil {
		return nil, fail(err)
	}
	if err := manifest.Write(sess.ManifestPath(), m); err != nil {
		return nil, fail(err)
	}
	if err := sess.SetState(session.StateReady); err != nil {
		return nil, fail(err)
	}
	prog.Done(fmt.Sprintf("%d files, %d bytes; %d excluded, %d skipped, %d sanitized", rep.Files, rep.Bytes,
		len(rep.Excluded), len(rep.Skipped), len(rep.Sanitized)))
	for _, l := range SnapshotReport(rep, false) { // the report `brood session new` prints
		prog.Printf("%s", l)
	}
	return sess, nil
}

// runGate computes the diff of a stopped run's session once, for the review.
func (w *Workflow) runGate(ctx context.Context, sess *session.Session) (*Gate, error) {
	w.progress().Start("diff")
	g, err := diffGate(ctx, "diff", sess)
	if err != nil {
		return nil, err
	}
	result := fmt.Sprintf("%d change(s)", len(g.Changes))
	if w.CountRefs != nil {
		if n := w.CountRefs(sess); n > 0 {
			result += fmt.Sprintf(", %d ref(s)", n)
		}
	}
	w.progress().Done(result)
	return g, nil
}

// diffGate reads sess's manifest (while the trees are walked) and computes its changes
// (op names the command in errors).
func diffGate(ctx context.Context, op string, sess *session.Session) (*Gate, error) {
	g := &Gate{Session: sess}
	load := func() (*manifest.Manifest, error) {
		m, err := manifest.Read(sess.ManifestPath())
		g.Manifest = m
		return m, err
	}
	changes, err := computeDiff(ctx, sess.Workspace, sess.SnapshotDir(), load, diff.Options{})
	if err == nil && g.Manifest == nil {
		_, err = load()
	}
	if err != nil {
		return nil, fmt.Errorf("%s session %s: %w", op, sess.ID, err)
	}
	g.Changes = changes
	return g, nil
}

// computeDiff is diff.ComputeLoad, the one diff of a session's workspace and snapshot
// (a variable so that tests count how often a run and its review compute it).
var computeDiff = diff.ComputeLoad
