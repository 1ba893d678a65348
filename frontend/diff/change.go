// Package diff computes the changes between a snapshot S and the workspace W relative to
// the snapshot's manifest: what the agent did in S, and what the developer did in W since.
//
// Compute walks both trees in parallel relative to directory fds, never following a
// symlink, and compares every entry's lstat with the manifest; only files whose stat
// changed in S are read (content digest of the raw bytes, package digest). A change is one Change per
// path, sorted by path bytes. Only S's changes are listed: a path the developer changed
// in W and S did not touch is not a change; one both changed is KindConflict. Anything
// the flush must never write is KindRefused with a Reason: special files, names with
// control or formatting characters or escaping the root, case collisions on a
// case-insensitive W, files over Options.MaxSize, protected paths (DefaultProtected),
// paths inside excluded secrets, symlinks whose target is absolute or climbs out of W,
// and paths longer than PATH_MAX. Risk marks high-risk changes (the names of riskRules,
// files W's git configs include, new executable bits, group or other access bits W's
// entry did not have).
//
// Names are raw bytes; Escape renders them for a terminal, and the JSON form of a Change
// (json.go) carries invalid UTF-8 exactly in path_b64.
//
// Privilege: none; it runs in brood as the developer and only reads W and S.
package diff

// Kind classifies one change. The string values are part of `brood diff --json`.
type Kind string

const (
	KindAdded    Kind = "added"    // new in S
	KindModified Kind = "modified" // content changed in S
	KindDeleted  Kind = "deleted"  // removed in S
	KindMode     Kind = "mode"     // permission bits changed in S, content equal
	KindSymlink  Kind = "symlink"  // symlink added, removed or retargeted in S
	KindType     Kind = "type"     // type changed (file <-> dir <-> symlink) in S
	KindConflict Kind = "conflict" // S changed and W changed since the snapshot
	KindRefused  Kind = "refused"  // never flushed: see Reason
)

// Change is one path that differs. Paths are raw bytes, relative to the root,
// '/'-separated.
type Change struct {
	Path    string `json:"path"`
	Kind    Kind   `json:"kind"`
	OldMode uint32 `json:"old_mode"` // permission bits in W at snapshot (0 when added)
	NewMode uint32 `json:"new_mode"` // permission bits in S now (0 when deleted)
	Reason  string `json:"reason,omitempty"`
	// Risk is non-empty for high-risk changes (riskRules, files W's git configs include,
	// new executable bits, widened access: Widened), saying why: never included by --all.
	Risk string `json:"risk,omitempty"`
	// OldHash / NewHash are the content digests (package digest, 32 bytes; not the plain
	// SHA-256 of the bytes) of the base and the new content (regular files). The flush
	// writes exactly NewHash and requires W to still hold OldHash (or the base stat).
	OldHash []byte `json:"old_digest,omitempty"`
	NewHash []byte `json:"new_digest,omitempty"`
	OldSize int64  `json:"old_size"`
	NewSize int64  `json:"new_size"`
	Binary  bool   `json:"binary,omitempty"`
	// BecameBinary: the base was text and the new content has a NUL byte.
	BecameBinary bool `json:"became_binary,omitempty"`
	// SameAs names a deleted path with the same content (a likely rename), informational.
	SameAs string `json:"same_as,omitempty"`
}
