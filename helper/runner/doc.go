// Package runner is the VM runner, `broodd-helper vm-run`: one process per VM, started by
// the runner spawner (package spawner) as the session owner, that confines itself and
// drives a sandbox.Backend (QEMU today) for the helper daemon. It also defines the
// control protocol between the daemon and a runner (proto.go), which both ends import.
//
// The runner's sequence (Main): not dumpable → check descriptors 0..8 → read the config →
// no_new_privs + Landlock (Rules) → start the VMM through the backend the config names →
// serve attach and stop requests → report how the VM ended. A second backend is a new
// package implementing sandbox.Backend and one row of the backends table.
//
// Privilege: the session owner's uid and gid plus, under KVM, the kvm group; no
// capabilities, no_new_privs, not dumpable, Landlock (Rules: read-only system paths and
// artifacts, read-write share and run directory, no TCP). Guest-facing data reaches it
// only as the VMM's console log.
package runner
