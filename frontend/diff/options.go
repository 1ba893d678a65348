package diff

import "sync/atomic"

// Tree names one of the two trees a diff compares.
type Tree uint8

const (
	TreeW Tree = iota + 1 // the developer's workspace
	TreeS                 // the snapshot the agent worked on
)

// String returns "W" or "S".
func (t Tree) String() string {
	switch t {
	case TreeW:
		return "W"
	case TreeS:
		return "S"
	}
	return "?"
}

// CaseMode says whether W's file system folds case (then two names differing only in case
// would land on one file there, and both are refused).
type CaseMode uint8

const (
	CaseAuto        CaseMode = iota // detect on W (vfat/exfat/ntfs, an ext4/f2fs casefold directory, or by probing W)
	CaseSensitive                   // never check collisions
	CaseInsensitive                 // always check collisions
)

// DefaultMaxSize is the largest regular file in S a diff accepts (1 GiB); larger files are
// refused and never hashed. It bounds what one agent can make the developer review.
const DefaultMaxSize int64 = 1 << 30

// Options tunes Compute. The zero value is the safe default.
type Options struct {
	// MaxSize is the size limit in bytes for regular files added or modified in S;
	// 0 means DefaultMaxSize, negative means no limit.
	MaxSize int64
	// Case selects case-collision checking (default: detect on W).
	Case CaseMode
	// Protected lists extra path prefixes (with a trailing '/' for a directory) refused
	// for flush, in addition to DefaultProtected.
	Protected []string
	// AllowUnsafeNames lists names holding control or formatting characters (see
	// CheckPath) as ordinary changes instead of refusing them. They are still rendered
	// escaped. Names escaping the root are refused regardless.
	AllowUnsafeNames bool
	// Workers is the number of stat-walk goroutines per tree, and of hashing goroutines;
	// 0 means GOMAXPROCS.
	Workers int
	// OnOpen, if set, is called before the content of a file is read (hashed) or a
	// symlink target is read, with the tree and the path. A non-nil error aborts Compute
	// with it. Tests use it to prove untouched files are never read. It may be called
	// from several goroutines at once (files are hashed in parallel).
	OnOpen func(t Tree, path string) error
	// Stats, if set, receives counters of the work done.
	Stats *Stats
}

// Stats counts what one Compute did.
type Stats struct {
	Manifest    int          // manifest entries
	WalkedW     int          // entries found in W
	WalkedS     int          // entries found in S
	Hashed      atomic.Int64 // files whose content was read
	HashedBytes atomic.Int64 // bytes read for hashing
	Readlinks   atomic.Int64 // symlink targets read
}

func (o *Options) maxSize() int64 {
	switch {
	case o.MaxSize == 0:
		return DefaultMaxSize
	case o.MaxSize < 0:
		return 1<<63 - 1
	}
	return o.MaxSize
}
