package helper

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
