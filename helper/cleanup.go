package helper

import (
	"errors"
	"fmt"
	"log/slog"
)

// TableName is brood's one nftables table, family inet ("inet brood"). The helper owns it
// entirely; cleanup deletes it.
const TableName = "brood"

// Links is the helper's seam to the kernel's network links (vishvananda/netlink).
type Links interface {
	// ListTaps returns the names of tap devices whose name starts with prefix.
	ListTaps(prefix string) ([]string, error)
	// DeleteLink deletes the link name; a missing link is not an error.
	DeleteLink(name string) error
}

// Firewall is the helper's seam to nftables (google/nftables).
type Firewall interface {
	// DeleteTable deletes the table "inet brood" with everything in it; a missing table
	// is not an error.
	DeleteTable() error
}

// Runners is the helper's seam to VM runner processes (re-execs of the helper binary
// with the hidden subcommand vm-run).
type Runners interface {
	// ListOrphans returns the pids of runner processes not started by this process.
	ListOrphans() ([]int, error)
	// Kill stops pid with SIGKILL; a process that is already gone is not an error.
	Kill(pid int) error
}

// CleanupReport says what Cleanup removed.
type CleanupReport struct {
	Taps    []string
	Table   bool // the delete of "inet brood" was issued (it may not have existed)
	Runners []int
}

// Cleanup removes what a crashed predecessor left behind: orphaned runners first (they
// hold the taps), then taps named TapPrefix*, then the nft table. It is idempotent: on a
// clean host it does nothing and returns no error. Every failure is returned, joined.
func Cleanup(log *slog.Logger, links Links, fw Firewall, runners Runners) (CleanupReport, error) {
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
		taps, err := links.ListTaps(TapPrefix)
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
		if err := fw.DeleteTable(); err != nil {
			errs = append(errs, fmt.Errorf("cleanup: delete nft table inet %s: %w", TableName, err))
		} else {
			rep.Table = true
		}
	}
	return rep, errors.Join(errs...)
}
