package review

import (
	"fmt"
	"io"
	"strings"
	"testing"
)

// benchFiles returns a 10,000-line file and a copy with every 100th line changed
// (100 hunks), the size of a large source file an agent edits in many places.
func benchFiles() (string, string) {
	var a, b strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&a, "\tline %d of some source file with text\n", i)
		if i%100 == 50 {
			fmt.Fprintf(&b, "\tline %d changed by the agent\n", i)
		} else {
			fmt.Fprintf(&b, "\tline %d of some source file with text\n", i)
		}
	}
	return a.String(), b.String()
}

func BenchmarkHunksRender(b *testing.B) {
	old, new := benchFiles()
	b.SetBytes(int64(len(old) + len(new)))
	for b.Loop() {
		hs, err := Hunks(old, new)
		if err != nil {
			b.Fatal(err)
		}
		p := &printer{w: io.Discard, color: true}
		p.hunks("W", "S", hs, 0)
	}
}

func BenchmarkSelect(b *testing.B) {
	old, new := benchFiles()
	hs, _ := Hunks(old, new)
	chosen := make([]bool, len(hs))
	for i := range chosen {
		chosen[i] = i%2 == 0
	}
	for b.Loop() {
		if _, err := Select(old, hs, chosen); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMerge3(b *testing.B) {
	base, theirs := benchFiles()
	mine := strings.Replace(base, "line 3 of", "line 3 (mine) of", 1)
	for b.Loop() {
		if _, n := Merge3(base, mine, theirs); n != 0 {
			b.Fatal("conflict")
		}
	}
}
