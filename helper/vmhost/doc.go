// Package vmhost is the helper daemon's VM plumbing: what a VM of a session will be, as a
// value (PlanVM, pure and table-tested), and the short apply step that makes it so
// (Start: run directory, session initramfs, runner spawn, config handshake), then the
// daemon's handle on the running VM (Handle: events, attach, stop, reaping).
//
// The VM backend is a Host's sandbox.Backend: the plan names it and the runner (package
// runner) drives it, so a second backend is a new sandbox.Backend package, a row of the
// runner's backend table and a Host that carries it; nothing here forks.
//
// Privilege: root, inside the helper daemon (Landlock-confined after startup): it writes
// the run directory and the session initramfs as root and hands them to the session
// owner, and asks the spawner to start runners.
package vmhost
