package oci

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzTreeApply applies a tar stream twice (as two layers) to a fresh tree next to a
// sentinel directory and checks the invariant: no panic, nothing outside the tree is
// created or modified, and the tree holds no device node, FIFO or setuid/setgid file.
func FuzzTreeApply(f *testing.F) {
	seeds := [][]ent{
		{dir("a/"), reg("a/f", "x"), sym("a/l", "../.."), hard("a/h", "a/f"), reg("a/.wh.f", "")},
		{sym("esc", "../sentinel"), reg("esc/evil", "x")},
		{sym("esc", "/"), dir("esc/tmp/")},
		{reg("../sentinel/evil", "x")},
		{reg("d/.wh..wh..opq", ""), reg("d/x", "1"), reg(".wh..", "")},
		{hard("h", "../sentinel/keep")},
		{{name: "dev/null", typ: '3', mode: 0o4666}, {name: "p", typ: '6'}, {name: "su", typ: '0', mode: 0o6755, body: "#!"}},
		{reg("f", "1"), reg("f", "2")},
		{dir("x/"), sym("x/y", "."), reg("x/y/y/z", "1")},
	}
	for _, s := range seeds {
		f.Add(layerTar(f, s...))
	}
	f.Add(sparseTar(f, "big", 1<<40))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newSite(t)
		o := TreeOptions{Limits: Limits{MaxEntries: 2000, MaxFileSize: 1 << 20, MaxTotalSize: 4 << 20}, KeepOwners: os.Geteuid() == 0}
		tr, err := NewTree(s.tree, o)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Apply("one", bytes.NewReader(data)) == nil && tr.Apply("two", bytes.NewReader(data)) == nil {
			tr.Finish()
		}
		tr.Close()
		s.untouched(t)
		filepath.WalkDir(s.tree, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			m := fi.Mode()
			if m&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeSetuid|fs.ModeSetgid) != 0 {
				t.Errorf("%s: mode %v in the tree", strings.TrimPrefix(p, s.tree), m)
			}
			return nil
		})
	})
}
