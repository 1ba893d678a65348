package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"brood.dev/brood/sandbox"

	"github.com/spf13/cobra"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/gitreview"
	"brood.dev/brood/frontend/review"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/helper/api"
)

// poweroffWait is how long the guest gets to power off by itself after the SSH
// connection ends before the run asks the helper to stop it (a variable so that tests of
// the stop path need not wait for it).
var poweroffWait = frontend.DefaultPoweroffWait

// runFlags are the flags `brood run` and `brood run-image` share.
type runFlags struct {
	cpus, memory int
	image        string
	timeout      time.Duration
	keep         bool
	workspace    string
	console      bool
	noBuild      bool        // --no-build (ondemand.go)
	egress       egressFlags // --egress, --allow-host; no profile = no network device
	direct       directFlags // --workspace-mode, --yes (directmode.go)
	noSettings   bool        // --no-settings (agenthome.go)
	gitToken     bool        // --git-token (secrets.go)
	writeBack    bool        // --write-back-logins (secrets.go)
	writeBackSet bool        // --write-back-logins given, true or false (cobra's Changed)
	sshAgent     []string    // --ssh-agent KEY (sshagent.go)
}

func addRunFlags(c *cobra.Command, f *runFlags, withImage bool) {
	c.Flags().IntVar(&f.cpus, "cpus", 0, "vCPUs for the VM (0: the helper's default)")
	c.Flags().IntVar(&f.memory, "memory", 0, "guest memory in MiB (0: the helper's default)")
	if withImage {
		c.Flags().StringVar(&f.image, "image", "", "rootfs image to boot instead of the agent's default: a name (see brood image list) or REGISTRY/REPO@sha256:<hex> (brood image pull)")
	}
	c.Flags().DurationVar(&f.timeout, "timeout", 0, "stop the VM after this long, e.g. 2h (0: the helper's default)")
	c.Flags().BoolVar(&f.keep, "keep", false, "skip the review now; keep the session for brood review ID later")
	c.Flags().StringVar(&f.workspace, "workspace", ".", "workspace directory to snapshot")
	c.Flags().BoolVar(&f.console, "console", false, "print the guest console tail when the VM fails or times out")
	c.Flags().BoolVar(&f.noBuild, "no-build", false, "refuse to run when the image is not built, instead of having the helper build it")
	f.egress.register(c.Flags())
	c.Flags().StringArrayVar(&f.sshAgent, "ssh-agent", nil, "forward your SSH agent, filtered, with only this key (fingerprint SHA256:..., public key file or comment; repeat for more): it signs only logins to the session's code hosts whose keys are in your known_hosts (docs/secrets-ssh.md)")
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

An agent's VM has a network through the egress firewall with the system policy's
default_profile, else standard (--egress names another, --egress none turns it off); the
shell has none unless --egress names a profile. For an image not built yet brood asks the
helper to build it first, with progress (--no-build refuses instead). Only environment
variables matching the
agent's patterns reach the VM. Ctrl-] detaches: the VM is stopped and the review starts. The exit status is the agent's when it is not 0.`,
		Args: namedArgs(1, -1, "AGENT", "COMMAND"),
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
			ref := a.Image
			if f.image != "" {
				ref = f.image
			}
			img, err := storeImage("run", ref) // imageref.go: a digest reference maps offline
			if err != nil {
				return err
			}
			return runVM(cmd, runRequest{agent: a, argv: argv, image: img, ref: refOf(ref), flags: f, user: cfg})
		},
	}
	addRunFlags(c, &f, true)
	addDirectFlags(c, &f.direct) // directmode.go
	c.Flags().BoolVar(&f.noSettings, "no-settings", false, "do not read the agent's files from your home: neither its settings nor its login file (docs/agent-credentials.md)")
	c.Flags().BoolVar(&f.gitToken, "git-token", false, "give git in the VM a placeholder for your GitHub token, swapped outside the VM (docs/secrets.md)")
	c.Flags().BoolVar(&f.writeBack, "write-back-logins", false, "after the session, write the OAuth tokens the agent refreshed through brood back to your login file (~/.codex/auth.json, ~/.claude/.credentials.json, ...), if the file is unchanged since the run started; off: the file keeps its old tokens; also [secrets] write_back_logins = true in ~/.config/brood/config.toml, and the system policy can forbid it (forbid_login_write_back) (docs/secrets.md)")
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
	ref   string // the digest reference image stands for ("": image is a name)
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

// runVM is `brood run` and `brood run-image`: snapshot, VM, attached agent, stop, review.
func runVM(cmd *cobra.Command, r runRequest) error {
	r.flags.writeBackSet = cmd.Flags().Changed("write-back-logins")
	spec, err := r.spec(cmd.Context())
	if err != nil {
		return err
	}
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
	stdio := frontend.Stdio{In: cmd.InOrStdin(), Out: out, Err: errw,
		TTY: inIsFile && outIsFile && review.IsTerminal(inF) && review.IsTerminal(outF)}
	tail := &outputTail{} // agenthint.go: the agent's last output, for printExitHint
	if agentRun(r.agent) {
		stdio.Tail = tail
	}
	spec.Check = onDemand(ctx, errw, r, api.SocketPath(), spec.Check) // ondemand.go
	prog := newProgress(errw, errIsFile && review.IsTerminal(errF))
	wf := newWorkflow(prog)
	var gr *gitreview.Review // the run's commit review, made once by the diff step
	defer func() { gr.Close() }()
	wf.CountRefs = func(s *session.Session) int {
		if gr = gitReviewOf(s); gr == nil { // gitcli.go
			return 0
		}
		return len(gr.Refs)
	}
	warnDirect(errw, spec) // directmode.go: before anything starts
	res, err := wf.Run(ctx, spec, stdio)
	if res == nil || !res.Stopped {
		return cliErr(err)
	}
	if res.Failed {
		// The VM ended abnormally or the agent could not run: the session is kept.
		if r.flags.console && frontend.Abnormal(res.Exit) != nil && res.Exit.ConsoleTail != "" {
			printConsole(errw, res.Exit.ConsoleTail)
		}
		printLater(errw, res.Session.ID, true)
		return err
	}
	// The review gate, on the stopped VM's snapshot (diffed once by the run). Its flush
	// runs under the command's context: a signal caught for the run does not cut it.
	reviewErr := err
	if err == nil {
		reviewErr = reviewOrDirect(base, wf, res, gr, stdio, r.flags.keep, errw) // directmode.go: reviewGate unless direct
	}
	if st := res.Record.ExitStatus; st != nil && *st != 0 {
		if agentRun(r.agent) {
			printExitHint(errw, r, res, tail) // agenthint.go
		}
		err := fmt.Errorf("%s exited with status %d", describeAgent(r), *st)
		if reviewErr != nil {
			err = fmt.Errorf("%w; %w", err, reviewErr)
		}
		return &exitError{code: *st, err: err}
	}
	return reviewErr
}

// spec checks the run's flags and builds the workflow's RunSpec: the StartVM request
// with the egress inputs (the user's and the workspace's [egress] tables travel to the
// helper, which merges them tighten-only under the system policy; a malformed one stops
// the run here, and with a network so do the registries of the user's own npm, pip,
// cargo and go configuration).
func (r runRequest) spec(ctx context.Context) (frontend.RunSpec, error) {
	f := r.flags
	if err := f.checkVMFlags(); err != nil {
		return frontend.RunSpec{}, err
	}
	if !api.ValidImageName(r.image) {
		return frontend.RunSpec{}, usageErr("run: %q is not an image name", r.image)
	}
	if err := f.direct.check(); err != nil { // directmode.go
		return frontend.RunSpec{}, err
	}
	startArgs := api.StartVMArgs{Image: r.image, CPUs: f.cpus, MemoryMiB: f.memory,
		TimeoutSec: int(f.timeout / time.Second), Agent: r.agentForPolicy(), Direct: f.direct.on()}
	if err := f.egress.apply(&startArgs, agentRun(r.agent)); err != nil { // egress_default.go
		return frontend.RunSpec{}, err
	}
	user, ws, err := r.configs()
	if err != nil {
		return frontend.RunSpec{}, usageErr("run: %v", err)
	}
	in, err := newEgressInputs(ctx, user, ws, f.workspace, startArgs.Agent, &f.egress, startArgs.Egress, startArgs.Egress != "")
	if err != nil {
		return frontend.RunSpec{}, err
	}
	startArgs.SetPolicyArgs(in.args)
	if f.gitToken && (startArgs.Egress == "" || startArgs.Egress == "none") {
		return frontend.RunSpec{}, usageErr("run: --git-token needs a network (--egress): the token is swapped in only on the way to github.com")
	}
	r.user = user
	sshAgent, err := sshAgentSpec(f.sshAgent, &startArgs) // sshagent.go
	if err != nil {
		return frontend.RunSpec{}, err
	}
	home, err := r.agentHome(os.Environ()) // agenthome.go
	if err != nil {
		return frontend.RunSpec{}, usageErr("run: %v", err)
	}
	forwarded := forwardEnv(r.agent.Env, os.Environ())
	placeholders, err := r.placeholders(orBackground(ctx), os.Environ(), forwarded) // secrets.go
	if err != nil {
		return frontend.RunSpec{}, usageErr("run: %v", err)
	}
	// recipes asks the helper which images it can build, for a hint (nil: unknown).
	recipes := func() []string {
		l, err := askImages(orBackground(ctx), api.SocketPath())
		if err != nil {
			return nil
		}
		return l.Recipes
	}
	return frontend.RunSpec{
		Agent: r.agent.Name, Describe: describeAgent(r), Workspace: f.workspace, VM: startArgs,
		Command: guestCommand(r.argv), Env: home.withEnv(forwarded),
		HomeFiles: home.files, Notes: home.notes, Placeholders: placeholders, SSHAgent: sshAgent,
		WriteBackAsked: r.writeBackAsked(),
		Check:          func(caps api.Capabilities) error { return checkBootable(caps, r, f, recipes) },
		StartHint: func(err error, caps api.Capabilities) string {
			switch {
			case api.IsCode(err, api.CodeHostResources):
				return resourcesHint(caps)
			case startArgs.Egress != "" && strings.Contains(err.Error(), "egress"):
				return egressStartHint(r, startArgs.Egress) // egress_default.go
			case api.IsCode(err, api.CodeUnavailable) || strings.Contains(err.Error(), "image"):
				return imageHint(r, caps.Images, recipes())
			}
			return ""
		},
	}, nil
}

// checkVMFlags checks --cpus, --memory and --timeout against the helper's own limits
// (sandbox.MaxCPUs, MinMemoryMiB..MaxMemoryMiB, at most DefaultTimeout; 0 is the helper's
// default) before any session or snapshot exists; errors exit ExitUsage and give the range.
func (f runFlags) checkVMFlags() error {
	switch {
	case f.cpus < 0 || f.cpus > sandbox.MaxCPUs:
		return usageErr("run: --cpus %d not in 1..%d (0: the helper's default)", f.cpus, sandbox.MaxCPUs)
	case f.memory != 0 && (f.memory < sandbox.MinMemoryMiB || f.memory > sandbox.MaxMemoryMiB):
		return usageErr("run: --memory %d MiB not in %d..%d (0: the helper's default)", f.memory, sandbox.MinMemoryMiB, sandbox.MaxMemoryMiB)
	case f.timeout < 0 || f.timeout > sandbox.DefaultTimeout:
		return usageErr("run: --timeout %v not in 1s..%v (0: the helper's default)", f.timeout, sandbox.DefaultTimeout)
	case f.timeout > 0 && f.timeout < time.Second:
		return usageErr("run: --timeout %v is shorter than a second", f.timeout)
	}
	return nil
}

// checkBootable refuses a run the helper's capabilities already show cannot boot, before
// anything is snapshotted: an image the helper has not built, more vCPUs or memory than
// the host has. A helper that does not report these (nil Images, zero limits) is left
// to StartVM.
func checkBootable(caps api.Capabilities, r runRequest, f runFlags, recipes func() []string) error {
	if caps.Images != nil && !slices.Contains(caps.Images, r.image) {
		return fmt.Errorf("%w: %q%s", ErrNoImage, r.image, imageHint(r, caps.Images, recipes()))
	}
	if caps.HostCPUs > 0 && f.cpus > caps.HostCPUs {
		return usageErr("run: --cpus %d asks for more than the host has%s", f.cpus, resourcesHint(caps))
	}
	if caps.HostMemoryMiB > 0 && f.memory > caps.HostMemoryMiB {
		return usageErr("run: --memory %d MiB not in %d..%d: more than the host has%s", f.memory, sandbox.MinMemoryMiB, caps.HostMemoryMiB, resourcesHint(caps))
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
// images, recipes the names it can build (empty: unknown); a name with no recipe gets the
// recipes, not a build command. --image is suggested only to `brood run` without it (the image
// was the agent's default), never when it was given or to run-image, which has none.
func imageHint(r runRequest, built, recipes []string) string {
	var b strings.Builder
	switch {
	case len(recipes) > 0 && !slices.Contains(recipes, r.image):
		// No build command for a name the helper cannot build.
		fmt.Fprintf(&b, "\nhint: the helper has no recipe %q (recipes: %s)", r.image, strings.Join(recipes, ", "))
	default:
		fmt.Fprintf(&b, "\nhint: is the image built? %s (brood image list shows the recipes)", buildCommand(r.image))
	}
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

// reviewGate runs after the VM is gone, on the run's gate: brood review on a terminal
// (unless --keep), then the commits step as in brood review; otherwise the diff summary,
// the commits section as brood diff prints it (gitcli.go) and the commands to review
// later, on errw. gr is the session's commit review (nil: W has no repository). A ref refused in the commits section makes a refused error (exit 3), as
// brood diff does. "no changes" is said only when neither files nor refs changed (notes
// follow it).
func reviewGate(ctx context.Context, wf *frontend.Workflow, g *frontend.Gate, gr *gitreview.Review, stdio frontend.Stdio, keep bool, errw io.Writer) error {
	id := g.Session.ID
	noteNested(gr, g.Changes)
	if len(g.Changes) == 0 && !hasCommits(gr) {
		fmt.Fprintf(errw, "no changes in session %s (brood session rm %s removes it)\n", id, id)
		return writeCommits(errw, id, gr) // notes only
	}
	if stdio.TTY && !keep {
		var err error
		if len(g.Changes) > 0 {
			err = reviewInteractive(ctx, wf, g, nil, stdio.In.(*os.File), stdio.Out.(*os.File))
		}
		return applyCommitsAfter(stdio.In, stdio.Out, id, "", true, true, err) // gitcli.go
	}
	if len(g.Changes) > 0 {
		if err := writeDiffText(errw, g.Changes); err != nil {
			return err
		}
	}
	if err := writeCommits(errw, id, gr); err != nil {
		return err
	}
	printLater(errw, id, false)
	if n := gr.Blocked(); n > 0 {
		return refusedErr(fmt.Errorf("run session %s: %d ref(s) refused (brood diff %s shows why)", id, n, id))
	}
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
