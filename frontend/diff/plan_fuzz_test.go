package diff

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"brood.dev/brood/frontend/digest"
	"brood.dev/brood/frontend/manifest"
)

// fakeEntry is one entry of a fake tree: its stat, content (regular files) or target
// (symlinks).
type fakeEntry struct {
	st      manifest.Stat
	content string
}

// fakeTrees implements contents over in-memory W and S, failing the test when the
// planner reads something that is not there or not of the right type.
type fakeTrees struct {
	t     *testing.T
	trees map[Tree]map[string]fakeEntry
	reads map[string]bool
}

func (f *fakeTrees) digest(tr Tree, p string, st manifest.Stat) (Digest, error) {
	e, ok := f.trees[tr][p]
	if !ok || e.st.Type != manifest.TypeRegular || e.st != st {
		f.t.Fatalf("planner hashed %s:%q which is not that regular file (present=%v, %+v vs %+v)", tr, p, ok, e.st, st)
	}
	f.reads[tr.String()+":"+p] = true
	return Digest{Sum: digest.Bytes([]byte(e.content)), Size: int64(len(e.content)), Binary: strings.IndexByte(e.content, 0) >= 0}, nil
}

func (f *fakeTrees) readlink(tr Tree, p string) (string, error) {
	e, ok := f.trees[tr][p]
	if !ok || e.st.Type != manifest.TypeSymlink {
		f.t.Fatalf("planner read the target of %s:%q which is not a symlink", tr, p)
	}
	if tr == TreeS {
		// The link text of an unchanged S symlink may be read to resolve a new link
		// through it (linkIntoGitDir); never a file's content.
		f.reads["link:S:"+p] = true
		return e.content, nil
	}
	f.reads[tr.String()+":"+p] = true
	return e.content, nil
}

// fuzzPaths are the names the planner fuzz target builds trees from: ordinary, nested,
// colliding in case, protected, risky, with control bytes, and (for the manifest only)
// escaping the root.
var fuzzPaths = []string{"a", "a/b", "a/b/c", "A", "b.txt", "B.TXT", ".git", ".git/hooks/pre-commit",
	".github/workflows/ci.yml", "new\nline", "esc\x1b", "bad\xff", "../up", "/abs", "d/.env", "z"}

var fuzzTargets = []string{"a", "../../etc", "/etc/passwd", "b.txt", "", "a/../..", "./z", ".git/hooks", "a/../.git", "../.git/config"}

var fuzzContents = []string{"", "x\n", "x\r\n", "y\n", "bin\x00ary", "x\n"}

// byteSource hands out fuzz bytes, then zeros.
type byteSource []byte

func (b *byteSource) next() byte {
	if len(*b) == 0 {
		return 0
	}
	c := (*b)[0]
	*b = (*b)[1:]
	return c
}

// FuzzPlanner builds a random manifest, W and S from the fuzz input (entries created,
// touched, rewritten, chmod'ed, deleted, turned into directories, symlinks or FIFOs on
// either side) and checks the planner's contract: it never panics or errors, reads only
// files that are there and only where S's stat changed, lists each path at most once in
// byte order, lists only manifest or tree paths, and every class is consistent with the
// trees.
func FuzzPlanner(f *testing.F) {
	f.Add([]byte{1, 1, 0, 2, 0, 3, 1, 1, 4, 0, 2, 2, 1, 5, 0, 0, 0})
	f.Add([]byte("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18"))
	f.Add([]byte{0xff, 0x13, 0x27, 0x44, 0x81, 0x92, 0xa5, 0x3c, 0x11, 0x08, 0x66, 0x70})
	f.Fuzz(fuzzBody)
}

// fuzzBody is one FuzzPlanner run (a named function so a plain test can call it).
func fuzzBody(t *testing.T, data []byte) {
	{
		src := byteSource(data)
		fk := &fakeTrees{t: t, trees: map[Tree]map[string]fakeEntry{TreeW: {}, TreeS: {}}, reads: map[string]bool{}}
		var entries []manifest.Entry
		gen := int64(1)
		mk := func(typ manifest.Type, mode uint32, content string) fakeEntry {
			gen++
			st := manifest.Stat{Type: typ, Mode: mode, Mtime: gen, Ctime: gen, Ino: uint64(gen)}
			if typ == manifest.TypeRegular || typ == manifest.TypeSymlink {
				st.Size = int64(len(content))
			}
			return fakeEntry{st: st, content: content}
		}
		types := []manifest.Type{manifest.TypeRegular, manifest.TypeRegular, manifest.TypeDir, manifest.TypeSymlink}
		for _, p := range fuzzPaths {
			flags := src.next()
			inManifest := flags&1 != 0
			valid := CheckPath(p) == nil || strings.ContainsAny(p, "\n\x1b")
			if inManifest && valid {
				typ := types[int(src.next())%len(types)]
				content := fuzzContents[int(src.next())%len(fuzzContents)]
				if typ == manifest.TypeSymlink {
					content = fuzzTargets[int(src.next())%len(fuzzTargets)]
				}
				mode := uint32(0o644)
				if typ == manifest.TypeDir {
					mode = 0o755
				}
				we := mk(typ, mode, content)
				e := manifest.Entry{Path: p, W: we.st}
				switch {
				case flags&6 == 2 && typ != manifest.TypeDir:
					e.Excluded = "secret"
				case flags&6 == 4:
					e.Skipped = "fifo"
					we = mk(manifest.TypeFIFO, 0o600, "")
					e.W = we.st
				}
				fk.trees[TreeW][p] = we
				if e.Excluded == "" && e.Skipped == "" {
					se := mk(we.st.Type, we.st.Mode, we.content)
					fk.trees[TreeS][p] = se
					e.S = se.st
					if typ == manifest.TypeRegular && flags&8 != 0 {
						e.Hash = digest.Bytes([]byte(content))
					}
				}
				entries = append(entries, e)
			} else if inManifest {
				// A forged manifest naming a path outside the root.
				entries = append(entries, manifest.Entry{Path: p, W: manifest.Stat{Type: manifest.TypeRegular}, S: manifest.Stat{Type: manifest.TypeRegular, Ino: 7}})
			}
			if !valid {
				continue
			}
			for _, tr := range []Tree{TreeW, TreeS} {
				op := src.next() % 10
				e, ok := fk.trees[tr][p]
				switch op {
				case 1: // touch
					if ok {
						gen++
						e.st.Mtime, e.st.Ctime = gen, gen
					}
				case 2: // rewrite
					if ok && e.st.Type == manifest.TypeRegular {
						e = mk(manifest.TypeRegular, e.st.Mode, fuzzContents[int(src.next())%len(fuzzContents)])
					}
				case 3: // chmod
					if ok {
						gen++
						e.st.Mode ^= uint32(src.next()) & 0o7111
						e.st.Ctime = gen
					}
				case 4:
					delete(fk.trees[tr], p)
					continue
				case 5:
					e, ok = mk(manifest.TypeDir, 0o755, ""), true
				case 6:
					e, ok = mk(manifest.TypeSymlink, 0o777, fuzzTargets[int(src.next())%len(fuzzTargets)]), true
				case 7:
					e, ok = mk(manifest.TypeFIFO, 0o644, ""), true
				case 8:
					e, ok = mk(manifest.TypeRegular, 0o644|uint32(src.next())&0o111, fuzzContents[int(src.next())%len(fuzzContents)]), true
				}
				if ok {
					fk.trees[tr][p] = e
				}
			}
		}
		var wn, sn []node
		for _, tr := range []Tree{TreeW, TreeS} {
			var ns []node
			for p, e := range fk.trees[tr] {
				ns = append(ns, node{path: p, st: e.st})
			}
			slices.SortFunc(ns, func(a, b node) int { return strings.Compare(a.path, b.path) })
			if tr == TreeW {
				wn = ns
			} else {
				sn = ns
			}
		}
		entries = sortedEntries(entries)
		pl := &planner{src: fk, maxSize: 4, caseFold: src.next()&1 != 0}
		changes, err := pl.plan(entries, wn, sn)
		if err != nil {
			t.Fatalf("plan: %v", err)
		}
		checkPlan(t, entries, fk, changes)
	}
}

// hasNewWBelow reports whether W holds an entry below dir that is in neither the
// manifest nor S (created by the developer during the session).
func hasNewWBelow(dir string, me map[string]*manifest.Entry, fk *fakeTrees) bool {
	for p := range fk.trees[TreeW] {
		_, inS := fk.trees[TreeS][p]
		if strings.HasPrefix(p, dir+"/") && me[p] == nil && !inS {
			return true
		}
	}
	return false
}

func checkPlan(t *testing.T, entries []manifest.Entry, fk *fakeTrees, changes []Change) {
	me := map[string]*manifest.Entry{}
	for i := range entries {
		me[entries[i].Path] = &entries[i]
	}
	// Untouched paths are never hashed, nor their W link text read.
	for _, e := range entries {
		s, ok := fk.trees[TreeS][e.Path]
		if (e.S.Type == manifest.TypeNone && !ok) || (ok && !statChanged(e.S, s.st)) {
			if fk.reads["S:"+e.Path] || fk.reads["W:"+e.Path] {
				t.Fatalf("%q: read although S did not change it", e.Path)
			}
		}
	}
	for i, c := range changes {
		if i > 0 && changes[i-1].Path >= c.Path {
			t.Fatalf("changes not strictly sorted: %q then %q", changes[i-1].Path, c.Path)
		}
		e := me[c.Path]
		w, inW := fk.trees[TreeW][c.Path]
		s, inS := fk.trees[TreeS][c.Path]
		if e == nil && !inW && !inS {
			t.Fatalf("%q listed but in no manifest or tree", c.Path)
		}
		var baseS, baseW manifest.Stat
		if e != nil {
			baseS, baseW = e.S, e.W
		}
		if !statChanged(baseS, s.st) {
			t.Fatalf("%q listed as %s but S did not change it", c.Path, c.Kind)
		}
		if c.Kind == KindRefused || c.Kind == KindConflict {
			if c.Reason == "" {
				t.Fatalf("%q: %s without a reason", c.Path, c.Kind)
			}
		}
		if CheckPath(c.Path) != nil && c.Kind != KindRefused {
			t.Fatalf("%q: invalid name listed as %s", c.Path, c.Kind)
		}
		if inS && isSpecial(s.st.Type) && c.Kind != KindRefused {
			t.Fatalf("%q: special file in S listed as %s", c.Path, c.Kind)
		}
		if protectedPath(c.Path, nil) != "" && c.Kind != KindRefused {
			t.Fatalf("%q: protected path listed as %s", c.Path, c.Kind)
		}
		if inS && s.st.Type == manifest.TypeSymlink && LinkIntoGitDir(c.Path, s.content) && c.Kind != KindRefused {
			t.Fatalf("%q: symlink into .git listed as %s", c.Path, c.Kind)
		}
		for _, o := range changes[:i] {
			if o.Kind == KindRefused && strings.HasPrefix(c.Path, o.Path+"/") && c.Kind != KindRefused {
				t.Fatalf("%q: below refused %q but listed as %s", c.Path, o.Path, c.Kind)
			}
		}
		for anc := c.Path; strings.Contains(anc, "/"); {
			anc = anc[:strings.LastIndexByte(anc, '/')]
			if a := me[anc]; a != nil && a.Excluded != "" && c.Kind != KindRefused {
				t.Fatalf("%q: below excluded %q but listed as %s", c.Path, anc, c.Kind)
			}
		}
		if e != nil && e.Excluded != "" && (c.Kind != KindRefused || !inS) {
			t.Fatalf("%q: excluded secret listed as %s (in S: %v)", c.Path, c.Kind, inS)
		}
		if c.Kind == KindConflict && !statChanged(baseW, w.st) && !hasNewWBelow(c.Path, me, fk) {
			t.Fatalf("%q: conflict but W did not change", c.Path)
		}
		if c.Kind != KindConflict && c.Kind != KindRefused && statChanged(baseW, w.st) {
			if !(baseW.Type == manifest.TypeRegular && inW && w.st.Type == manifest.TypeRegular && baseW.Mode == w.st.Mode && e.Hash != nil) {
				t.Fatalf("%q: W changed (%+v -> %+v) but listed as %s", c.Path, baseW, w.st, c.Kind)
			}
		}
		switch c.Kind {
		case KindAdded:
			if baseS.Type != manifest.TypeNone || !inS || s.st.Type == manifest.TypeSymlink {
				t.Fatalf("%q: added but base %v, in S %v", c.Path, baseS.Type, inS)
			}
			if s.st.Type == manifest.TypeRegular && (c.NewHash == nil || c.NewSize != int64(len(s.content))) {
				t.Fatalf("%q: added file without hash/size", c.Path)
			}
		case KindDeleted:
			if inS || baseS.Type == manifest.TypeNone {
				t.Fatalf("%q: deleted but in S %v, base %v", c.Path, inS, baseS.Type)
			}
		case KindModified:
			if !inS || s.st.Type != baseS.Type || c.NewHash == nil {
				t.Fatalf("%q: modified but S type %v base %v", c.Path, s.st.Type, baseS.Type)
			}
			if c.OldHash != nil && string(c.OldHash) == string(c.NewHash) {
				t.Fatalf("%q: modified with equal hashes", c.Path)
			}
		case KindMode:
			if !inS || s.st.Type != baseS.Type || s.st.Mode == baseS.Mode {
				t.Fatalf("%q: mode change but types %v/%v modes %o/%o", c.Path, baseS.Type, s.st.Type, baseS.Mode, s.st.Mode)
			}
		case KindType:
			if !inS || baseS.Type == manifest.TypeNone || s.st.Type == baseS.Type {
				t.Fatalf("%q: type change but %v -> %v", c.Path, baseS.Type, s.st.Type)
			}
		case KindSymlink:
			if !(inS && s.st.Type == manifest.TypeSymlink) && baseS.Type != manifest.TypeSymlink {
				t.Fatalf("%q: symlink change without a symlink", c.Path)
			}
			if inS && s.st.Type == manifest.TypeSymlink && symlinkTargetProblem(c.Path, s.content) != "" {
				t.Fatalf("%q: unsafe symlink target %q not refused", c.Path, s.content)
			}
		case KindConflict, KindRefused:
		default:
			t.Fatalf("%q: unknown kind %q", c.Path, c.Kind)
		}
		if strings.Contains(c.Reason, "etc") || strings.Contains(c.Reason, "passwd") {
			t.Fatalf("%q: reason prints a symlink target: %q", c.Path, c.Reason)
		}
		if strings.ContainsAny(c.Reason, "\n\x1b") {
			t.Fatalf("%q: reason carries control bytes: %q", c.Path, c.Reason)
		}
		_ = fmt.Sprint(c)
	}
}
