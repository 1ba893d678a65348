package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/version"
)

// doctorTimeout bounds the whole doctor conversation with the helper.
const doctorTimeout = 10 * time.Second

func newDoctorCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check the privileged helper: socket, permissions, capabilities, confinement",
		Long: "doctor connects to broodd-helper (at " + api.DefaultSocket + ", or $" + api.SocketEnv +
			") and prints its version, capabilities, the identity it saw for you and its Landlock\n" +
			"status. Every failure is explained with a fix.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), doctorTimeout)
			defer cancel()
			return runDoctor(ctx, cmd.OutOrStdout(), api.SocketPath())
		},
	}
}

// runDoctor prints the helper's report to w. A failure is returned with a hint that says
// how to fix it.
func runDoctor(ctx context.Context, w io.Writer, socket string) error {
	fmt.Fprintf(w, "brood:          %s\n", version.String())
	fmt.Fprintf(w, "helper socket:  %s\n", socket)
	c, err := api.Dial(ctx, socket)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, helperHint(err, socket))
	}
	defer c.Close()
	caps := c.Caps
	fmt.Fprintf(w, "helper:         %s (protocol %d)\n", caps.Helper, caps.Version)
	fmt.Fprintf(w, "you are:        uid %d gid %d pid %d (as seen by the helper via SO_PEERCRED)\n", caps.Peer.UID, caps.Peer.GID, caps.Peer.PID)
	if uint32(os.Getuid()) != caps.Peer.UID {
		fmt.Fprintf(w, "  WARNING: the helper saw uid %d but this process runs as uid %d\n", caps.Peer.UID, os.Getuid())
	}
	backends := strings.Join(caps.Backends, ", ")
	if backends == "" {
		backends = "none"
	}
	fmt.Fprintf(w, "backends:       %s (accel %s)\n", backends, caps.Accel)
	ll := caps.Landlock
	fmt.Fprintf(w, "landlock:       %s (kernel ABI %d, pinned ABI %d)", ll.Mode, ll.ABI, ll.PinnedABI)
	if ll.Detail != "" {
		fmt.Fprintf(w, ": %s", ll.Detail)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "policy digest:  %s\n", caps.Policy)
	rep, err := c.Doctor(ctx)
	if err != nil {
		return fmt.Errorf("doctor: %w\n%s", err, helperHint(err, socket))
	}
	failed := 0
	for _, ch := range append([]api.Check{versionCheck(version.String(), caps.Helper)}, rep.Checks...) {
		mark := "ok  "
		switch {
		case !ch.OK:
			mark = "FAIL"
			failed++
		case ch.Warn:
			mark = "warn"
		}
		fmt.Fprintf(w, "  [%s] %-17s %s\n", mark, ch.Name, ch.Detail)
	}
	if failed > 0 {
		return fmt.Errorf("doctor: %d check(s) failed: %w (see above)", failed, ErrDoctorFailed)
	}
	return nil
}

// versionCheck compares this brood's build version (internal/version) with the one the
// helper reported in Hello. A difference is a warning, not a failure: the protocol
// version already matched, but a stale binary (an old copy earlier in PATH, or a helper
// started before the package was upgraded) is the usual cause.
func versionCheck(client, helper string) api.Check {
	if client == helper {
		return api.Check{Name: "version", OK: true, Detail: "brood and broodd-helper are both " + client}
	}
	return api.Check{Name: "version", OK: true, Warn: true, Detail: fmt.Sprintf(
		"brood is %s but broodd-helper is %s: one of them is stale (an old copy earlier in PATH, "+
			"or a helper started before an upgrade); check `command -v brood broodd-helper` and restart the helper", client, helper)}
}

// systemdRunDir exists when systemd is the init system (sd_booted(3)).
const systemdRunDir = "/run/systemd/system"

// systemdBooted reports whether systemd is PID 1 (sd_booted(3): systemdRunDir exists);
// a variable for tests.
var systemdBooted = func() bool {
	fi, err := os.Stat(systemdRunDir)
	return err == nil && fi.IsDir()
}

// helperHint turns a helper connection error into advice (the only place that gives it).
func helperHint(err error, socket string) string {
	group := "brood"
	name := "$USER"
	if u, uerr := user.Current(); uerr == nil {
		name = u.Username
	}
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ECONNREFUSED):
		switch {
		case runtime.GOOS == "darwin":
			return fmt.Sprintf("hint: the helper is not listening at %s. Load its launchd job:\n"+
				"  sudo launchctl bootstrap system /Library/LaunchDaemons/dev.brood.helper.plist\n"+
				"(development: broodd-helper --listen PATH and %s=PATH)", socket, api.SocketEnv)
		case systemdBooted():
			return fmt.Sprintf("hint: the helper is not listening at %s. Enable its socket unit:\n"+
				"  sudo systemctl enable --now broodd-helper.socket\n"+
				"(development: broodd-helper --listen PATH and %s=PATH)", socket, api.SocketEnv)
		}
		// No systemd as PID 1 (a container, WSL without systemd): install.sh starts the
		// helper in the background, which does not survive a reboot or a crash.
		return fmt.Sprintf("hint: the helper is not listening at %s, and this system does not run systemd\n"+
			"(no %s), so nothing starts it on demand. Start it again with\n"+
			"  sudo ./scripts/install.sh\n"+
			"or directly: sudo broodd-helper --listen %s &", socket, systemdRunDir, socket)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), api.IsCode(err, api.CodePermissionDenied):
		return fmt.Sprintf("hint: you may not use the helper. Join the group %q and log in again:\n"+
			"  sudo usermod -aG %s %s", group, group, name)
	case api.IsCode(err, api.CodeVersionMismatch):
		return "hint: brood and broodd-helper are different versions; reinstall both from the same package"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "hint: the helper did not answer in time; see: journalctl -u broodd-helper.service"
	}
	return "hint: see the helper's log: journalctl -u broodd-helper.service"
}
