package gitreview

// Caps on what a review reads from the snapshot's repository. The agent controls every
// byte of S/.git, so each bound keeps a crafted repository from making brood read,
// inflate or hold unbounded data. A history over a cap is refused, with the cap named.
const (
	// MaxObjectSize is the largest object (inflated content, bytes) read from S: 100 MiB,
	// the hard per-file limit of the large git hosts. A loose object's header or a pack
	// entry's size over it is refused before its content is inflated.
	MaxObjectSize = 100 << 20

	// MaxDeltaDepth is the longest delta chain a packed object may have in S. git
	// pack-objects defaults to --depth=50 and caps it at 4095 (git-pack-objects(1));
	// 1000 leaves room for aggressive repacks while bounding the work to resolve one
	// object.
	MaxDeltaDepth = 1000

	// MaxNewObjects is the most objects one review copies from S (commits, trees, blobs
	// and tags W lacks).
	MaxNewObjects = 1_000_000

	// MaxNewBytes bounds the inflated size of all new objects together (1 GiB): they are
	// held in memory between verification and the apply.
	MaxNewBytes = 1 << 30

	// MaxAncestryWalk is the most commits of W's own history walked to decide whether a
	// ref's new value descends from W's value; past it the ref is refused.
	MaxAncestryWalk = 1_000_000

	// MaxRefs is the most refs S may have (loose and packed together); MaxPackedRefsBytes
	// bounds S's packed-refs file (64 MiB), read before any ref is looked at.
	MaxRefs            = 100_000
	MaxPackedRefsBytes = 64 << 20
)
