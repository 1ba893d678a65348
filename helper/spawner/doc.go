// Package spawner is the runner spawner, `broodd-helper vm-spawn`: the only root code of
// brood that runs outside Landlock. It starts VM runners as the session owner, starts
// image build children for recipes compiled into the binary, and kills either on
// request, nothing else. Its other half, Client, runs in the helper daemon.
//
// Why a separate process: the helper confines itself with Landlock, and Landlock domains
// are inherited by every child, so a runner started by the confined helper could never
// open the user's share (the snapshot lives in the user's home, which the helper's rules
// rightly exclude). The helper therefore starts the spawner once, before it confines
// itself (Start); the spawner then serves the helper alone.
//
// # Contract
//
// What the spawner receives, what it checks and what it does, in order:
//
//  1. It is started by Start as `<helper executable> vm-spawn` with no further argument,
//     a scrubbed environment (hostexec.Self), working directory "/", Pdeathsig SIGKILL
//     (it dies with the helper), root's uid and the helper's capabilities, and one extra
//     descriptor: fd 3 (SocketFD), its end of a SOCK_SEQPACKET socketpair. No path, no
//     listener: only the helper can talk to it.
//  2. It refuses any argument (exit 2), marks fd 3 close-on-exec (no runner inherits it)
//     and looks up the gid of group "kvm" once.
//  3. It reads one request at a time from fd 3: at most MsgMax bytes of JSON (Request) and
//     at most RunnerFiles descriptors by SCM_RIGHTS, received close-on-exec. A truncated
//     message, a malformed control message or undecodable JSON is answered with an error.
//  4. Op "kill": carries no descriptor; it SIGKILLs Pid only if Pid is its own unreaped
//     child (a runner or build child it started); any other pid is ignored. Op "spawn"
//     continues at 5, op "build" at 5b. Any other op is an error.
//  5. Spawn checks (Check): exactly RunnerFiles descriptors; UID and GID non-zero (never
//     root: a zero is an error, not a default); Groups empty or exactly the kvm gid.
//  6. Spawn execs `<its own executable> vm-run` (RunnerSubcommand) with no other argument,
//     a scrubbed environment, working directory "/", credentials UID, GID and Groups (no
//     capabilities: a non-root uid after execve), its own process group, Pdeathsig
//     SIGKILL, stdout and stderr = the first descriptor received (a pipe the helper
//     reads), fds 3..8 = the other six in order (the runner's layout, package runner),
//     nothing else (every other descriptor is close-on-exec).
//     5b. Build checks (CheckBuild): exactly BuildFiles descriptors; either Name passes
//     store.ValidImageName and is one of the recipe names Main was given (the table
//     compiled into the binary: a client never supplies a recipe), or Ref is a digest
//     reference (at most 512 bytes: registry and repository characters, no leading '-',
//     "@sha256:" and 64 hex digits) and Policy an absolute clean path; StateDir is
//     absolute and clean.
//     6b. Build execs `<its own executable> image-build --state-dir StateDir Name`, or
//     `... --state-dir StateDir --policy Policy --ref Ref` (BuildSubcommand, BuildArgs)
//     as root (the build runs mmdebstrap, apt and mkfs.erofs into the
//     root-owned store), a scrubbed environment, working directory "/", its own process
//     group, Pdeathsig SIGKILL, stdin, stdout and stderr /dev/null, fd 3 = the descriptor
//     received (the write end of the progress pipe the helper reads), nothing else. The
//     child writes its full log into the store and only bounded JSON progress records
//     on fd 3.
//  7. It opens the child's pidfd (pidfd_open, before the runner can have been reaped, so
//     it names the runner even after its pid is reused), closes every descriptor it
//     received, answers Reply{Pid} with the pidfd by SCM_RIGHTS, and closes the pidfd.
//     A goroutine reaps the runner when it exits.
//  8. When fd 3 reaches EOF (the helper is gone) or an answer cannot be sent, it exits 0;
//     Pdeathsig then kills its runners, and theirs their VMMs.
//
// Privilege: root, unconfined (started before the helper's Landlock step); it keeps the
// helper's capabilities only to set runners' credentials (CAP_SETUID, CAP_SETGID), to
// start build children as root and to signal them. Its imports are an allow-list (deps_test.go).
package spawner
