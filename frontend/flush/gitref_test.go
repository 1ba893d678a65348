package flush

import (
	"errors"
	"reflect"
	"testing"

	"brood.dev/brood/frontend/session"
)

func TestJournalAndUndoRefs(t *testing.T) {
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	sess, err := session.Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"refs/heads/brood/x/a", "refs/heads/brood/x/b"} {
		if err := JournalRef(sess, r, "1111"); err != nil {
			t.Fatal(err)
		}
	}
	var asked []string
	done, problems, err := UndoRefs(sess, func(r RefRecord) (bool, error) {
		asked = append(asked, r.Ref)
		if r.Ref == "refs/heads/brood/x/b" {
			return false, errors.New("moved")
		}
		return true, nil
	})
	if err != nil || len(done) != 1 || done[0].Ref != "refs/heads/brood/x/a" || len(problems) != 1 {
		t.Fatalf("UndoRefs = %+v, %+v, %v", done, problems, err)
	}
	recs, _ := JournaledRefs(sess)
	if want := []RefRecord{{"refs/heads/brood/x/a", "1111", true, ""}, {"refs/heads/brood/x/b", "1111", false, ""}}; !reflect.DeepEqual(recs, want) {
		t.Fatalf("records = %+v", recs)
	}
	// Only the ref still in effect is asked for again.
	asked = nil
	UndoRefs(sess, func(r RefRecord) (bool, error) { asked = append(asked, r.Ref); return true, nil })
	if !reflect.DeepEqual(asked, []string{"refs/heads/brood/x/b"}) {
		t.Fatalf("second undo asked %q", asked)
	}
}

func TestCancelRef(t *testing.T) {
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	sess, err := session.Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	JournalRef(sess, "refs/heads/brood/x/a", "1111")
	JournalRefUpdate(sess, RefRecord{Ref: "refs/heads/main", Value: "2222", Old: "1111"})
	if err := CancelRef(sess, "refs/heads/main", "2222"); err != nil {
		t.Fatal(err)
	}
	recs, _ := JournaledRefs(sess)
	if len(recs) != 2 || recs[0].Undone || !recs[1].Undone {
		t.Fatalf("records %+v", recs)
	}
}
