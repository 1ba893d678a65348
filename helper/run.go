// Package helper is broodd-helper's daemon, brood's privileged service: a socket-activated
// RPC server (protocol in package api) that authorizes peers by SO_PEERCRED, keeps a
// session table with owners, confines itself with Landlock, and cleans up what a crashed
// predecessor left (taps, the nft table, orphaned VM runners, per-session run dirs). See
// docs/ARCHITECTURE.md "Processes and trust boundaries" and "Helper protocol", and
// docs/helper-processes.md.
//
// VMs: StartVM opens the boot artifacts from root-owned locations (artifacts_linux.go),
// writes the session initramfs with a fresh guest host key, and asks the runner spawner
// (package spawner, started before confinement because Landlock domains are inherited)
// to start `broodd-helper vm-run` (package runner) as the session owner with descriptors
// 3..8. The runner confines itself and drives the vmhost.Host's sandbox.Backend; it reports to
// the helper on a control socket and hands Attach the connected SSH channel.
//
// Privilege: root with only the unit's capability set (dropped in-process at startup
// step 2, however it was started), Landlock-confined after startup step 9 (Run). The same
// binary also runs the runner spawner (package spawner: root, unconfined), the VM runners (package
// runner: the session owner's uid, no_new_privs, Landlock) and the per-session egress
// processes (package egress, ProxyMain: the session owner's uid, no_new_privs, Landlock
// with no filesystem access) and the on-demand image builds (buildChildMain: root,
// unconfined, started by the spawner, talking to the daemon only through bounded progress
// records); they dispatch from Main's subcommand table.
package helper

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress"
	"brood.dev/brood/helper/runner"
	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/helper/vmhost"
	"brood.dev/brood/internal/hostexec"
)

// Options are the command-line settings of broodd-helper; they override the config file.
type Options struct {
	ConfigPath  string        // --config (default DefaultConfigPath)
	Listen      string        // --listen PATH: create the socket instead of socket activation
	Cleanup     bool          // --cleanup: remove stale state and exit (ExecStopPost)
	RuntimeDir  string        // --runtime-dir overrides runtime_dir
	StateDir    string        // --state-dir overrides state_dir
	IdleTimeout time.Duration // --idle-timeout overrides idle_seconds when >= 0
}

// subcommands are the subcommands of broodd-helper, the one table of them: `image`
// (image.go) and the hidden image-unpack (unpack.go: image pull's unprivileged tar
// parser), image-build (build_child.go: an on-demand build the spawner started),
// vm-spawn (package spawner, given the recipe names a build may name), vm-run (the VM
// runner) and egress-proxy (one session's DNS proxy, package egress).
var subcommands = map[string]func(args []string) int{
	ImageSubcommand:          imageMain,
	UnpackSubcommand:         unpackMain,
	spawner.BuildSubcommand:  buildChildMain,
	spawner.Subcommand:       func(args []string) int { return spawner.Main(args, recipeNames()) },
	spawner.RunnerSubcommand: runner.Main,
	egress.ProxySubcommand:   egress.ProxyMain,
}

// Main runs broodd-helper with args (without the program name) and returns the exit code:
// 0 after a clean stop or idle exit, 1 on failure, 2 on bad flags.
func Main(args []string) int {
	if len(args) > 0 {
		if sub, ok := subcommands[args[0]]; ok {
			return sub(args[1:])
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	fs := flag.NewFlagSet("broodd-helper", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: broodd-helper [flags]  (serve)\n%s\n\nflags:\n", imageUsage)
		fs.PrintDefaults()
	}
	var o Options
	fs.StringVar(&o.ConfigPath, "config", DefaultConfigPath, "helper configuration `file` (TOML)")
	fs.StringVar(&o.Listen, "listen", "", "create the socket at `path` instead of taking it from socket activation (development, tests)")
	fs.BoolVar(&o.Cleanup, "cleanup", false, "remove stale taps, the nft table and orphaned runners, then exit")
	fs.StringVar(&o.RuntimeDir, "runtime-dir", "", "override runtime_dir")
	fs.StringVar(&o.StateDir, "state-dir", "", "override state_dir")
	fs.DurationVar(&o.IdleTimeout, "idle-timeout", -1, "override idle_seconds (0: never exit)")
	showVersion := fs.Bool("version", false, "print the build version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println("broodd-helper", Version)
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "broodd-helper: unexpected arguments %q\n", fs.Args())
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM, unix.SIGINT)
	defer stop()
	if err := Run(ctx, o, log); err != nil && !errors.Is(err, ErrIdle) {
		log.Error("broodd-helper failed", "err", err)
		fmt.Fprintf(os.Stderr, "broodd-helper: %v\n", err)
		return 1
	}
	return 0
}

// Run is the helper's startup, one linear, numbered sequence (one comment per step), then
// serving until ctx ends or the idle timeout (ErrIdle).
func Run(ctx context.Context, o Options, log *slog.Logger) error {
	// 1. Validate the configuration (file, then flags).
	cfg, err := loadRunConfig(o, log)
	if err != nil {
		return err
	}

	// 2. Before any child: per-uid cgroups, capability drop, scrub of env and fds.
	cg, cgCheck, err := dropPrivileges(&cfg, o.Cleanup, log)
	if err != nil {
		return err
	}

	// 3. --cleanup: remove stale state (ExecStopPost) and stop here.
	if o.Cleanup {
		return cleanupHost(log, cfg.RuntimeDir)
	}

	// 4. Runtime and state dirs: create, lstat-check (never follow); this binary's copy.
	if err := prepareDirs(&cfg); err != nil {
		return err
	}

	// 5. Take the socket: strictly from socket activation, or --listen in development.
	ln, err := takeListener(&cfg, o.Listen)
	if err != nil {
		return err
	}
	defer ln.Close()

	// 6. Open what the helper needs before confinement: netlink, nftables, /proc.
	host, err := openHost(cfg.RuntimeDir)
	if err != nil {
		return err
	}
	defer host.Close()

	// 7. Clean up what a crashed predecessor left.
	if err := startupCleanup(host, cfg.RuntimeDir, log); err != nil {
		return err
	}

	// 7b. Egress (nft table, masquerade, uplink forwarding); nil: VMs get no network.
	eg := openEgress(&cfg, host, log)
	if eg != nil {
		defer eg.Close()
		defer eg.StopAll()
	}

	// 8. Start the runner spawner while unconfined: runners must reach the users'
	// shares, which the helper's own Landlock domain (inherited by children) excludes.
	sp, err := spawner.Start(cfg.selfCopy)
	if err != nil {
		return err
	}
	defer sp.Close()

	// 9. Confine with Landlock (irreversible; never discard errors), then probe the host.
	ll, err := Confine(&cfg, log)
	if err != nil {
		return err
	}
	caps, checks, vmh := probeHost(&cfg, ll, log)
	checks = append(checks, activationCheck(o.Listen), capabilitiesCheck(), cgCheck)

	// 10. Tell the service manager we are ready (no-op without NOTIFY_SOCKET).
	if err := notifyReady(ln, ll, log); err != nil {
		return err
	}

	// 11. Serve until stopped or idle; then release every session.
	srv := NewServer(&cfg, log, caps, checks)
	srv.EnableVMs(vmh, sp, cg)
	srv.EnableBuilds(imageBuilderFor(sp, log)) // on-demand builds, outside Landlock
	srv.EnableEgress(eg)                       // nil: VMs get no network device
	srv.firewall = hostFirewallProbe()
	err = srv.Serve(ctx, ln)
	srv.Sessions().DestroyAll()
	return err
}

// dropPrivileges makes the per-uid cgroups first (runnerCgroups: brood.slice is created
// at the cgroup2 root, a mode 0555 directory), then drops to the unit's capability set,
// however the helper was started (dropCapabilities: a root shell keeps every
// capability), then scrubs what the invoker left (scrubInherited): nothing of it reaches
// the children. It returns the cgroups (nil without) and their Doctor check.
func dropPrivileges(cfg *Config, cleanup bool, log *slog.Logger) (cgroupPlacer, api.Check, error) {
	cg, check := runnerCgroups(cfg, cleanup, log)
	if err := dropCapabilities(log); err != nil {
		return nil, check, err
	}
	return cg, check, scrubInherited()
}

// runnerCgroups returns how runners are put in per-uid cgroups (nil: not at all, and not
// for --cleanup) and its Doctor check: systemd's transient scopes when systemd is PID 1
// (systemdScopes), else the helper's own cgroupfs directories (openUserCgroups), whose
// directory it lets the helper's Landlock domain write (cfg.cgroupDir).
func runnerCgroups(cfg *Config, cleanup bool, log *slog.Logger) (cgroupPlacer, api.Check) {
	if cleanup {
		return nil, api.Check{}
	}
	if systemdBooted() {
		log.Info("per-user cgroups: systemd transient scopes in brood-user-<uid>.slice")
		return systemdScopes{}, api.Check{Name: "user cgroups", OK: true, Detail: "runners are placed in transient scopes of systemd " +
			"in brood-user-<uid>.slice, with MemoryMax and CPUQuota from the per-user quotas"}
	}
	cg, err := openUserCgroups("/")
	if err != nil {
		log.Warn("per-user cgroups unavailable: runners stay in the helper's cgroup", "err", err)
		return nil, cg.Check(err)
	}
	cfg.cgroupDir = cg.dir
	log.Info("per-user cgroups", "dir", cg.dir, "controllers", cg.controllers, "stale_removed", cg.RemoveEmpty())
	return cg, cg.Check(nil)
}

// notifyReady tells the service manager the helper is ready (sd_notify READY=1; nothing
// without NOTIFY_SOCKET) and logs it.
func notifyReady(ln *net.UnixListener, ll api.Landlock, log *slog.Logger) error {
	if _, err := daemon.SdNotify(true, daemon.SdNotifyReady); err != nil {
		return fmt.Errorf("sd_notify READY: %w", err)
	}
	log.Info("broodd-helper ready", "socket", ln.Addr().String(), "landlock", ll.Mode, "abi", ll.ABI)
	return nil
}

// prepareDirs ensures cfg's runtime and state directories (ensureDirs) and makes this
// binary's execute-only copy in the runtime directory (SelfCopy, cfg.selfCopy): the
// spawner, the runners and the egress processes are executed from it, non-dumpable
// from their execve on.
func prepareDirs(cfg *Config) error {
	if err := ensureDirs(cfg.RuntimeDir, cfg.StateDir); err != nil {
		return err
	}
	var err error
	cfg.selfCopy, err = SelfCopy(cfg.RuntimeDir)
	return err
}

// ensureDirs creates each of dirs (mode 0755) if missing and checks it (EnsureDir).
func ensureDirs(dirs ...string) error {
	for _, d := range dirs {
		if err := EnsureDir(d); err != nil {
			return err
		}
	}
	return nil
}

// openEgress opens the egress layer on host's links and nft connection, with decision
// logs under <runtime dir>/egress and egress processes executed from cfg.selfCopy;
// nil (logged) when it cannot, e.g. without a resolver.
func openEgress(cfg *Config, h *host, log *slog.Logger) *egress.Manager {
	eg, err := egress.Open(cfg.Egress, filepath.Join(cfg.RuntimeDir, "egress"), h.links, h.fw, log)
	if err != nil {
		log.Warn("egress unavailable: VMs get no network", "err", err)
		return nil
	}
	eg.ProxyExe = cfg.selfCopy
	eg.TestRoots = testSecretRoots
	return eg
}

// testSecretRoots (PEM) is the trust store of the real hosts in the egress processes of
// a helper run by its own tests (their TestMain sets it); nil in broodd-helper, which
// never sets it, and refused by any egress process that is not a test binary.
var testSecretRoots []byte

// loadRunConfig loads the helper config at o.ConfigPath, applies the flags that override
// it (runtime and state directories, idle timeout) and validates the result; it returns
// LoadConfig's or Validate's error.
func loadRunConfig(o Options, log *slog.Logger) (Config, error) {
	cfg, err := LoadConfig(o.ConfigPath)
	if err != nil {
		return Config{}, err
	}
	if o.RuntimeDir != "" {
		cfg.RuntimeDir = o.RuntimeDir
	}
	if o.StateDir != "" {
		cfg.StateDir = o.StateDir
	}
	if o.IdleTimeout >= 0 {
		cfg.IdleSeconds = int(o.IdleTimeout / time.Second)
	}
	if err := cfg.Validate(func(msg string) { log.Warn(msg) }); err != nil {
		return Config{}, err
	}
	if os.Geteuid() != 0 {
		log.Warn("not running as root: taps, nft and other uids' sessions will fail")
	}
	return cfg, nil
}

// startupCleanup removes what a crashed predecessor left: its taps, nft table and
// runners (host.cleanup) and its run directories under runtimeDir.
func startupCleanup(h *host, runtimeDir string, log *slog.Logger) error {
	rep, err := h.cleanup(log)
	if err != nil {
		return err
	}
	dirs, left, err := vmhost.CleanupRunDirs(runtimeDir)
	if err != nil {
		return err
	}
	if left != nil {
		log.Warn("run dirs left in place", "err", left)
	}
	log.Info("startup cleanup done", "taps", rep.Taps, "runners", rep.Runners, "run_dirs", dirs)
	return nil
}

// probeHost probes the confined helper's capabilities (ProbeHost) and, when QEMU was
// found, makes the execute-only copy of it that runners exec so that it stays
// non-dumpable; the "vmm not dumpable" check says whether that worked.
func probeHost(cfg *Config, ll api.Landlock, log *slog.Logger) (api.Capabilities, []api.Check, vmhost.Host) {
	caps, checks, vmh := ProbeHost(cfg, ll)
	vmh.RequireLandlock = cfg.RequireLandlock // runners enforce it too
	if vmh.VMM != "" {
		// QEMU runs from an execute-only copy so that it stays non-dumpable.
		check := api.Check{Name: "vmm not dumpable", OK: true}
		if p, err := ExecOnlyCopy(vmh.VMM, filepath.Join(cfg.RuntimeDir, vmmDir)); err != nil {
			log.Warn("VMM runs dumpable (the user could ptrace it)", "err", err)
			check.OK, check.Detail = false, err.Error()
		} else {
			vmh.VMM, check.Detail = p, "QEMU runs from the execute-only copy "+p
		}
		checks = append(checks, check)
	}
	return caps, checks, vmh
}

// takeListener returns the --listen socket (group: the first allowed gid) or the
// activated one.
func takeListener(cfg *Config, listen string) (*net.UnixListener, error) {
	if listen == "" {
		return ActivatedListener()
	}
	gid := -1
	if len(cfg.allowGIDs) > 0 {
		gid = int(cfg.allowGIDs[0])
	}
	return ListenPath(listen, gid)
}

// keptEnv are the environment variables the helper keeps: socket activation, sd_notify
// and journald plumbing. PATH is reset to safePath.
var keptEnv = []string{"LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "INVOCATION_ID", "JOURNAL_STREAM"}

// safePath is the helper's PATH (it never trusts the invoker's).
const safePath = hostexec.Path

// scrubInherited clears the environment except keptEnv and marks every inherited
// descriptor above stderr close-on-exec, so nothing leaks into runners. The activated socket is taken afterwards by name.
func scrubInherited() error {
	readTestBuildEnv() // e2eroots*.go: a no-op outside the end-to-end tests' build
	kept := map[string]string{}
	for _, k := range keptEnv {
		if v, ok := os.LookupEnv(k); ok {
			kept[k] = v
		}
	}
	os.Clearenv()
	for k, v := range kept {
		os.Setenv(k, v)
	}
	os.Setenv("PATH", safePath)
	return cloexecInherited()
}

// cleanupHost runs Cleanup against the host's links, nft table and processes, then
// removes the per-session run directories under runtimeDir.
func cleanupHost(log *slog.Logger, runtimeDir string) error {
	host, err := openHost(runtimeDir)
	if err != nil {
		return err
	}
	defer host.Close()
	rep, err := host.cleanup(log)
	dirs, left, derr := vmhost.CleanupRunDirs(runtimeDir)
	if left != nil {
		log.Warn("run dirs left in place", "err", left)
	}
	uplinks, ferr := restoreForwarding(host, runtimeDir)
	log.Info("cleanup done", "taps", rep.Taps, "runners", rep.Runners, "table_deleted", rep.Table, "run_dirs", dirs,
		"uplink_forwarding_restored", uplinks)
	return errors.Join(err, derr, ferr)
}

// restoreForwarding switches back the uplink forwarding a helper recorded under
// runtimeDir/egress and did not restore (egress.RestoreForwarding), IPv6 too when the
// kernel has per-interface IPv6 forwarding.
func restoreForwarding(h *host, runtimeDir string) ([]string, error) {
	var v6 egress.IPv6Forwarder
	if c, err := egress.OpenIPv6Conf(); err == nil {
		defer c.Close()
		v6 = c
	}
	return egress.RestoreForwarding(filepath.Join(runtimeDir, "egress"), h.links, v6)
}
