package flush

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/session"
)

// pathOK is an independent statement of which paths may be written.
func pathOK(p string) bool {
	if p == "" || p[0] == '/' || len(p) > 4095 {
		return false
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." || len(c) > 255 || strings.IndexFunc(c, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			return false
		}
		for i := 0; i < len(c); i++ {
			if c[i] < 0x20 || c[i] == 0x7f {
				return false
			}
		}
	}
	return true
}

func FuzzValidatePath(f *testing.F) {
	for _, s := range []string{"a", "a/b", "", "/etc", "a//b", "a/./b", "../x", "a/..", "x\x00y", "x\ny", "a/\x1b[31m", "é/ü", "a/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if got, want := ValidatePath(p) == nil, pathOK(p); got != want {
			t.Fatalf("ValidatePath(%q) ok=%v, want %v", p, got, want)
		}
	})
}

// FuzzApplyPath applies an added file at a fuzzed path with fuzzed content and a symlink
// with a fuzzed target: nothing may appear outside W, an invalid path is never written,
// and a created symlink never points outside W.
func FuzzApplyPath(f *testing.F) {
	f.Add("a/b.txt", "c/d", []byte("x"))
	f.Add("../escape", "/etc/passwd", []byte("x"))
	f.Add("a/../../b", "../../x", []byte{})
	f.Add("ok\x00no", "a/../..", []byte("y"))
	f.Add("x\x1b[0m", "..", []byte("z"))
	f.Add("/abs", "./x", []byte("z"))
	f.Fuzz(func(t *testing.T, p, target string, content []byte) {
		top := t.TempDir()
		w, sd := filepath.Join(top, "w"), filepath.Join(top, "sess")
		for _, d := range []string{w, sd, filepath.Join(sd, "snapshot", "s")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		linkOK := strings.IndexByte(target, 0) < 0 && target != "" && len(target) < 4096
		if linkOK {
			linkOK = os.Symlink(target, filepath.Join(sd, "snapshot", "s", "l")) == nil
		}
		sess := &session.Session{Meta: session.Meta{ID: "fuzz00", Workspace: w}, Dir: sd}
		its := []Item{{Change: diff.Change{Path: p, Kind: diff.KindAdded, NewMode: 0o644}, Content: content}}
		if linkOK {
			its = append(its, Item{Change: diff.Change{Path: "s/l", Kind: diff.KindSymlink}})
		}
		_, err := Apply(ctx, sess, nil, its, Options{})
		if ents, _ := os.ReadDir(top); len(ents) != 2 {
			t.Fatalf("entries appeared next to W: %v", ents)
		}
		if !pathOK(p) {
			if err == nil {
				t.Fatalf("invalid path %q applied without error", p)
			}
			st := treeState(t, w)
			delete(st, "s")
			delete(st, filepath.Join("s", "l"))
			if len(st) > 0 {
				t.Fatalf("invalid path %q: W = %v", p, st)
			}
		}
		if l, lerr := os.Readlink(filepath.Join(w, "s", "l")); lerr == nil {
			if r := filepath.Join("s", l); filepath.IsAbs(l) || r == ".." || strings.HasPrefix(r, "../") {
				t.Fatalf("symlink created with target %q", l)
			}
		}
		filepath.WalkDir(w, func(q string, d os.DirEntry, err error) error {
			if err == nil && strings.Contains(d.Name(), ".brood-") {
				t.Errorf("temp file left: %q", q)
			}
			return nil
		})
	})
}
