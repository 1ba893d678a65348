package flush

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"brood.dev/brood/frontend/session"
)

// gitRefsName is the journal file (gob []RefRecord, rewritten atomically under the
// journal lock) listing the branches applies created in the workspace's repository.
const gitRefsName = "gitrefs"

// RefRecord is one ref an apply created or fast-forwarded in W's repository: the full
// ref name, the commit id (hex) it was set to, the one it held before ("" when it was
// created), and whether brood undo reverted it.
type RefRecord struct {
	Ref, Value string
	Undone     bool
	Old        string
}

// JournalRef records, before the ref is created, that an apply of sess creates ref at
// value in W's repository, so that Undo can remove it. The record is fsync'd.
func JournalRef(sess *session.Session, ref, value string) error {
	return JournalRefUpdate(sess, RefRecord{Ref: ref, Value: value})
}

// JournalRefUpdate records rec (a ref about to be created, Old empty, or moved from Old)
// before the ref is written. The record is fsync'd.
func JournalRefUpdate(sess *session.Session, rec RefRecord) error {
	j, err := openJournal(sess.JournalDir())
	if err != nil {
		return err
	}
	defer j.close()
	recs, err := readRefs(j)
	if err != nil {
		return err
	}
	return writeFileSync(j.dir, gitRefsName, append(recs, rec))
}

// CancelRef marks the last record of ref at value as undone without touching the
// repository: the write it announced did not happen.
func CancelRef(sess *session.Session, ref, value string) error {
	_, _, err := UndoRefs(sess, func(r RefRecord) (bool, error) {
		if r.Ref == ref && r.Value == value {
			return false, nil
		}
		return false, errKeep
	})
	return err
}

// errKeep leaves a record in effect (CancelRef's filter).
var errKeep = errors.New("kept")

// JournaledRefs returns the branches applies of sess created, in order.
func JournaledRefs(sess *session.Session) ([]RefRecord, error) {
	j, err := openJournal(sess.JournalDir())
	if err != nil {
		return nil, err
	}
	defer j.close()
	return readRefs(j)
}

// UndoRefs reverts every journaled ref of sess not undone yet, newest first, calling
// revert for each (it reports whether it changed the ref; an error leaves the record in
// effect and becomes a Problem). It returns the refs reverted.
func UndoRefs(sess *session.Session, revert func(RefRecord) (bool, error)) ([]RefRecord, []Problem, error) {
	j, err := openJournal(sess.JournalDir())
	if err != nil {
		return nil, nil, err
	}
	defer j.close()
	recs, err := readRefs(j)
	if err != nil {
		return nil, nil, err
	}
	var done []RefRecord
	var problems []Problem
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		if r.Undone {
			continue
		}
		ok, err := revert(r)
		if errors.Is(err, errKeep) {
			continue
		}
		if err != nil {
			problems = append(problems, Problem{Path: r.Ref, Err: err})
			continue
		}
		if ok {
			done = append(done, r)
		}
		recs[i].Undone = true
	}
	if err := writeFileSync(j.dir, gitRefsName, recs); err != nil {
		return done, problems, err
	}
	return done, problems, nil
}

// readRefs reads the ref records (none when the file is absent).
func readRefs(j *journal) ([]RefRecord, error) {
	var recs []RefRecord
	err := readGob(filepath.Join(j.dir, gitRefsName), &recs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read journaled refs: %w", err)
	}
	return recs, nil
}
