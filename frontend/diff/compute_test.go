package diff

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// setup builds W from files, snapshots it into S and returns both roots and the manifest.
func setup(t *testing.T, files map[string]string, hash bool) (w, s string, _ struct{}) {
	t.Helper()
	dir := t.TempDir()
	w, s = filepath.Join(dir, "w"), filepath.Join(dir, "s")
	if err := os.Mkdir(w, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(s, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, w, files)
	return w, s, struct{}{}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func byPath(cs []Change) map[string]Change {
	out := make(map[string]Change, len(cs))
	for _, c := range cs {
		out[c.Path] = c
	}
	return out
}

// TestComputeClasses builds a workspace, snapshots it, lets an "agent" and the
// "developer" change S and W, and checks every change class and every non-change.
func TestComputeClasses(t *testing.T) {
	for _, hash := range []bool{true, false} {
		t.Run(map[bool]string{true: "manifest-hashes", false: "no-manifest-hashes"}[hash], func(t *testing.T) {
			testComputeClasses(t, hash)
		})
	}
}

func testComputeClasses(t *testing.T, hash bool) {
	w, s, _ := setup(t, nil, hash)
	writeFiles(t, w, map[string]string{
		"mod.txt":                  "one\n",
		"crlf-untouched.txt":       "a\r\nb\r\n",
		"crlf-rewritten.txt":       "a\r\nb\r\n",
		"crlf-to-lf.txt":           "a\r\nb\r\n",
		"untouched.txt":            "keep\n",
		"chmod.txt":                "same\n",
		"del.txt":                  "gone\n",
		"old-name.txt":             "moved content\n",
		"text-to-bin.txt":          "plain text\n",
		"w-only-edit.txt":          "dev\n",
		"both-edit.txt":            "base\n",
		"dir-to-file/inner.txt":    "x\n",
		".github/workflows/ci.yml": "on: push\n",
		".git/HEAD":                "ref: refs/heads/main\n",
		".git/hooks/":              "",
		"sub/.env":                 "SECRET=1\n",
		".env":                     "SECRET=2\n",
		"big.bin":                  "small at first",
		"deep/a/b/c.txt":           "deep\n",
	})
	must(t, os.Symlink("mod.txt", filepath.Join(w, "link-retarget")))
	must(t, unix.Mkfifo(filepath.Join(w, "w-fifo"), 0o600))
	m := testSnapshot(t, w, s, hash)

	// The agent, in S.
	writeFiles(t, s, map[string]string{
		"mod.txt":                  "one\ntwo\n",
		"crlf-rewritten.txt":       "a\r\nb\r\n", // same bytes rewritten: stat changes, content not
		"crlf-to-lf.txt":           "a\nb\n",
		"new.txt":                  "new\n",
		"new-name.txt":             "moved content\n",
		"newdir/f.txt":             "f\n",
		"text-to-bin.txt":          "plain\x00text\n",
		"both-edit.txt":            "agent\n",
		".github/workflows/ci.yml": "on: [push, pull_request]\n",
		".git/hooks/pre-commit":    "#!/bin/sh\nevil\n",
		".env":                     "SECRET=agent\n",
		"esc\x1b[31mred":           "x",
		"two\nlines":               "x",
		"big.bin":                  strings.Repeat("B", 3000),
		"deep/a/b/c.txt":           "deeper\n",
	})
	must(t, os.Chmod(filepath.Join(s, "chmod.txt"), 0o755))
	must(t, os.Remove(filepath.Join(s, "del.txt")))
	must(t, os.Remove(filepath.Join(s, "old-name.txt")))
	must(t, os.RemoveAll(filepath.Join(s, "dir-to-file")))
	must(t, os.WriteFile(filepath.Join(s, "dir-to-file"), []byte("now a file\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(s, "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Symlink("newdir/f.txt", filepath.Join(s, "link-ok")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(s, "link-abs")))
	must(t, os.Symlink("../../etc/passwd", filepath.Join(s, "newdir", "link-up")))
	must(t, os.Remove(filepath.Join(s, "link-retarget")))
	must(t, os.Symlink("untouched.txt", filepath.Join(s, "link-retarget")))
	must(t, unix.Mkfifo(filepath.Join(s, "fifo"), 0o600))

	// The developer, in W, during the session.
	writeFiles(t, w, map[string]string{
		"w-only-edit.txt": "dev edited\n",
		"w-created.txt":   "dev created\n",
		"both-edit.txt":   "developer\n",
	})

	var opened sync.Map
	opts := Options{
		MaxSize: 2048,
		Case:    CaseSensitive,
		OnOpen: func(tr Tree, p string) error {
			opened.Store(tr.String()+":"+p, true)
			return nil
		},
	}
	got, err := Compute(context.Background(), w, s, m, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(got, func(a, b Change) int { return strings.Compare(a.Path, b.Path) }) {
		t.Errorf("changes not sorted by path bytes")
	}
	want := map[string]Kind{
		"mod.txt":                  KindModified,
		"crlf-to-lf.txt":           KindModified,
		"chmod.txt":                KindMode,
		"del.txt":                  KindDeleted,
		"old-name.txt":             KindDeleted,
		"new-name.txt":             KindAdded,
		"new.txt":                  KindAdded,
		"newdir":                   KindAdded,
		"newdir/f.txt":             KindAdded,
		"newdir/link-up":           KindRefused,
		"text-to-bin.txt":          KindModified,
		"both-edit.txt":            KindConflict,
		".github/workflows/ci.yml": KindModified,
		".git/hooks/pre-commit":    KindRefused,
		".env":                     KindRefused,
		"esc\x1b[31mred":           KindRefused,
		"two\nlines":               KindRefused,
		"big.bin":                  KindRefused,
		"deep/a/b/c.txt":           KindModified,
		"dir-to-file":              KindType,
		"dir-to-file/inner.txt":    KindDeleted,
		"run.sh":                   KindAdded,
		"link-ok":                  KindSymlink,
		"link-abs":                 KindRefused,
		"link-retarget":            KindSymlink,
		"fifo":                     KindRefused,
	}
	gm := byPath(got)
	for p, k := range want {
		c, ok := gm[p]
		if !ok {
			t.Errorf("%s: missing, want %s", Escape(p), k)
			continue
		}
		if c.Kind != k {
			t.Errorf("%s: kind %s (reason %q), want %s", Escape(p), c.Kind, c.Reason, k)
		}
	}
	for p, c := range gm {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: unexpected %s (reason %q)", Escape(p), c.Kind, c.Reason)
		}
	}

	// Details.
	if c := gm["new-name.txt"]; c.SameAs != "old-name.txt" {
		t.Errorf("rename: SameAs = %q, want old-name.txt", c.SameAs)
	}
	if c := gm["old-name.txt"]; c.Kind != KindDeleted || c.SameAs != "" {
		t.Errorf("rename: the delete must stay a plain delete, got %+v", c)
	}
	if c := gm["text-to-bin.txt"]; !c.BecameBinary || !c.Binary {
		t.Errorf("text-to-bin: BecameBinary=%v Binary=%v, want both", c.BecameBinary, c.Binary)
	}
	if c := gm["mod.txt"]; c.BecameBinary || c.Binary || !bytes.Equal(c.NewHash, sha("one\ntwo\n")) || !bytes.Equal(c.OldHash, sha("one\n")) || c.NewSize != 8 || c.OldSize != 4 {
		t.Errorf("mod.txt: %+v", c)
	}
	if c := gm["chmod.txt"]; c.OldMode != 0o644 || c.NewMode != 0o755 || !strings.Contains(c.Risk, "executable") {
		t.Errorf("chmod.txt: modes %o -> %o risk %q", c.OldMode, c.NewMode, c.Risk)
	}
	if c := gm["run.sh"]; !strings.Contains(c.Risk, "executable") {
		t.Errorf("run.sh: risk %q, want new executable bit", c.Risk)
	}
	if c := gm["new.txt"]; c.Risk != "" {
		t.Errorf("new.txt: risk %q, want none", c.Risk)
	}
	if c := gm[".github/workflows/ci.yml"]; c.Risk == "" {
		t.Errorf("ci.yml: no risk")
	}
	if c := gm[".git/hooks/pre-commit"]; !strings.Contains(c.Reason, "protected") || c.Risk == "" {
		t.Errorf(".git/hooks/pre-commit: reason %q risk %q", c.Reason, c.Risk)
	}
	if c := gm["link-abs"]; c.Reason != "symlink link-abs: target is an absolute path" {
		t.Errorf("link-abs: reason %q", c.Reason)
	}
	if c := gm["newdir/link-up"]; c.Reason != "symlink newdir/link-up: target is a relative path escaping the workspace" {
		t.Errorf("link-up: reason %q", c.Reason)
	}
	for _, c := range got {
		if strings.Contains(c.Reason, "passwd") {
			t.Errorf("%s: reason prints a symlink target: %q", Escape(c.Path), c.Reason)
		}
	}
	if c := gm["both-edit.txt"]; !strings.Contains(c.Reason, "W changed") {
		t.Errorf("both-edit: reason %q", c.Reason)
	}
	if c := gm["big.bin"]; !strings.Contains(c.Reason, "over the limit") {
		t.Errorf("big.bin: reason %q", c.Reason)
	}
	if _, ok := opened.Load("S:big.bin"); ok {
		t.Errorf("big.bin over the size limit was read")
	}
	for _, p := range []string{"untouched.txt", "crlf-untouched.txt", "w-only-edit.txt", "w-created.txt", "deep/a/b/c.txt"} {
		if _, ok := opened.Load("W:" + p); ok && p != "deep/a/b/c.txt" {
			t.Errorf("W:%s was read", p)
		}
		if _, ok := opened.Load("S:" + p); ok && p != "deep/a/b/c.txt" {
			t.Errorf("S:%s was read", p)
		}
	}
}

// TestUntouchedFilesNeverRead: every file whose stat is unchanged is never opened, so
// a file the diff could not read at all is no error when it is untouched. The OnOpen
// hook plays the unreadable file (chmod 000 does not stop root).
func TestUntouchedFilesNeverRead(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	files := map[string]string{"changed.txt": "a\n", "unreadable.txt": "secret\n", "dir/unreadable2": "x"}
	for i := range 50 {
		files[filepath.Join("many", string(rune('a'+i%26))+strings.Repeat("x", i))] = "content"
	}
	writeFiles(t, w, files)
	m := testSnapshot(t, w, s, true)
	writeFiles(t, s, map[string]string{"changed.txt": "b\nb\n"})
	writeFiles(t, w, map[string]string{"dir/w-edit": "w"})
	errUnreadable := errors.New("permission denied (test)")
	var opens []string
	var mu sync.Mutex
	got, err := Compute(context.Background(), w, s, m, Options{OnOpen: func(tr Tree, p string) error {
		mu.Lock()
		opens = append(opens, tr.String()+":"+p)
		mu.Unlock()
		if p != "changed.txt" {
			return errUnreadable
		}
		return nil
	}})
	if err != nil {
		t.Fatalf("Compute read an untouched file: %v", err)
	}
	if len(got) != 1 || got[0].Path != "changed.txt" || got[0].Kind != KindModified {
		t.Fatalf("changes = %+v, want one modified changed.txt", got)
	}
	slices.Sort(opens)
	if !slices.Equal(opens, []string{"S:changed.txt", "W:changed.txt"}) {
		t.Errorf("opened %q, want only S:changed.txt and W:changed.txt (its base)", opens)
	}
	// And the hook's error is not swallowed when the file is really needed.
	writeFiles(t, s, map[string]string{"unreadable.txt": "changed by agent\n"})
	_, err = Compute(context.Background(), w, s, m, Options{OnOpen: func(tr Tree, p string) error {
		if p == "unreadable.txt" {
			return errUnreadable
		}
		return nil
	}})
	if !errors.Is(err, errUnreadable) {
		t.Errorf("changed unreadable file: err = %v, want the read error", err)
	}
}

// TestOnlyWChanged: files the developer created, edited or deleted in W, with S untouched,
// are not changes; secrets excluded and specials skipped are never "deleted".
func TestOnlyWChanged(t *testing.T) {
	w, s, _ := setup(t, nil, false)
	writeFiles(t, w, map[string]string{"a": "a", "b": "b", "c/d": "d", ".env": "S=1", "x/.aws/credentials": "k", "y/.env/inner": "k"})
	must(t, unix.Mkfifo(filepath.Join(w, "fifo"), 0o600))
	m := testSnapshot(t, w, s, false)
	writeFiles(t, w, map[string]string{"a": "edited", "new": "n", "c/new": "n"})
	must(t, os.Remove(filepath.Join(w, "b")))
	must(t, os.Chmod(filepath.Join(w, "c/d"), 0o600))
	got, err := Compute(context.Background(), w, s, m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("changes = %+v, want none", got)
	}
}

// TestRemovedDirWithNewWEntries: S removing a directory below which the developer created
// files in W during the session is a conflict, not a plain delete.
func TestRemovedDirWithNewWEntries(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	writeFiles(t, w, map[string]string{"gen/a.txt": "a", "other/b.txt": "b"})
	m := testSnapshot(t, w, s, true)
	must(t, os.RemoveAll(filepath.Join(s, "gen")))
	must(t, os.RemoveAll(filepath.Join(s, "other")))
	writeFiles(t, w, map[string]string{"gen/dev-notes.txt": "mine"})
	got, err := Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	gm := byPath(got)
	if c := gm["gen"]; c.Kind != KindConflict || !strings.Contains(c.Reason, "gen/dev-notes.txt") {
		t.Errorf("gen: %s %q, want a conflict naming gen/dev-notes.txt", c.Kind, c.Reason)
	}
	if gm["gen/a.txt"].Kind != KindDeleted || gm["other"].Kind != KindDeleted || gm["other/b.txt"].Kind != KindDeleted {
		t.Errorf("changes %+v", got)
	}
	if _, ok := gm["gen/dev-notes.txt"]; ok {
		t.Errorf("the developer's new file is listed")
	}
}

// TestNoWritesBelowExcludedSecrets: S creating entries inside a directory the snapshot
// excluded as a secret is refused, even where W has no such entry.
func TestNoWritesBelowExcludedSecrets(t *testing.T) {
	w, s, _ := setup(t, nil, false)
	writeFiles(t, w, map[string]string{"conf/.env/key": "secret", "a.txt": "a"})
	m := testSnapshot(t, w, s, false)
	writeFiles(t, s, map[string]string{"conf/.env/authorized": "agent key", "conf/.env/key": "agent"})
	got, err := Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	gm := byPath(got)
	for _, p := range []string{"conf/.env", "conf/.env/authorized", "conf/.env/key"} {
		if gm[p].Kind != KindRefused {
			t.Errorf("%s: %s %q, want refused", p, gm[p].Kind, gm[p].Reason)
		}
	}
	if r := gm["conf/.env/authorized"].Reason; r != "below conf/.env, excluded from the snapshot by secret rule .env" {
		t.Errorf("reason %q", r)
	}
}

func TestAllowUnsafeNames(t *testing.T) {
	w, s, _ := setup(t, nil, false)
	m := testSnapshot(t, w, s, false)
	writeFiles(t, s, map[string]string{"two\nlines": "x"})
	for _, allow := range []bool{false, true} {
		got, err := Compute(context.Background(), w, s, m, Options{AllowUnsafeNames: allow})
		must(t, err)
		want := map[bool]Kind{false: KindRefused, true: KindAdded}[allow]
		if len(got) != 1 || got[0].Kind != want {
			t.Errorf("AllowUnsafeNames=%v: %+v, want one %s", allow, got, want)
		}
	}
}

// TestSymlinksNeverFollowed: symlinks to directories (inside or outside the tree) are
// entries, never walked into, in W and in S.
func TestSymlinksNeverFollowed(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	outside := t.TempDir()
	writeFiles(t, outside, map[string]string{"o1": "x", "o2/o3": "y"})
	writeFiles(t, w, map[string]string{"d/f": "f"})
	must(t, os.Symlink(outside, filepath.Join(w, "ext")))
	m := testSnapshot(t, w, s, true)
	must(t, os.Symlink("/", filepath.Join(s, "root")))
	must(t, os.Symlink("..", filepath.Join(s, "d", "up")))
	must(t, os.Symlink("../..", filepath.Join(s, "d", "up2")))
	must(t, os.Symlink("f", filepath.Join(s, "d", "self")))
	var opened []string
	var mu sync.Mutex
	got, err := Compute(context.Background(), w, s, m, Options{OnOpen: func(tr Tree, p string) error {
		mu.Lock()
		defer mu.Unlock()
		opened = append(opened, tr.String()+":"+p)
		return nil
	}})
	must(t, err)
	want := map[string]Kind{"root": KindRefused, "d/up": KindSymlink, "d/up2": KindRefused, "d/self": KindSymlink}
	if len(got) != len(want) {
		t.Fatalf("changes %+v, want %v", got, want)
	}
	for _, c := range got {
		if want[c.Path] != c.Kind {
			t.Errorf("%s: %s %q, want %s", c.Path, c.Kind, c.Reason, want[c.Path])
		}
	}
	slices.Sort(opened)
	if !slices.Equal(opened, []string{"S:d/self", "S:d/up", "S:d/up2", "S:root"}) {
		t.Errorf("read %q, want only the new links' targets", opened)
	}
}

// TestComponentWalkFallback runs the symlink, escape and class tests through the
// pre-openat2 path (one O_NOFOLLOW openat per component).
func TestComponentWalkFallback(t *testing.T) {
	componentWalkOnly = true
	defer func() { componentWalkOnly = false }()
	t.Run("symlinks", TestSymlinksNeverFollowed)
	t.Run("readfile", TestReadFile)
	t.Run("classes", func(t *testing.T) { testComputeClasses(t, true) })
}

// mkdirChain creates depth nested directories named name below dir, component by
// component (the full path exceeds PATH_MAX), and a file "f" at the bottom.
func mkdirChain(t *testing.T, dir, name string, depth int) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	for range depth {
		must(t, unix.Mkdirat(fd, name, 0o755))
		nfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		must(t, err)
		unix.Close(fd)
		fd = nfd
	}
	ffd, err := unix.Openat(fd, "f", unix.O_WRONLY|unix.O_CREAT, 0o644)
	must(t, err)
	unix.Close(ffd)
	unix.Close(fd)
}

// TestTooDeep: a directory chain in S whose paths exceed PATH_MAX cannot make the diff
// fail or list it as an ordinary addition: the deepest reachable directory is refused.
func TestTooDeep(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	writeFiles(t, w, map[string]string{"a.txt": "a"})
	m := testSnapshot(t, w, s, true)
	mkdirChain(t, s, strings.Repeat("d", 200), 25) // 25 × 201 bytes > 4095
	writeFiles(t, s, map[string]string{"a.txt": "agent"})
	got, err := Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	var refused, added int
	for _, c := range got {
		switch {
		case c.Kind == KindRefused && strings.Contains(c.Reason, "too deep"):
			refused++
		case c.Kind == KindAdded:
			added++
		case c.Path == "a.txt" && c.Kind == KindModified:
		default:
			t.Errorf("%.40s…: %s %q", c.Path, c.Kind, c.Reason)
		}
		if len(c.Path) > maxPathLen {
			t.Errorf("listed a path of %d bytes", len(c.Path))
		}
	}
	if refused != 1 || added != 19 || byPath(got)["a.txt"].Kind != KindModified {
		t.Errorf("refused %d (want 1), added %d (want the 19 reachable directories), changes %d", refused, added, len(got))
	}
}

// TestTooDeepInUnchangedDir: an over-long name the agent put in a directory it did not
// otherwise change is still reported (refused on the directory), not silently dropped.
func TestTooDeepInUnchangedDir(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	long := strings.Repeat("n", 250)
	dir := strings.Repeat(long+"/", 16) // 16 × 251 = 4016 bytes
	writeFiles(t, w, map[string]string{dir: ""})
	m := testSnapshot(t, w, s, true)
	mkdirChain(t, filepath.Join(s, dir), long, 0) // the file "f" alone: 4017 bytes, fits
	fd, err := unix.Open(filepath.Join(s, dir), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	ffd, err := unix.Openat(fd, long, unix.O_WRONLY|unix.O_CREAT, 0o644) // 4016+250 bytes
	must(t, err)
	unix.Close(ffd)
	unix.Close(fd)
	got, err := Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	gm := byPath(got)
	d := strings.TrimSuffix(dir, "/")
	if c := gm[d]; c.Kind != KindRefused || !strings.Contains(c.Reason, "too deep") {
		t.Errorf("deep directory: %s %q, want refused", c.Kind, c.Reason)
	}
	if c := gm[d+"/f"]; c.Kind != KindAdded {
		t.Errorf("short file in it: %s, want added", c.Kind)
	}
}

// TestForgedMtimeCaught: an agent that rewrites a file with the same size and then sets
// its mtime back (touch -d) still changes the host ctime, which it cannot set: the edit is
// found.
func TestForgedMtimeCaught(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	writeFiles(t, w, map[string]string{"f.go": "package a\n"})
	m := testSnapshot(t, w, s, true)
	p := filepath.Join(s, "f.go")
	fi, err := os.Stat(p)
	must(t, err)
	must(t, os.WriteFile(p, []byte("package b\n"), 0o644))
	must(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
	var st unix.Stat_t
	must(t, unix.Lstat(p, &st))
	if e := m.Lookup("f.go"); e.S.Mtime != st.Mtim.Nano() || e.S.Size != st.Size || e.S.Ino != st.Ino {
		t.Fatalf("test setup: mtime/size/inode not restored")
	}
	got, err := Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	if len(got) != 1 || got[0].Kind != KindModified {
		t.Errorf("changes %+v, want f.go modified", got)
	}
}
