package review

import (
	"errors"
	"testing"

	"brood.dev/brood/frontend/diff"
)

func TestAuto(t *testing.T) {
	changes := []diff.Change{
		{Path: "a.go", Kind: diff.KindModified},
		{Path: "src/b.go", Kind: diff.KindAdded},
		{Path: "src/sub/c.go", Kind: diff.KindDeleted},
		{Path: ".github/workflows/ci.yml", Kind: diff.KindAdded, Risk: "CI definition"},
		{Path: ".git/hooks/x", Kind: diff.KindRefused, Reason: "protected path"},
		{Path: "conf.txt", Kind: diff.KindConflict, Reason: "W changed"},
		{Path: "tab\tname", Kind: diff.KindAdded},
	}
	verdicts := func(ds []Decision) string {
		s := ""
		for _, d := range ds {
			s += string(d.Verdict[0])
		}
		return s
	}
	for _, c := range []struct {
		name string
		o    AutoOptions
		want string
	}{
		{"all", AutoOptions{All: true}, "aaasssa"},
		{"all never risky", AutoOptions{All: true, IncludeRisky: true}, "aaasssa"},
		{"reject all", AutoOptions{RejectAll: true}, "rrrrrrr"},
		{"dir prefix", AutoOptions{Paths: []string{"src/"}}, "saassss"},
		{"exact and ./", AutoOptions{Paths: []string{"./a.go", "src/sub"}}, "asassss"},
		{"escaped name", AutoOptions{Paths: []string{`tab\tname`}}, "ssssssa"},
		{"named risky", AutoOptions{Paths: []string{".github"}}, "sssssss"},
		{"named risky included", AutoOptions{Paths: []string{".github"}, IncludeRisky: true}, "sssasss"},
		{"risky named exactly", AutoOptions{Paths: []string{".github/workflows/ci.yml"}}, "sssasss"},
		{"everything", AutoOptions{Paths: []string{"."}}, "aaasssa"},
		{"named refused and conflict", AutoOptions{Paths: []string{".git", "conf.txt"}, IncludeRisky: true}, "sssssss"},
	} {
		ds, err := Auto(changes, c.o)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := verdicts(ds); got != c.want {
			t.Errorf("%s: verdicts %s, want %s", c.name, got, c.want)
		}
	}
	if _, err := Auto(changes, AutoOptions{Paths: []string{"a.go", "nope"}}); !errors.Is(err, ErrUnknownPath) {
		t.Errorf("unknown path: %v", err)
	}
	if _, err := Filter(changes, []string{"sr"}); !errors.Is(err, ErrUnknownPath) {
		t.Errorf("a partial name matched: %v", err)
	}
	if got, _ := Filter(changes, []string{"src"}); len(got) != 2 {
		t.Errorf("Filter(src) = %d changes", len(got))
	}
}

func TestRecordRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if rs, err := ReadRecords(dir); err != nil || rs != nil {
		t.Fatalf("no records: %v %v", rs, err)
	}
	ds := []Decision{
		{Change: diff.Change{Path: "a\x1bb", Kind: diff.KindModified}, Verdict: Accept, Content: []byte("x"), Note: "hunks 1 of 2"},
		{Change: diff.Change{Path: "c", Kind: diff.KindAdded}, Verdict: Reject, Note: "rejected"},
	}
	if _, err := WriteRecord(dir, NewRecord("interactive", ds, true)); err != nil {
		t.Fatal(err)
	}
	rs, err := ReadRecords(dir)
	if err != nil || len(rs) != 1 {
		t.Fatalf("%v %v", rs, err)
	}
	r := rs[0]
	if !r.Applied || r.Mode != "interactive" || len(r.Decisions) != 2 || r.Decisions[0].Path != "a\x1bb" ||
		r.Decisions[0].PathEscaped != `a\x1bb` || !r.Decisions[0].Partial || r.Decisions[1].Verdict != Reject {
		t.Errorf("record %+v", r)
	}
}
