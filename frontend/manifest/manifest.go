// Package manifest records, for every entry of a workspace W and its snapshot S, what it
// was when the snapshot was taken: type, mode, size, times, inode and (where cheap) a content
// digest (package digest). The diff compares both trees against the manifest and hashes only entries whose stat
// changed; the flush checks W still matches the manifest before replacing anything.
//
// Paths are relative to the tree root, '/'-separated, and carry raw bytes: any byte except
// '/' and NUL may appear in a name (including newline, ESC and invalid UTF-8).
//
// Privilege: none; it runs in brood as the developer.
package manifest

// Type is the file type of an entry (from the S_IFMT bits of stat(2), see <sys/stat.h>).
type Type uint8

const (
	TypeNone    Type = iota // entry absent in that tree
	TypeRegular             // S_IFREG
	TypeDir                 // S_IFDIR
	TypeSymlink             // S_IFLNK
	TypeFIFO                // S_IFIFO: never opened, never copied
	TypeSocket              // S_IFSOCK: never opened, never copied
	TypeDevice              // S_IFCHR or S_IFBLK: never opened, never copied
)

// Stat is the subset of lstat(2) brood compares. Times are nanoseconds since the Unix epoch.
// Mode holds the permission and setuid/setgid/sticky bits (07777), not the type.
type Stat struct {
	Type  Type   `json:"type"`
	Mode  uint32 `json:"mode"`
	Size  int64  `json:"size"`  // bytes
	Mtime int64  `json:"mtime"` // ns
	Ctime int64  `json:"ctime"` // ns; cannot be set from inside the VM (9p on the host FS)
	Ino   uint64 `json:"ino"`
	Dev   uint64 `json:"dev"`
	Nlink uint64 `json:"nlink"`
}

// Entry is one path as it was at snapshot time, in W and in S.
type Entry struct {
	Path string `json:"path"` // raw bytes, relative, '/'-separated, never "" or "." or ".."
	W    Stat   `json:"w"`    // W's entry at snapshot time
	S    Stat   `json:"s"`    // S's entry right after the copy (Type None when not copied)
	// Hash is the content digest of the file's bytes at snapshot time (package digest,
	// 32 bytes; since FormatVersion 2, before which it was the plain SHA-256), or nil when
	// it was not cheap to take. For symlinks it is nil: a target file is never read.
	Hash []byte `json:"digest,omitempty"`
	// LinkHash is, for a symlink, the SHA-256 of its link text (the target path as
	// readlink returns it, never the file it points to; 32 bytes), so that a link
	// recreated with the same text (new inode and ctime, e.g. by brood undo) is known
	// unchanged. nil for other types and in manifests written before it existed.
	LinkHash []byte `json:"link_hash,omitempty"`
	// Excluded names the secret rule that kept this entry out of S ("" when copied).
	Excluded string `json:"excluded,omitempty"`
	// Skipped says why an entry of W was not copied: a special file (FIFO, socket,
	// device), or one the user cannot read ("unreadable: permission denied").
	Skipped string `json:"skipped,omitempty"`
	// Sanitized is true when S holds a rewritten version (e.g. .git/config with
	// credentials removed); W's content is then the base and S's content is not a change.
	Sanitized bool `json:"sanitized,omitempty"`
}

// Manifest is the record of one snapshot: the workspace root it was taken from and one
// Entry per path, sorted by Path (byte order). The root itself is not an entry.
type Manifest struct {
	Version   int     `json:"version"`   // FormatVersion
	Workspace string  `json:"workspace"` // absolute path of W at snapshot time
	Created   int64   `json:"created"`   // ns since the Unix epoch
	Entries   []Entry `json:"entries"`
}

// FormatVersion is the version of the on-disk manifest encoding written by Write.
// Version 1 held plain SHA-256 content hashes in Entry.Hash; version 2 holds content
// digests (package digest). Read refuses any other version.
const FormatVersion = 2
