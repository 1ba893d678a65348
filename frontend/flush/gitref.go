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

// RefRecord is one branch an apply created in W's repository: the full ref name, the
// commit id (hex) it was created at, and whether brood undo removed it.
type RefRecord struct {
	Ref, Value string
	Undone     bool
}

// JournalRef records, before the ref is created, that an apply of sess creates ref at
// value in W's repository, so that Undo can remove it. The record is fsync'd.
func JournalRef(sess *session.Session, ref, value string) error {
	j, err := openJournal(sess.JournalDir())
	if err != nil {
		return err
	}
	defer j.close()
	recs, err := readRefs(j)
	if err != nil {
		return err
	}
	return writeFileSync(j.dir, gitRefsName, append(recs, RefRecord{Ref: ref, Value: value}))
}

// JournaledRefs returns the branches applies of sess created, in order.
func JournaledRefs(sess *session.Session) ([]RefRecord, error) {
	j, err := openJournal(sess.JournalDir())
	if err != nil {
		return nil, err
	}
	defer j.close()
	return readRefs(j)
}

// UndoRefs removes every journaled branch of sess not undone yet, calling remove(ref,
// value) for each (it reports whether it removed the ref; an error leaves the record
// in effect and becomes a Problem). It returns the refs removed.
func UndoRefs(sess *session.Session, remove func(ref, value string) (bool, error)) ([]RefRecord, []Problem, error) {
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
	for i, r := range recs {
		if r.Undone {
			continue
		}
		ok, err := remove(r.Ref, r.Value)
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
