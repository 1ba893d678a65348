//go:build linux

package helper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// systemdScopes places each VM runner in a transient scope unit of systemd's, in the
// per-uid slice brood-user-<uid>.slice (cgroup path
// /brood.slice/brood-user.slice/brood-user-<uid>.slice: systemd nests slices by the
// dashes of their names), whose MemoryMax and CPUQuota come from the uid's quota. It is
// used whenever systemd is PID 1: the cgroup tree is then systemd's (the packaged unit
// even mounts it read-only for the helper, ProtectControlGroups=yes), so the helper asks
// systemd over its private socket (/run/systemd/private, root only; no D-Bus daemon
// needed) instead of writing cgroupfs. A scope ends by itself when its processes have
// exited; the slice stays, with its limits, until the next boot.
type systemdScopes struct{}

// systemdBooted reports whether systemd is PID 1 (sd_booted(3): /run/systemd/system
// exists).
func systemdBooted() bool {
	fi, err := os.Stat("/run/systemd/system")
	return err == nil && fi.IsDir()
}

// systemdCallTimeout bounds one placement's calls to systemd.
const systemdCallTimeout = 20 * time.Second

// userSliceName is the per-uid slice unit.
func userSliceName(uid uint32) string { return fmt.Sprintf("brood-user-%d.slice", uid) }

// sliceProperties are the slice's limits for q: MemoryMax in bytes (memoryMax) and
// CPUQuotaPerSecUSec, CPU time per second in µs (systemd.resource-control(5):
// CPUQuota=, here vCPUs × 100%); unlimited quotas set "infinity" (the maximum uint64).
func sliceProperties(q userQuota) []sddbus.Property {
	mem, cpu := uint64(1<<64-1), uint64(1<<64-1)
	if q.MemoryMiB > 0 {
		mem, _ = strconv.ParseUint(memoryMax(q.MemoryMiB), 10, 64)
	}
	if q.VCPUs > 0 {
		cpu = uint64(q.VCPUs) * 1_000_000
	}
	return []sddbus.Property{
		{Name: "MemoryMax", Value: godbus.MakeVariant(mem)},
		{Name: "CPUQuotaPerSecUSec", Value: godbus.MakeVariant(cpu)},
	}
}

// Place puts pid in a new scope brood-runner-<pid>.scope in uid's slice, which it
// creates or updates with q's limits first, waits for systemd's job, then checks
// /proc/<pid>/cgroup names the slice. Errors name the unit.
func (systemdScopes) Place(pid int, uid uint32, q userQuota) error {
	ctx, cancel := context.WithTimeout(context.Background(), systemdCallTimeout)
	defer cancel()
	c, err := sddbus.NewSystemdConnectionContext(ctx)
	if err != nil {
		return fmt.Errorf("connect to systemd: %w", err)
	}
	defer c.Close()
	slice := userSliceName(uid)
	props := append(sliceProperties(q), sddbus.PropDescription(fmt.Sprintf("brood VMs of uid %d", uid)))
	if err := startUnit(ctx, c, slice, props); err != nil {
		var de godbus.Error
		if !errors.As(err, &de) || de.Name != "org.freedesktop.systemd1.UnitExists" {
			return err
		}
		if err := c.SetUnitPropertiesContext(ctx, slice, true, sliceProperties(q)...); err != nil {
			return fmt.Errorf("set limits of %s: %w", slice, err)
		}
	}
	scope := fmt.Sprintf("brood-runner-%d.scope", pid)
	if err := startUnit(ctx, c, scope, []sddbus.Property{sddbus.PropSlice(slice), sddbus.PropPids(uint32(pid)),
		sddbus.PropDescription(fmt.Sprintf("brood VM runner %d of uid %d", pid, uid)),
		{Name: "CollectMode", Value: godbus.MakeVariant("inactive-or-failed")}}); err != nil {
		return err
	}
	cg, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil || !strings.Contains(string(cg), "/"+slice+"/"+scope) {
		return fmt.Errorf("runner %d not in %s/%s after its start: %q, %v", pid, slice, scope, cg, err)
	}
	return nil
}

// unitStarter starts transient units (StartTransientUnit of org.freedesktop.systemd1(5));
// *sddbus.Conn is the real one.
type unitStarter interface {
	StartTransientUnitContext(ctx context.Context, name, mode string, props []sddbus.Property, ch chan<- string) (int, error)
}

// startUnit starts the transient unit name with props (mode "fail") and waits for its
// job: an error unless the job's result is "done".
func startUnit(ctx context.Context, c unitStarter, name string, props []sddbus.Property) error {
	done := make(chan string, 1)
	if _, err := c.StartTransientUnitContext(ctx, name, "fail", props, done); err != nil {
		return fmt.Errorf("start transient unit %s: %w", name, err)
	}
	select {
	case res := <-done:
		if res != "done" {
			return fmt.Errorf("start transient unit %s: job %s", name, res)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("start transient unit %s: %w", name, ctx.Err())
	}
}

// Release does nothing: the scope ends with its processes, the slice stays.
func (systemdScopes) Release(uint32) {}
