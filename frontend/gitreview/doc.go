// Package gitreview reviews the agent's git history as commits: it reads the snapshot's
// repository S/.git and the workspace's repository W/.git with go-git (git is never run),
// finds for every ref the agent moved or created (branches, tags, a detached HEAD) the
// commits W lacks, verifies every object it would copy (its id is the SHA-1 of its typed
// content), checks the history for hostile content (tree names git refuses, symlinks into
// .git, oversized objects and delta chains, shallow or grafted history, invalid ref
// names, history that does not descend from W's ref), and applies an accepted ref as a
// new branch refs/heads/brood/<session>/<ref> in W: the needed objects are written as one
// pack with its index and the ref file is created. FastForward is the separate step that
// moves one of the developer's branches to such a commit (never a checked-out branch).
// Nothing else in W/.git is written: not HEAD, the index, config, hooks, reflogs or
// packed-refs.
//
// Only the repository at the root of the workspace is reviewed. A W/.git that is a file
// (a linked worktree or a submodule's gitdir pointer) is not reviewed and not refused:
// the review holds only a note (WorktreeNote); nested
// repositories keep their git files listed as changes by package diff. Gitlinks
// (submodule commits, mode 160000) in the agent's trees are shown as such and need no
// object.
//
// Privilege: none; it runs in brood as the developer, reads S and W and writes only a
// pack, refs/heads/brood/ refs and (FastForward) the branch it is asked to move into
// W/.git.
package gitreview
