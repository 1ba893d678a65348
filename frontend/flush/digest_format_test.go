package flush

import (
	"bytes"
	"encoding/gob"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/frontend/diff"
)

// TestUndoRefusesFormat1Journal: a journal written when content was identified by plain
// SHA-256 (format 1) is refused by undo and recover, by session and tx and with the
// reason, and W is left as the apply made it; its hashes are never compared with digests.
func TestUndoRefusesFormat1Journal(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": "old\n"})
	put(t, f.S, "a.txt", "new\n", 0o644)
	res, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindModified, "a.txt")), Options{})
	if err != nil || len(res.Applied) != 1 {
		t.Fatalf("Apply: %v, %+v", err, res)
	}
	plan := filepath.Join(f.sess.JournalDir(), res.Tx, planName)
	var rec record
	if err := readGob(plan, &rec); err != nil {
		t.Fatal(err)
	}
	rec.Version = 1
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(&rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plan, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Undo(ctx, f.sess)
	if !errors.Is(err, ErrJournal) {
		t.Fatalf("Undo of a format-1 journal: %v, want ErrJournal", err)
	}
	for _, want := range []string{"undo session " + f.sess.ID, "journal " + res.Tx, "format version 1", "older brood", "plain SHA-256"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(f.W, "a.txt")); string(got) != "new\n" {
		t.Errorf("W a.txt = %q after a refused undo, want the applied %q", got, "new\n")
	}
	// An interrupted format-1 tx (no done record) is refused by Recover the same way.
	if err := os.Remove(filepath.Join(f.sess.JournalDir(), res.Tx, doneName)); err != nil {
		t.Fatal(err)
	}
	if _, err := Recover(ctx, f.sess); !errors.Is(err, ErrJournal) || !strings.Contains(err.Error(), "recover session "+f.sess.ID) || !strings.Contains(err.Error(), "format version 1") {
		t.Errorf("Recover of a format-1 journal: %v, want ErrJournal naming the session and format", err)
	}
}
