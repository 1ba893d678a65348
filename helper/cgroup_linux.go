//go:build linux

package helper

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
)

// userCgroups places each VM runner (and so its VMM, a child started after the move) in
// a per-uid cgroup v2 directory, <cgroup2 mount><parent>/brood.slice/brood-user-<uid>.slice,
// whose memory.max and cpu.max come from the uid's quota (userQuota): the kernel then
// holds all of one user's VMs together to that much memory and CPU time, whatever the
// runners do. The directories and their control files are root's (mode 0755/0644), so
// neither the runners nor the user can move themselves out or raise a limit: moving a
// process needs write access to cgroup.procs of the common ancestor
// (Documentation/admin-guide/cgroup-v2.rst, "Delegation Containment").
//
// The limits need the memory and cpu controllers in the unified hierarchy; on a host
// that keeps them in cgroup v1 (hybrid mode) runners are still placed, unlimited, and
// Doctor says so. The per-uid quotas at start_vm hold in every case.
type userCgroups struct {
	dir         string   // <mount><parent>/brood.slice
	controllers []string // of "memory", "cpu": the ones enabled for the per-uid directories
}

var (
	_ cgroupPlacer = (*userCgroups)(nil)
	_ cgroupPlacer = systemdScopes{}
)

// cgroupSlice is the directory holding the per-uid cgroups.
const cgroupSlice = "brood.slice"

// userCgroupName is the per-uid cgroup's directory name.
func userCgroupName(uid uint32) string { return fmt.Sprintf("brood-user-%d.slice", uid) }

// openUserCgroups finds the cgroup2 mount (/proc/self/mountinfo), creates
// <mount><parent>/brood.slice (parent "/" in the daemon: the root cgroup is the one
// cgroup that may hold processes and delegate controllers at once) and enables the
// memory and cpu controllers the hierarchy offers for its children. It returns an error
// wrapping errors.ErrUnsupported without a cgroup2 mount, and the error of the first
// write that fails otherwise (a read-only cgroup filesystem: systemd's
// ProtectControlGroups).
func openUserCgroups(parent string) (*userCgroups, error) {
	mount, err := cgroup2Mount()
	if err != nil {
		return nil, err
	}
	base := filepath.Join(mount, parent)
	dir := filepath.Join(base, cgroupSlice)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("cgroup %s is not a directory: %v", dir, err)
	}
	avail, _ := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	cg := &userCgroups{dir: dir}
	for _, c := range []string{"memory", "cpu"} {
		if !strings.Contains(" "+strings.TrimSpace(string(avail))+" ", " "+c+" ") {
			continue
		}
		if err := enableController(base, c); err != nil {
			return nil, err
		}
		if err := enableController(dir, c); err != nil {
			return nil, err
		}
		cg.controllers = append(cg.controllers, c)
	}
	return cg, nil
}

// enableController writes "+c" to dir's cgroup.subtree_control.
func enableController(dir, c string) error {
	p := filepath.Join(dir, "cgroup.subtree_control")
	if err := os.WriteFile(p, []byte("+"+c), 0); err != nil {
		return fmt.Errorf("enable cgroup controller %s in %s: %w", c, dir, err)
	}
	return nil
}

// cgroup2Mount returns the mount point of the cgroup2 filesystem from
// /proc/self/mountinfo (proc(5): field 5 is the mount point, the field after " - " the
// type); errors.ErrUnsupported when there is none.
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("find cgroup2 mount: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, typ := strings.Fields(pre), strings.Fields(post)
		if ok && len(fields) >= 5 && len(typ) > 0 && typ[0] == "cgroup2" {
			return fields[4], nil
		}
	}
	return "", fmt.Errorf("find cgroup2 mount: none in /proc/self/mountinfo: %w", errors.ErrUnsupported)
}

// memoryMax is memory.max for a quota of mib MiB of guest memory, in bytes: the guests'
// memory plus a quarter (at least 256 MiB) for the VMMs' own memory (device emulation,
// TCG's translation buffer) and the runners; "max" for an unlimited quota (0).
func memoryMax(mib int) string {
	if mib <= 0 {
		return "max"
	}
	return strconv.FormatInt(int64(mib+max(mib/4, 256))<<20, 10)
}

// cpuMax is cpu.max for a quota of vcpus vCPUs: that many CPUs' worth of time per
// 100 ms period (cgroup-v2.rst, "cpu.max": "$MAX $PERIOD" in microseconds); "max" for
// an unlimited quota (0).
func cpuMax(vcpus int) string {
	if vcpus <= 0 {
		return "max 100000"
	}
	return fmt.Sprintf("%d 100000", vcpus*100000)
}

// Place moves pid into uid's cgroup, creating it if needed, after writing its limits
// from q (for the controllers enabled). Another helper's startup (RemoveEmpty) may
// remove an empty directory between the mkdir and the move: that is retried a few
// times. Errors name the file written.
func (cg *userCgroups) Place(pid int, uid uint32, q userQuota) error {
	var err error
	for range 3 {
		if err = cg.place(pid, uid, q); !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return err
}

func (cg *userCgroups) place(pid int, uid uint32, q userQuota) error {
	dir := filepath.Join(cg.dir, userCgroupName(uid))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	limits := map[string][2]string{"memory": {"memory.max", memoryMax(q.MemoryMiB)}, "cpu": {"cpu.max", cpuMax(q.VCPUs)}}
	for _, c := range cg.controllers {
		l := limits[c]
		if err := os.WriteFile(filepath.Join(dir, l[0]), []byte(l[1]), 0); err != nil {
			return fmt.Errorf("set %s of cgroup %s to %s: %w", l[0], dir, l[1], err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("move runner %d into cgroup %s: %w", pid, dir, err)
	}
	return nil
}

// Release removes uid's cgroup when it holds no process any more (rmdir fails with
// EBUSY while one is left: then it stays for the uid's other VMs).
func (cg *userCgroups) Release(uid uint32) {
	_ = unix.Rmdir(filepath.Join(cg.dir, userCgroupName(uid)))
}

// RemoveEmpty removes every empty per-uid cgroup (those of a previous helper's VMs that
// are gone) and returns how many.
func (cg *userCgroups) RemoveEmpty() int {
	names, _ := filepath.Glob(filepath.Join(cg.dir, "brood-user-*.slice"))
	n := 0
	for _, p := range names {
		if unix.Rmdir(p) == nil {
			n++
		}
	}
	return n
}

// Check is the Doctor check "user cgroups": where runners are placed and which limits
// apply. cg is nil when openUserCgroups failed with err.
func (cg *userCgroups) Check(err error) api.Check {
	if cg == nil {
		return api.Check{Name: "user cgroups", OK: true, Warn: true, Detail: fmt.Sprintf(
			"runners stay in the helper's cgroup, only the per-user quotas at start apply: %v", err)}
	}
	if len(cg.controllers) < 2 {
		return api.Check{Name: "user cgroups", OK: true, Warn: true, Detail: fmt.Sprintf(
			"runners are placed in %s/brood-user-<uid>.slice, but the unified hierarchy offers controllers %q of memory and cpu: no memory.max/cpu.max", cg.dir, cg.controllers)}
	}
	return api.Check{Name: "user cgroups", OK: true, Detail: "runners are placed in " + cg.dir + "/brood-user-<uid>.slice with memory.max and cpu.max from the per-user quotas"}
}
