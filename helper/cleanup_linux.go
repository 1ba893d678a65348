package helper

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/egress"
	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/netpolicy/nftrules"
)

// Cleanup removes what a crashed predecessor left behind: orphaned runners first (they
// hold the taps), then taps named nftrules.TapPrefix*, then the nft table (Firewall.Cleanup). It is idempotent: on a
// clean host it does nothing and returns no error. Every failure is returned, joined.
func Cleanup(log *slog.Logger, links egress.Links, fw nftrules.Firewall, runners Runners) (CleanupReport, error) {
	var rep CleanupReport
	var errs []error
	if runners != nil {
		pids, err := runners.ListOrphans()
		if err != nil {
			errs = append(errs, fmt.Errorf("cleanup: list runners: %w", err))
		}
		for _, pid := range pids {
			if err := runners.Kill(pid); err != nil {
				errs = append(errs, fmt.Errorf("cleanup: kill runner %d: %w", pid, err))
				continue
			}
			log.Info("cleanup: killed orphaned runner", "pid", pid)
			rep.Runners = append(rep.Runners, pid)
		}
	}
	if links != nil {
		taps, err := links.ListTaps(nftrules.TapPrefix)
		if err != nil {
			errs = append(errs, fmt.Errorf("cleanup: list taps: %w", err))
		}
		for _, name := range taps {
			if err := links.DeleteLink(name); err != nil {
				errs = append(errs, fmt.Errorf("cleanup: delete tap %q: %w", name, err))
				continue
			}
			log.Info("cleanup: deleted stale tap", "tap", name)
			rep.Taps = append(rep.Taps, name)
		}
	}
	if fw != nil {
		if err := fw.Cleanup(); err != nil {
			errs = append(errs, err)
		} else {
			rep.Table = true
		}
	}
	return rep, errors.Join(errs...)
}

// ProcRunners implements Runners by scanning /proc: a runner is a process whose argv[1] is
// spawner.RunnerSubcommand (or spawner.Subcommand, the runners' parent) and whose
// executable is Exe or Copy (or, when its exe link is unreadable, whose argv[0] is Exe or
// Copy). Self (this process) and its children are never orphans.
type ProcRunners struct {
	Proc string // procfs mount, "/proc"
	Exe  string // the helper executable (os.Executable)
	Copy string // its execute-only copy (SelfCopyPath), which runners are executed from
	Self int    // this process id
}

var _ Runners = (*ProcRunners)(nil)

// NewProcRunners returns a ProcRunners for this process and its copy under runtimeDir.
func NewProcRunners(runtimeDir string) (*ProcRunners, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	return &ProcRunners{Proc: "/proc", Exe: exe, Copy: SelfCopyPath(runtimeDir, exe), Self: os.Getpid()}, nil
}

// ListOrphans lists runner processes whose parent is not this process.
func (r *ProcRunners) ListOrphans() ([]int, error) {
	ents, err := os.ReadDir(r.Proc)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == r.Self {
			continue
		}
		dir := filepath.Join(r.Proc, e.Name())
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			continue // gone
		}
		argv := bytes.Split(cmdline, []byte{0})
		if len(argv) < 2 || (string(argv[1]) != spawner.RunnerSubcommand && string(argv[1]) != spawner.Subcommand) {
			continue
		}
		exe, err := os.Readlink(filepath.Join(dir, "exe"))
		if !r.ours(string(argv[0]), exe, err) {
			continue
		}
		if ppid(dir) == r.Self {
			continue
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// ours reports whether a runner-shaped process with argv[0] argv0 and exe link exe (or
// the error reading it) was started from this helper's executable or its copy.
func (r *ProcRunners) ours(argv0, exe string, err error) bool {
	switch {
	case err == nil:
		exe = strings.TrimSuffix(exe, " (deleted)")
		return exe == r.Exe || exe == r.Copy
	case errors.Is(err, fs.ErrPermission):
		// Runners are non-dumpable and run as the user; without CAP_SYS_PTRACE (not in
		// the unit's bounding set) their exe link is unreadable, so fall back to
		// argv[0], which the spawner sets to the path it executed. The whole path must
		// match: another helper instance (another runtime directory, so another copy;
		// or another build) owns its own runners, and a base-name match killed them. A
		// user can only make the helper kill their own look-alike process this way.
		return argv0 == r.Exe || argv0 == r.Copy
	default:
		return false
	}
}

// ppid returns the parent pid from /proc/<pid>/stat (0 when unreadable).
func ppid(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return 0
	}
	// stat is "pid (comm) state ppid ..."; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// Kill sends SIGKILL to pid; ESRCH (already gone) is not an error.
func (r *ProcRunners) Kill(pid int) error {
	if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return os.NewSyscallError("kill", err)
	}
	return nil
}
