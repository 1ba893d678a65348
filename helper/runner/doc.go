// Package runner is the VM runner, `broodd-helper vm-run`: one process per VM, started by
// the runner spawner (package spawner) as the session owner, that confines itself and
// drives a sandbox.Backend (QEMU today) for the helper daemon. It also defines the
// control protocol between the daemon and a runner (proto.go), which both ends import.
//
// The runner's sequence (Main): not dumpable → check descriptors 0..8 → read the config →
// no_new_privs + Landlock (Rules; refused below the pinned ABI when the config says
// require_landlock) + seccomp (RunnerPolicy, all threads) → start the VMM through the
// backend the config names, forked by a thread that first adds VMMPolicy and a Landlock
// domain with the signal and abstract-socket scopes to itself → serve attach and stop
// requests → report how the VM ended. A second backend is a new package implementing
// sandbox.Backend and one row of the backends table.
//
// Privilege: the session owner's uid and gid plus, under KVM, the kvm group; no
// capabilities; a new, empty network namespace in a user namespace that maps only its
// ids (made by the spawner); no_new_privs; not
// dumpable from its execve on (the spawner execs the helper's execute-only copy); Landlock
// (Rules: read-only system paths and artifacts, read-write share and run directory, no
// TCP, signal and abstract-socket scopes); seccomp (no socket family but AF_UNIX stream
// and seqpacket, no io_uring, no new namespaces). The VMM additionally may not connect(2)
// nor signal outside itself. Guest-facing data reaches it
// only as the VMM's console log.
package runner
