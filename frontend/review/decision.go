package review

import "brood.dev/brood/frontend/diff"

// Verdict is what the review decided for one change.
type Verdict string

const (
	Accept Verdict = "accept" // flush it (Decision.Content says what to write)
	Reject Verdict = "reject" // W keeps its version; recorded as a rejection
	Skip   Verdict = "skip"   // undecided: not flushed now, can be reviewed again later
)

// Decision is the outcome for one change.
type Decision struct {
	Change  diff.Change
	Verdict Verdict
	// Content, for Accept only: nil means "S's file as the diff saw it" (verified against
	// Change.NewHash by the flush); non-nil means "write exactly these bytes" (a hunk
	// selection or a clean three-way merge).
	Content []byte
	// Note says how the verdict was reached ("hunks 1,3 of 4", "three-way merge", or why a
	// change was skipped), for the summary, the record and the exit status.
	Note string
	// WHash, for an accepted conflict only: the content digest (package digest) of W's
	// content the developer saw when resolving it. The flush must find exactly that in W (see Accepted).
	WHash []byte
}

// Item is one accepted change as the flush takes it (flush.Item has the same shape).
type Item struct {
	Change  diff.Change
	Content []byte
}

// Accepted returns the accepted decisions as flush items, in review order.
//
// A conflict the developer resolved (took S's version, or a clean three-way merge) is handed
// to the flush as what it now is: a modification (or, when S deleted the file, a deletion)
// of the content W holds now, with OldHash set to the content digest of the W content the developer
// reviewed. The flush's check "W still matches the base" then means "W still holds what
// the developer saw", so a file edited again during the review is not overwritten.
func Accepted(ds []Decision) []Item {
	var items []Item
	for _, d := range ds {
		if d.Verdict != Accept {
			continue
		}
		c := d.Change
		if c.Kind == diff.KindConflict {
			c.OldHash = d.WHash
			c.Kind = diff.KindModified
			if d.Content == nil {
				c.Kind = diff.KindDeleted
			}
		}
		items = append(items, Item{Change: c, Content: d.Content})
	}
	return items
}

// Count returns the number of decisions with verdict v.
func Count(ds []Decision, v Verdict) int {
	n := 0
	for _, d := range ds {
		if d.Verdict == v {
			n++
		}
	}
	return n
}
