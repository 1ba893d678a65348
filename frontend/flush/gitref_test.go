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
	done, problems, err := UndoRefs(sess, func(ref, v string) (bool, error) {
		asked = append(asked, ref)
		if ref == "refs/heads/brood/x/b" {
			return false, errors.New("moved")
		}
		return true, nil
	})
	if err != nil || len(done) != 1 || done[0].Ref != "refs/heads/brood/x/a" || len(problems) != 1 {
		t.Fatalf("UndoRefs = %+v, %+v, %v", done, problems, err)
	}
	recs, _ := JournaledRefs(sess)
	if want := []RefRecord{{"refs/heads/brood/x/a", "1111", true}, {"refs/heads/brood/x/b", "1111", false}}; !reflect.DeepEqual(recs, want) {
		t.Fatalf("records = %+v", recs)
	}
	// Only the ref still in effect is asked for again.
	asked = nil
	UndoRefs(sess, func(ref, v string) (bool, error) { asked = append(asked, ref); return true, nil })
	if !reflect.DeepEqual(asked, []string{"refs/heads/brood/x/b"}) {
		t.Fatalf("second undo asked %q", asked)
	}
}
