//go:build linux

package helper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"kernel.org/pub/linux/libs/security/libcap/cap"

	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/sandbox/image"
)

// buildUnitCapabilities is the capability set of every build child systemd runs for the
// helper (unitBuilder: the transient unit's CapabilityBoundingSet and
// AmbientCapabilities), recipe builds and pulls alike: buildCapabilities (mmdebstrap:
// mounts, chroot, device nodes, files of other owners, file capabilities), and what apt
// and dpkg use besides: CAP_CHOWN (file owners), CAP_FSETID (setuid and setgid bits kept
// on files of other groups), CAP_SETUID and CAP_SETGID (apt's download methods run as
// _apt; a pull's unpacker runs as nobody), CAP_KILL (signals to them). Nothing for the
// network (no CAP_NET_ADMIN, CAP_NET_RAW), no CAP_SYS_PTRACE, CAP_SYS_MODULE or
// CAP_SETPCAP. Values: linux/capability.h.
var buildUnitCapabilities = []cap.Value{cap.CHOWN, cap.DAC_OVERRIDE, cap.FOWNER, cap.FSETID, cap.KILL,
	cap.SETUID, cap.SETGID, cap.SETFCAP, cap.MKNOD, cap.SYS_CHROOT, cap.SYS_ADMIN}

// systemdUnits is the part of systemd's D-Bus API (org.freedesktop.systemd1(5)) a
// unitBuilder uses; *sddbus.Conn is the real one, tests fake it.
type systemdUnits interface {
	unitStarter
	StopUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	Close()
}

// unitBuilder starts each build child as a transient service unit of systemd's
// (StartTransientUnit, mode "fail"): a child of PID 1, not of the helper, so it gets
// buildUnitCapabilities from PID 1's full bounding set while the helper keeps only
// unitCapabilities, and its own cgroup (brood-build-<id>.service in system.slice). The
// progress pipe is its standard output (StandardOutputFileDescriptor, as
// `systemd-run --pipe` passes descriptors), which the child moves off descriptor 1 at
// once (`image-build --progress-fd 1`).
type unitBuilder struct {
	exe     string
	recipes []string // the recipe names a request may name (checked again here)
	connect func(context.Context) (systemdUnits, error)
}

// newUnitBuilder is the real unitBuilder: the helper's own executable (os.Executable,
// resolved at start; a binary replaced by an upgrade since is still named by its path,
// not " (deleted)"), the compiled recipe table, and systemd's private socket (root only;
// no D-Bus daemon needed).
func newUnitBuilder() (*unitBuilder, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("image builds in systemd units: find own executable: %w", err)
	}
	return &unitBuilder{exe: strings.TrimSuffix(exe, " (deleted)"), recipes: recipeNames(), connect: func(ctx context.Context) (systemdUnits, error) {
		return sddbus.NewSystemdConnectionContext(ctx)
	}}, nil
}

// Missing: none; systemd, not the helper, gives the child its capabilities.
func (*unitBuilder) Missing(bool) string { return "" }

// Build checks req as the spawner does (spawner.CheckBuild against the compiled recipe
// table), starts its unit (buildUnitName, buildUnitProperties) and waits for systemd's
// job. Errors name the unit.
func (u *unitBuilder) Build(req spawner.Request, progress *os.File) (buildChild, error) {
	if err := spawner.CheckBuild(req, u.recipes); err != nil {
		return buildChild{}, err
	}
	name := buildUnitName(req)
	ctx, cancel := context.WithTimeout(context.Background(), systemdCallTimeout)
	defer cancel()
	c, err := u.connect(ctx)
	if err != nil {
		return buildChild{}, fmt.Errorf("build image %s%s: connect to systemd: %w", req.Name, req.Ref, err)
	}
	defer c.Close()
	if err := startUnit(ctx, c, name, buildUnitProperties(u.exe, req, progress)); err != nil {
		return buildChild{}, fmt.Errorf("build image %s%s: %w", req.Name, req.Ref, err)
	}
	return buildChild{ID: "unit " + name, Stop: func() { u.stop(name) }}, nil
}

// stop stops unit name (StopUnit, mode "replace": systemd sends SIGTERM to its whole
// cgroup, SIGKILL after TimeoutStopSec) without waiting for the job.
func (u *unitBuilder) stop(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), systemdCallTimeout)
	defer cancel()
	if c, err := u.connect(ctx); err == nil {
		c.StopUnitContext(ctx, name, "replace", nil)
		c.Close()
	}
}

// buildUnitName is brood-build-<12 hex digits>.service: of the recipe's key for a build,
// of the reference's SHA-256 for a pull (builds run one at a time; a unit of the same
// name still there makes StartTransientUnit fail, not join it).
func buildUnitName(req spawner.Request) string {
	if r, ok := image.Recipes[req.Name]; ok && req.Ref == "" {
		if key, err := r.Key(); err == nil && len(key) >= 12 {
			return "brood-build-" + key[:12] + ".service"
		}
	}
	sum := sha256.Sum256([]byte(req.Name + req.Ref))
	return "brood-build-" + hex.EncodeToString(sum[:6]) + ".service"
}

// capMask is vs as the bit mask systemd's capability properties take (D-Bus type 't').
func capMask(vs []cap.Value) uint64 {
	var m uint64
	for _, v := range vs {
		m |= 1 << uint(v)
	}
	return m
}

// buildUnitProperties are the transient unit's properties (systemd.exec(5),
// systemd.service(5), org.freedesktop.systemd1(5)): ExecStart runs exe (never a path from
// a request) as `image-build --progress-fd 1` with spawner.BuildArgs(req); root with
// exactly buildUnitCapabilities (bounding and ambient), NoNewPrivileges, PrivateTmp,
// ProtectHome; stdout the progress pipe (type 'h'), stderr the journal (the child writes
// its output to the build log); RuntimeMaxUSec buildChildTimeout; collected when inactive
// or failed.
func buildUnitProperties(exe string, req spawner.Request, progress *os.File) []sddbus.Property {
	argv := append([]string{exe, spawner.BuildSubcommand, "--progress-fd", "1"}, spawner.BuildArgs(req)...)
	caps := capMask(buildUnitCapabilities)
	return []sddbus.Property{
		sddbus.PropDescription("brood image build " + req.Name + req.Ref),
		sddbus.PropType("exec"),
		sddbus.PropExecStart(argv, true),
		{Name: "CapabilityBoundingSet", Value: godbus.MakeVariant(caps)},
		{Name: "AmbientCapabilities", Value: godbus.MakeVariant(caps)},
		{Name: "NoNewPrivileges", Value: godbus.MakeVariant(true)},
		{Name: "PrivateTmp", Value: godbus.MakeVariant(true)},
		{Name: "ProtectHome", Value: godbus.MakeVariant("yes")},
		{Name: "StandardInput", Value: godbus.MakeVariant("null")},
		{Name: "StandardOutputFileDescriptor", Value: godbus.MakeVariant(godbus.UnixFD(progress.Fd()))},
		{Name: "StandardError", Value: godbus.MakeVariant("journal")},
		{Name: "RuntimeMaxUSec", Value: godbus.MakeVariant(uint64(buildChildTimeout.Microseconds()))},
		{Name: "CollectMode", Value: godbus.MakeVariant("inactive-or-failed")},
	}
}

// imageBuilderFor is the helper's imageBuilder: transient units of systemd's when systemd
// is PID 1 (unitBuilder), else the spawner's children (spawnerBuilder), which build only
// when the helper kept the build capabilities.
func imageBuilderFor(sp *spawner.Client, log *slog.Logger) imageBuilder {
	if systemdBooted() {
		u, err := newUnitBuilder()
		if err == nil {
			log.Info("on-demand image builds: transient systemd units brood-build-<id>.service", "exe", u.exe)
			return u
		}
		log.Warn("on-demand image builds through systemd unavailable", "err", err)
	}
	return spawnerBuilder{sp}
}
