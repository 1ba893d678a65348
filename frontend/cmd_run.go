package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/review"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/frontend/snapshot"
	"brood.dev/brood/frontend/sshclient"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/guestcfg"
)

func init() { commands = append(commands, newRunCommand, newRunImageCommand) }

// Timing of a VM session.
const (
	// stopWait bounds StopVM plus the WaitVM that confirms the VMM is gone.
	stopWait = 60 * time.Second
	// maxHandshake bounds boot plus SSH handshake when the VM has a longer lifetime;
	// a TCG boot takes ~2 s on a 2-core host, so minutes mean the guest is stuck.
	maxHandshake = 3 * time.Minute
	// waitSlack is added to the VM's lifetime for the WaitVM call's deadline.
	waitSlack = 5 * time.Minute
	// lifetimeGrace: with --timeout, the frontend itself stops the VM this long after
	// the timeout when the helper has not reported it gone by then.
	lifetimeGrace = 10 * time.Second
	// vmGoneGrace is how long the SSH session may outlive the VMM before it is cut.
	vmGoneGrace = 3 * time.Second
	// defaultLifetime is the WaitVM deadline base when --timeout is not given (the
	// helper's own default applies to the VM).
	defaultLifetime = 24 * time.Hour
)

// poweroffWait is how long the guest gets to power off by itself after the SSH
// connection ends before the frontend asks the helper to stop it (a variable so that
// tests of the stop path need not wait for it).
var poweroffWait = 15 * time.Second

// Files the run writes into the session directory.
const (
	vmRecordFile = "vm.json"     // vmRecord: how the VM ended, timings
	consoleFile  = "console.log" // the guest console tail (raw bytes as the helper sent them)
)

// runFlags are the flags `brood run` and `brood run-image` share.
type runFlags struct {
	cpus, memory int
	image        string
	timeout      time.Duration
	keep         bool
	workspace    string
	console      bool
	egress       egressFlags // --egress, --allow-host; no profile = no network device
	direct       directFlags // --workspace-mode, --yes (directmode.go)
}

func addRunFlags(c *cobra.Command, f *runFlags, withImage bool) {
	c.Flags().IntVar(&f.cpus, "cpus", 0, "vCPUs for the VM (0: the helper's default)")
	c.Flags().IntVar(&f.memory, "memory", 0, "guest memory in MiB (0: the helper's default)")
	if withImage {
		c.Flags().StringVar(&f.image, "image", "", "rootfs image to boot instead of the agent's default (see brood image list)")
	}
	c.Flags().DurationVar(&f.timeout, "timeout", 0, "stop the VM after this long, e.g. 2h (0: the helper's default)")
	c.Flags().BoolVar(&f.keep, "keep", false, "skip the review now; keep the session for brood review ID later")
	c.Flags().StringVar(&f.workspace, "workspace", ".", "workspace directory to snapshot")
	c.Flags().BoolVar(&f.console, "console", false, "print the guest console tail when the VM fails or times out")
	f.egress.register(c.Flags())
}

func newRunCommand() *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run [flags] AGENT [-- ARGS...]",
		Short: "Run an agent in a microVM on a snapshot of the workspace, then review its changes",
		Long: `Snapshot the workspace, boot a microVM that sees only the snapshot (at /workspace),
run AGENT in it on your terminal, and when it exits stop the VM and review the changes
(brood review). Without a terminal the diff summary and the commands to review later
are printed instead; the session is always kept until you remove it.

Agents: claude-code, codex, opencode, gemini, hermes, shell (a login shell), and custom
agents from $XDG_CONFIG_HOME/brood/config.toml:

  [agents.aider]
  image = "codex"
  command = ["aider", "--yes"]
  env = ["OPENAI_API_KEY", "AIDER_*"]

Only environment variables matching the agent's patterns reach the VM. Ctrl-] detaches:
the VM is stopped and the review starts. The exit status is the agent's when it is not 0.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash == 0 {
				return usageErr("run: name the agent before --")
			}
			if dash < 0 && len(args) > 1 {
				return usageErr("run: put the agent's arguments after --: brood run %s -- %s", args[0], strings.Join(args[1:], " "))
			}
			cfgPath, err := userConfigPath()
			if err != nil {
				return err
			}
			cfg, err := loadUserConfig(cfgPath)
			if err != nil {
				return usageErr("run: %v", err)
			}
			a, err := resolveAgent(args[0], cfg, cfgPath)
			if err != nil {
				return usageErr("run: %v", err)
			}
			argv := append(append([]string(nil), a.Command...), args[1:]...)
			if len(a.Command) == 0 && len(args) > 1 {
				argv = args[1:] // shell -- CMD: run CMD instead of the login shell
			}
			img := a.Image
			if f.image != "" {
				img = f.image
			}
			return runVM(cmd, runRequest{agent: a, argv: argv, image: img, flags: f, user: cfg})
		},
	}
	addRunFlags(c, &f, true)
	addDirectFlags(c, &f.direct) // directmode.go
	return c
}

func newRunImageCommand() *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run-image IMAGE [flags] -- CMD...",
		Short: "Run one command in a microVM booted from IMAGE, then review its changes",
		Long: `Snapshot the workspace, boot a microVM from IMAGE, run CMD in /workspace and stop the
VM. When stdin is not a terminal CMD runs without a PTY: its stdout and stderr are
streamed, stdin is passed through, and its exit status is brood's. No environment
variable is forwarded. The review gate still applies: on a terminal brood review runs,
otherwise the diff summary and the commands to review or apply are printed on stderr.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return usageErr("run-image: usage: brood run-image IMAGE [flags] -- CMD...")
			}
			if !api.ValidImageName(args[0]) {
				return usageErr("run-image: %q is not an image name (see brood image list)", args[0])
			}
			a := Agent{Name: "run-image", Image: args[0], Command: args[1:], Source: "command line"}
			return runVM(cmd, runRequest{agent: a, argv: args[1:], image: args[0], flags: f})
		},
	}
	addRunFlags(c, &f, false)
	return c
}

// agentForPolicy names the agent for the helper's egress table (its LLM provider's
// hosts): built-in agents only; a custom agent or run-image gets the profile alone.
func (r runRequest) agentForPolicy() string {
	if r.agent.Source == "built-in" && len(r.agent.Command) > 0 {
		return r.agent.Name
	}
	return ""
}

// runRequest is one resolved `brood run` / `brood run-image`.
type runRequest struct {
	agent Agent
	argv  []string // the guest command; empty: a login shell
	image string
	flags runFlags
	user  *userConfig // the user config as read by the command; nil: not read yet
}

// configs returns the user config (r.user, else read now) and the workspace's
// .brood.toml, each read once per run.
func (r runRequest) configs() (*userConfig, *workspaceConfig, error) {
	user := r.user
	if user == nil {
		path, err := userConfigPath()
		if err != nil {
			return nil, nil, err
		}
		if user, err = loadUserConfig(path); err != nil {
			return nil, nil, err
		}
	}
	ws, err := loadWorkspaceConfig(r.flags.workspace)
	if err != nil {
		return nil, nil, err
	}
	return user, ws, nil
}

// vmRecord is vm.json in the session directory.
type vmRecord struct {
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
}

// vmWaiter watches the VM on its own helper connection (api.Client is not safe for
// concurrent use) so the frontend learns at once when the VMM is gone.
type vmWaiter struct {
	done chan struct{}
	exit api.VMExit
	err  error
}

// startWaiter calls WaitVM on a connection of its own; when that connection breaks
// before the answer (the helper closed it), it redials and waits once more.
func startWaiter(socket, id string, lifetime time.Duration) (*vmWaiter, error) {
	hc, err := dialHelper(context.Background(), socket)
	if err != nil {
		return nil, err
	}
	w := &vmWaiter{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer hc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), lifetime+waitSlack)
		defer cancel()
		w.err = hc.do(ctx, func(c *api.Client) (err error) {
			w.exit, err = c.WaitVM(ctx, id)
			return err
		})
	}()
	return w, nil
}

// helperConn is a helper connection that survives being closed under it: a call that
// fails because the connection broke (not with a helper *api.Error) is retried once on
// a new connection. Calls that matter after a long wait (Attach, StopVM, WaitVM,
// DestroySession) go through it: without it a VM was orphaned when StopVM met a
// connection the helper had closed during a slow boot.
type helperConn struct {
	socket string
	c      *api.Client
}

// dialHelper connects to the helper at socket (bounded by 30 s when ctx has no deadline).
func dialHelper(ctx context.Context, socket string) (*helperConn, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, api.DefaultCallTimeout)
		defer cancel()
	}
	c, err := api.Dial(ctx, socket)
	if err != nil {
		return nil, err
	}
	return &helperConn{socket: socket, c: c}, nil
}

// do runs call on the connection, and once more on a fresh one when the connection broke.
func (h *helperConn) do(ctx context.Context, call func(*api.Client) error) error {
	err := call(h.c)
	if err == nil || !connBroken(ctx, err) {
		return err
	}
	nh, derr := dialHelper(ctx, h.socket)
	if derr != nil {
		return fmt.Errorf("%w (and reconnecting failed: %v)", err, derr)
	}
	h.c.Close()
	h.c = nh.c
	return call(h.c)
}

// Close closes the current connection.
func (h *helperConn) Close() error { return h.c.Close() }

// connBroken reports whether err is the connection failing (EOF, EPIPE, ECONNRESET, a
// closed socket) rather than the helper's answer or the caller's own cancellation.
func connBroken(ctx context.Context, err error) bool {
	var e *api.Error
	return !errors.As(err, &e) && ctx.Err() == nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// gone reports whether the waiter saw the VMM exit within d.
func (w *vmWaiter) gone(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.done:
		return w.err == nil
	case <-t.C:
		return false
	}
}

// runVM is `brood run` and `brood run-image`: snapshot, VM, attached agent, stop, review.
func runVM(cmd *cobra.Command, r runRequest) (err error) {
	total := time.Now()
	f := r.flags
	if f.cpus < 0 || f.memory < 0 || f.timeout < 0 {
		return usageErr("run: --cpus, --memory and --timeout cannot be negative")
	}
	if f.timeout > 0 && f.timeout < time.Second {
		return usageErr("run: --timeout %v is shorter than a second", f.timeout)
	}
	if !api.ValidImageName(r.image) {
		return usageErr("run: %q is not an image name", r.image)
	}
	if err := f.direct.check(); err != nil { // directmode.go
		return err
	}
	startArgs := api.StartVMArgs{Image: r.image, CPUs: f.cpus, MemoryMiB: f.memory,
		TimeoutSec: int(f.timeout / time.Second), Agent: r.agentForPolicy(), Direct: f.direct.on()}
	if err := f.egress.apply(&startArgs); err != nil {
		return err
	}
	// The user's and the workspace's [egress] tables travel to the helper, which merges
	// them tighten-only under the system policy; a malformed one stops the run here. With
	// a network, so do the registries of the user's own npm/pip/cargo/go configuration.
	user, ws, err := r.configs()
	if err != nil {
		return usageErr("run: %v", err)
	}
	in, err := newEgressInputs(cmd.Context(), user, ws, f.workspace, startArgs.Agent, &f.egress, startArgs.Egress != "")
	if err != nil {
		return err
	}
	startArgs.SetPolicyArgs(in.args)
	base := cmd.Context()
	if base == nil {
		base = context.Background()
	}
	// SIGINT/SIGTERM/SIGHUP cancel the run; the VM is then stopped and the session kept.
	ctx, stopSignals := signal.NotifyContext(base, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stopSignals()

	out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
	inF, inIsFile := cmd.InOrStdin().(*os.File)
	outF, outIsFile := out.(*os.File)
	errF, errIsFile := errw.(*os.File)
	tty := inIsFile && outIsFile && review.IsTerminal(inF) && review.IsTerminal(outF)
	prog := newProgress(errw, errIsFile && review.IsTerminal(errF))
	defer func() {
		if err != nil {
			prog.Fail("")
		}
	}()

	// 1. The helper: fail before snapshotting when it is not there.
	socket := api.SocketPath()
	prog.Start("connect to helper")
	h, err := dialHelper(ctx, socket)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, helperHint(err, socket))
	}
	defer h.Close()
	hc := h.c
	prog.Done(string(hc.Caps.Accel))
	// What the helper can tell before anything is snapshotted: the image and the sizes.
	if err := checkBootable(hc.Caps, r, f); err != nil {
		return err
	}

	// 2. The snapshot S, in a new session directory.
	sess, err := sessionFor(ctx, prog, r.flags, r.agent.Name, errw) // directmode.go: takeSnapshot unless direct
	if err != nil {
		return err
	}

	// 3. The helper's session on the snapshot share.
	share, err := api.OpenShare(shareDir(sess)) // directmode.go
	if err != nil {
		return fmt.Errorf("run session %s: %w", sess.ID, err)
	}
	hs, err := hc.CreateSession(ctx, share)
	share.Close()
	if err != nil {
		return fmt.Errorf("run session %s: create helper session: %w", sess.ID, err)
	}
	destroy := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Best effort: the helper also destroys it when this connection ends.
		_ = h.do(dctx, func(c *api.Client) error { return c.DestroySession(dctx, hs.ID) })
	}
	rec := vmRecord{HelperSession: hs.ID, Agent: r.agent.Name, Image: r.image}

	// 4. Boot: an ephemeral client key, StartVM, the pinned host key.
	signer, pub, err := sshclient.NewKey()
	if err != nil {
		destroy()
		return err
	}
	prog.Start(fmt.Sprintf("start VM (image %s)", r.image))
	bootStart := time.Now()
	startArgs.ID, startArgs.ClientKey, startArgs.Clock = hs.ID, pub, time.Now().Unix()
	info, err := hc.StartVM(ctx, startArgs)
	if err != nil {
		destroy()
		hint := ""
		switch {
		case api.IsCode(err, api.CodeHostResources):
			hint = resourcesHint(hc.Caps)
		case api.IsCode(err, api.CodeUnavailable) || strings.Contains(err.Error(), "image"):
			hint = imageHint(r, hc.Caps.Images)
		}
		return fmt.Errorf("run session %s: start VM: %w%s\nthe snapshot is kept: brood session rm %s removes it", sess.ID, err, hint, sess.ID)
	}
	rec.Accel, rec.Backend, rec.Network = info.Accel, info.Backend, info.Egress
	prog.Done(info.Backend + ", " + string(info.Accel))
	// The helper session id lets later commands ask whether this VM still runs.
	sess.HelperSession = hs.ID
	if err := sess.SetState(session.StateRunning); err != nil {
		prog.Warn("%v", err)
	}
	if info.Warning != "" {
		prog.Warn("%s", diff.Escape(strings.TrimPrefix(info.Warning, "WARNING: ")))
	}
	if e := info.Egress; e != nil {
		prog.Printf("network: profile %s, guest %s, %d allowed host entr(ies), policy %s (brood policy show prints it)",
			diff.Escape(e.Profile), diff.Escape(e.GuestV4), len(e.Hosts), diff.Escape(e.Digest))
		if e.Warning != "" {
			prog.Warn("egress: %s", diff.Escape(e.Warning))
		}
	} else {
		prog.Printf("network: none (the VM has no network device)")
	}
	prog.Start("boot")
	lifetime := defaultLifetime
	if f.timeout > 0 {
		lifetime = f.timeout
	}
	waiter, werr := startWaiter(socket, hs.ID, lifetime)

	// From here on the VM is running: every path stops it and waits for it to be gone
	// before the snapshot is looked at (the guest must not change S while it is diffed).
	vm := &vmSession{r: r, hc: h, id: hs.ID, sess: sess, waiter: waiter, prog: prog, rec: &rec, bootStart: bootStart}
	var runErr error
	if werr != nil {
		runErr = fmt.Errorf("watch VM: %w", werr)
	} else {
		runErr = vm.attachAndRun(ctx, info, signer, tty, inF, outF, cmd.InOrStdin(), out, errw)
	}
	if runErr != nil && !errors.Is(runErr, ErrDetached) {
		prog.Fail("") // the step that was running (boot, when the handshake failed)
	}
	if errors.Is(runErr, ErrDetached) {
		prog.Printf("detached (Ctrl-]): stopping the VM; %s may not have finished", describeAgent(r))
	}
	goneErr := vm.stop()
	destroy()
	if goneErr != nil {
		// The VMM may still run: no diff, and the session stays "running".
		return errors.Join(runErr, goneErr)
	}
	if err := sess.SetState(session.StateStopped); err != nil {
		return err
	}
	rec.TotalSeconds = time.Since(total).Seconds()
	vm.save()

	// 5. How it ended.
	abnormal := vm.abnormal()
	if abnormal != nil {
		if f.console && vm.exit.ConsoleTail != "" {
			printConsole(errw, vm.exit.ConsoleTail)
		}
		if runErr != nil {
			abnormal = fmt.Errorf("%w (%v)", abnormal, runErr)
		}
		printLater(errw, sess.ID, true)
		return fmt.Errorf("run session %s: %w", sess.ID, abnormal)
	}
	if runErr != nil && !errors.Is(runErr, ErrDetached) {
		printLater(errw, sess.ID, true)
		return fmt.Errorf("run session %s: %w", sess.ID, runErr)
	}

	// 6. The review gate, on the stopped VM's snapshot.
	reviewErr := reviewOrDirect(vm, cmd, tty, errw) // directmode.go
	if rec.ExitStatus != nil && *rec.ExitStatus != 0 {
		err := fmt.Errorf("%s exited with status %d", describeAgent(r), *rec.ExitStatus)
		if reviewErr != nil {
			err = fmt.Errorf("%w; %w", err, reviewErr)
		}
		return &exitError{code: *rec.ExitStatus, err: err}
	}
	return reviewErr
}

// checkBootable refuses a run the helper's capabilities already show cannot boot, before
// anything is snapshotted: an image the helper has not built, more vCPUs or memory than
// the host has. A helper that does not report these (nil Images, zero limits) is left
// to StartVM.
func checkBootable(caps api.Capabilities, r runRequest, f runFlags) error {
	if caps.Images != nil && !slices.Contains(caps.Images, r.image) {
		return fmt.Errorf("%w: %q%s", ErrNoImage, r.image, imageHint(r, caps.Images))
	}
	if caps.HostCPUs > 0 && f.cpus > caps.HostCPUs {
		return usageErr("run: --cpus %d asks for more than the host has%s", f.cpus, resourcesHint(caps))
	}
	if caps.HostMemoryMiB > 0 && f.memory > caps.HostMemoryMiB {
		return usageErr("run: --memory %d asks for more than the host has%s", f.memory, resourcesHint(caps))
	}
	return nil
}

// resourcesHint says what the host allows (StartVM's api.CodeHostResources).
func resourcesHint(caps api.Capabilities) string {
	if caps.HostCPUs == 0 {
		return "\nhint: lower --cpus and --memory (0 takes the helper's defaults)"
	}
	return fmt.Sprintf("\nhint: this host has %d CPU(s) and %d MiB of memory: pass --cpus 1..%d and --memory up to %d\n"+
		"(a VM with more vCPUs than host CPUs boots very slowly; 0 takes the helper's defaults)",
		caps.HostCPUs, caps.HostMemoryMiB, caps.HostCPUs, caps.HostMemoryMiB)
}

// imageHint says how to get the image r cannot boot. built lists the helper's built
// images (nil: unknown). --image is suggested only to `brood run` without it (the image
// was the agent's default), never when it was given or to run-image, which has none.
func imageHint(r runRequest, built []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nhint: is the image built? %s (brood image list shows the recipes)", buildCommand(r.image))
	switch {
	case built == nil:
		b.WriteString("\nbrood image list shows the built images")
	case len(built) == 0:
		b.WriteString("\nno image is built yet (brood image list)")
	default:
		fmt.Fprintf(&b, "\nbuilt images: %s", strings.Join(built, ", "))
	}
	if r.agent.Name != "run-image" && r.flags.image == "" {
		b.WriteString("\nor pass --image NAME of a built image, or define the agent with its image in the user config (brood run --help)")
	}
	return b.String()
}

func describeAgent(r runRequest) string {
	if r.agent.Name == "run-image" {
		return "the command"
	}
	return "agent " + r.agent.Name
}

// takeSnapshot creates the session directory and the snapshot of workspace in it (the
// code path of `brood session new`), printing the session id first.
func takeSnapshot(ctx context.Context, prog *progress, workspace, agent string) (*session.Session, error) {
	fi, err := os.Stat(workspace)
	if err != nil {
		return nil, usageErr("run: workspace: %v", err)
	}
	if !fi.IsDir() {
		return nil, usageErr("run: workspace %q is not a directory", workspace)
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
	m, rep, err := snapshot.Take(ctx, sess.Workspace, sess.SnapshotDir(), snapshot.Options{BaseDir: sess.BaseDir(), SkipDirs: stateDirs()})
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
	for _, l := range snapshotReport(rep, false) { // the report `brood session new` prints
		prog.Printf("%s", l)
	}
	return sess, nil
}

// vmSession is one running VM of a run.
type vmSession struct {
	r         runRequest
	hc        *helperConn
	id        string // helper session id
	sess      *session.Session
	waiter    *vmWaiter
	prog      *progress
	rec       *vmRecord
	bootStart time.Time
	exit      api.VMExit
	detached  bool
	// overLifetime: the frontend gave up on the VM lifetimeGrace after --timeout.
	overLifetime bool
}

// attachAndRun connects over SSH and runs the agent until it exits, the developer
// detaches (ErrDetached), the VM ends, or ctx is cancelled.
func (v *vmSession) attachAndRun(ctx context.Context, info api.VMInfo, signer ssh.Signer, tty bool,
	inF, outF *os.File, in io.Reader, out, errw io.Writer) error {
	hostKey, err := sshclient.ParseHostKey(info.HostKey)
	if err != nil {
		return err
	}
	// The run ends early when the VMM goes away under it, and at the latest
	// lifetimeGrace after --timeout even if the helper has not stopped the VM yet.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if t := v.r.flags.timeout; t > 0 {
		var c2 context.CancelFunc
		runCtx, c2 = context.WithTimeout(runCtx, t+lifetimeGrace)
		defer c2()
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
	var f *os.File
	err = v.hc.do(runCtx, func(c *api.Client) (err error) {
		f, err = c.Attach(runCtx, v.id)
		return err
	})
	if err != nil {
		return fmt.Errorf("attach to VM: %w", err)
	}
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("attach to VM: %w", err)
	}
	hsTimeout := maxHandshake
	if t := v.r.flags.timeout; t > 0 && t < hsTimeout {
		hsTimeout = t
	}
	hctx, hcancel := context.WithTimeout(runCtx, hsTimeout)
	client, err := sshclient.Handshake(hctx, nc, guestcfg.DefaultUser, signer, hostKey, hsTimeout)
	hcancel()
	if err != nil {
		return fmt.Errorf("connect to guest: %w", err)
	}
	defer client.Close()
	boot := time.Since(v.bootStart)
	v.rec.BootSeconds = boot.Seconds()
	v.prog.Done(fmt.Sprintf("%s, boot to prompt %s", info.Accel, boot.Round(time.Millisecond)))

	o := sshclient.Options{Command: guestCommand(v.r.argv), Env: forwardEnv(v.r.agent.Env, os.Environ())}
	for _, kv := range o.Env {
		v.prog.Printf("forwarding $%s", kv[0])
	}
	var inp *input
	if inF != nil {
		if inp, err = openInput(inF); err != nil {
			return err
		}
		defer inp.Close()
		o.Stdin = inp
	} else {
		o.Stdin = in
	}
	if tty {
		v.prog.Printf("attached to %s; Ctrl-] detaches and stops the VM", describeAgent(v.r))
		t, err := attachTerminal(inF, outF)
		if err != nil {
			return err
		}
		defer t.Close()
		o.PTY, o.Term, o.Size, o.Resize = true, os.Getenv("TERM"), t.Size(), t.Resize
		o.Stdin = &escapeReader{r: inp, onDetach: func() { v.detached = true; cancel() }}
		o.Stdout, o.Stderr = outF, outF
	} else {
		o.Stdout, o.Stderr = out, errw
	}
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

// stop makes sure the VM is gone: it waits poweroffWait for the guest to power off by
// itself (it does when the SSH connection ends), then asks the helper to stop it. It
// returns an error only when it cannot confirm that the VMM is gone.
func (v *vmSession) stop() error {
	v.prog.Start("stop VM")
	exit := api.VMExit{Outcome: api.OutcomeStopped} // StopVM returned: the VMM is gone
	if v.waiter != nil && v.waiter.gone(poweroffWait) {
		exit = v.waiter.exit
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), stopWait)
		defer cancel()
		err := v.hc.do(ctx, func(c *api.Client) error { return c.StopVM(ctx, v.id) })
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
		v.prog.Printf("network: %d name(s) allowed, %d refused, %d address(es) pinned (details: %s in the session dir)",
			len(e.Allowed), len(e.Refused), len(e.Pinned), vmRecordFile)
	}
	v.rec.VMSeconds = time.Since(v.bootStart).Seconds()
	v.prog.Done(string(exit.Outcome))
	return nil
}

// abnormal returns an error wrapping ErrVMOutcome when the VM timed out or failed, or
// was stopped while the agent had not finished and the developer did not detach.
func (v *vmSession) abnormal() error {
	e := v.exit
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
func (v *vmSession) save() {
	if v.exit.ConsoleTail != "" {
		p := filepath.Join(v.sess.Dir, consoleFile)
		if err := os.WriteFile(p, []byte(v.exit.ConsoleTail), 0o600); err == nil {
			v.rec.Console = p
		}
	}
	b, err := json.MarshalIndent(v.rec, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(v.sess.Dir, vmRecordFile), append(b, '\n'), 0o600)
	}
	if err != nil {
		v.prog.Warn("save %s: %v", vmRecordFile, err)
	}
	if v.abnormal() != nil && v.rec.Console != "" {
		v.prog.Printf("guest console tail saved in %s (--console prints it)", diff.Escape(v.rec.Console))
	}
}

// reviewGate runs after the VM is gone: brood review on a terminal (unless --keep),
// otherwise the diff summary and the commands to review later, on errw.
func (v *vmSession) reviewGate(cmd *cobra.Command, tty bool, errw io.Writer) error {
	ctx := context.Background()
	v.prog.Start("diff")
	changes, err := diff.ComputeLoad(ctx, v.sess.Workspace, v.sess.SnapshotDir(),
		func() (*manifest.Manifest, error) { return manifest.Read(v.sess.ManifestPath()) }, diff.Options{})
	if err != nil {
		return fmt.Errorf("diff session %s: %w", v.sess.ID, err)
	}
	v.prog.Done(fmt.Sprintf("%d change(s)", len(changes)))
	if len(changes) == 0 {
		fmt.Fprintf(errw, "no changes in session %s (brood session rm %s removes it)\n", v.sess.ID, v.sess.ID)
		return nil
	}
	if tty && !v.r.flags.keep {
		return runReview(cmd, v.sess.ID, nil, reviewFlags{})
	}
	if err := writeDiffText(errw, changes); err != nil {
		return err
	}
	printLater(errw, v.sess.ID, false)
	return nil
}

// printConsole prints the guest console tail line by line, each line escaped (it is
// guest output: no terminal control may reach the developer's terminal).
func printConsole(w io.Writer, tail string) {
	var b strings.Builder
	fmt.Fprintf(&b, "--- guest console (last %d bytes, escaped) ---\n", len(tail))
	for _, l := range strings.Split(strings.TrimRight(tail, "\r\n"), "\n") {
		b.WriteString(review.EscapeLine(strings.TrimRight(l, "\r")))
		b.WriteByte('\n')
	}
	b.WriteString("--- end of console ---\n")
	io.WriteString(w, b.String())
}

// printLater prints the commands that review, apply or discard the session.
func printLater(w io.Writer, id string, failed bool) {
	if failed {
		fmt.Fprintf(w, "the session is kept: brood session list shows it\n")
	}
	fmt.Fprintf(w, "review:  brood review %s\n", id)
	fmt.Fprintf(w, "apply:   brood apply %s --all --yes\n", id)
	fmt.Fprintf(w, "diff:    brood diff %s\n", id)
	fmt.Fprintf(w, "discard: brood session rm %s\n", id)
}
