package snapshot

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/digest"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/internal/testenv"
)

// canary is secret content that must never reach S.
const canary = "CANARY-7f3a9c1e-do-not-copy"

func write(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func take(t *testing.T, w string, opts Options) (string, *manifest.Manifest, *Report) {
	t.Helper()
	s := filepath.Join(t.TempDir(), "snap")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, rep, err := Take(ctx, w, s, opts)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return s, m, rep
}

// grepTree fails t if needle occurs in any file or symlink target under root.
func grepTree(t *testing.T, root, needle string) {
	t.Helper()
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var b []byte
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			b = []byte(l)
		case d.Type().IsRegular():
			b, _ = os.ReadFile(p)
		}
		if bytes.Contains(b, []byte(needle)) || strings.Contains(p, needle) {
			t.Errorf("%s holds %q", p, needle)
		}
		return nil
	})
}

func lstat(t *testing.T, p string) *unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func TestTakeCopiesTree(t *testing.T) {
	w := t.TempDir()
	outside := t.TempDir()
	write(t, filepath.Join(outside, "target"), canary, 0o644)
	write(t, filepath.Join(w, "a.go"), "package a\n", 0o644)
	write(t, filepath.Join(w, "bin/run.sh"), "#!/bin/sh\n", 0o755|os.ModeSetuid|os.ModeSetgid)
	write(t, filepath.Join(w, "deep/er/still/x.txt"), strings.Repeat("x", 3<<20), 0o600)
	write(t, filepath.Join(w, "empty"), "", 0o644)
	write(t, filepath.Join(w, "ro/file"), "ro", 0o444)
	os.Chmod(filepath.Join(w, "ro"), 0o555)
	t.Cleanup(func() { os.Chmod(filepath.Join(w, "ro"), 0o755) })
	os.Mkdir(filepath.Join(w, "sticky"), 0o777|os.ModeSticky)
	os.Chmod(filepath.Join(w, "sticky"), 0o777|os.ModeSticky)
	os.Symlink(filepath.Join(outside, "target"), filepath.Join(w, "abs-link"))
	os.Symlink("../../etc/passwd", filepath.Join(w, "rel-link"))
	os.Symlink(outside, filepath.Join(w, "dir-link"))
	os.Symlink("nowhere", filepath.Join(w, "dangling"))
	os.Link(filepath.Join(w, "a.go"), filepath.Join(w, "hard.go"))
	name := "ctl\x1b[31m\nname"
	write(t, filepath.Join(w, name), "odd", 0o644)
	mt := time.Date(2020, 1, 2, 3, 4, 5, 6000, time.UTC)
	os.Chtimes(filepath.Join(w, "a.go"), mt, mt)

	s, m, rep := take(t, w, Options{NoReflink: true})
	grepTree(t, s, canary) // no link was followed

	for _, c := range []struct {
		rel, content string
		mode         uint32
	}{
		{"a.go", "package a\n", 0o644}, {"hard.go", "package a\n", 0o644}, {"bin/run.sh", "#!/bin/sh\n", 0o755},
		{"empty", "", 0o644}, {"ro/file", "ro", 0o444}, {name, "odd", 0o644},
	} {
		b, err := os.ReadFile(filepath.Join(s, c.rel))
		if err != nil || string(b) != c.content {
			t.Errorf("%q in S: %q, %v", c.rel, b, err)
		}
		if st := lstat(t, filepath.Join(s, c.rel)); st.Mode&0o7777 != c.mode {
			t.Errorf("%q mode %o, want %o (special bits dropped)", c.rel, st.Mode&0o7777, c.mode)
		}
		e := m.Lookup(c.rel)
		if e == nil {
			t.Fatalf("no manifest entry for %q", c.rel)
		}
		if sum := digest.Bytes([]byte(c.content)); !bytes.Equal(e.Hash, sum) {
			t.Errorf("%q hash %x, want %x", c.rel, e.Hash, sum)
		}
	}
	if st := lstat(t, filepath.Join(s, "sticky")); st.Mode&0o7777 != 0o777 {
		t.Errorf("sticky dir mode %o in S", st.Mode&0o7777)
	}
	if st := lstat(t, filepath.Join(s, "ro")); st.Mode&0o7777 != 0o555 {
		t.Errorf("read-only dir mode %o in S", st.Mode&0o7777)
	}
	if got := lstat(t, filepath.Join(s, "a.go")).Mtim.Nano(); got != mt.UnixNano() {
		t.Errorf("mtime not kept: %d, want %d", got, mt.UnixNano())
	}
	for link, target := range map[string]string{"abs-link": filepath.Join(outside, "target"), "rel-link": "../../etc/passwd", "dir-link": outside, "dangling": "nowhere"} {
		got, err := os.Readlink(filepath.Join(s, link))
		if err != nil || got != target {
			t.Errorf("symlink %s in S -> %q (%v), want %q", link, got, err, target)
		}
	}
	a, h := lstat(t, filepath.Join(s, "a.go")), lstat(t, filepath.Join(s, "hard.go"))
	if a.Ino == h.Ino || a.Nlink != 1 || h.Nlink != 1 {
		t.Errorf("hardlinks in W stayed linked in S: ino %d %d nlink %d %d", a.Ino, h.Ino, a.Nlink, h.Nlink)
	}
	if rep.Symlinks != 4 || rep.Copied == 0 || rep.Reflinked != 0 {
		t.Errorf("report %+v", rep)
	}
	checkManifestMatches(t, w, s, m)
}

// checkManifestMatches proves a no-op session diffs empty: every path in S is a manifest
// entry whose S stat is what S holds now, every W entry's W stat is what W holds now, and
// brood wrote nothing else into S.
func checkManifestMatches(t *testing.T, w, s string, m *manifest.Manifest) {
	t.Helper()
	seen := map[string]bool{}
	filepath.WalkDir(s, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == s {
			return nil
		}
		rel, _ := filepath.Rel(s, p)
		seen[rel] = true
		e := m.Lookup(rel)
		if e == nil {
			t.Errorf("S holds %q which is not in the manifest", rel)
			return nil
		}
		var st unix.Stat_t
		unix.Lstat(p, &st)
		if got := manifest.FromStat(&st); got != e.S {
			t.Errorf("%q: S stat %+v, manifest %+v", rel, got, e.S)
		}
		return nil
	})
	for _, e := range m.Entries {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(w, e.Path), &st); err != nil {
			t.Errorf("manifest entry %q: %v", e.Path, err)
			continue
		}
		if got := manifest.FromStat(&st); got != e.W {
			t.Errorf("%q: W stat %+v, manifest %+v", e.Path, got, e.W)
		}
		if e.S.Type != manifest.TypeNone && !seen[e.Path] {
			t.Errorf("manifest says %q is in S, it is not", e.Path)
		}
		if (e.Excluded != "" || e.Skipped != "") && (e.S.Type != manifest.TypeNone || seen[e.Path]) {
			t.Errorf("excluded/skipped %q has a copy in S", e.Path)
		}
	}
}

func TestSecretRules(t *testing.T) {
	w := t.TempDir()
	secret := map[string]string{
		".env": ".env", "sub/.env.local": ".env.*", "a/b/c/server.pem": "*.pem", "tls.KEY": "*.key",
		"id_rsa": "id_rsa*", "home/id_rsa.pub": "id_rsa*", "x/id_ed25519": "id_ed25519*",
		".ssh/config": ".ssh/", "deep/.aws/credentials": ".aws/", ".gnupg/pubring.kbx": ".gnupg/",
		"y/.netrc": ".netrc", ".git-credentials": ".git-credentials",
		"k/id_ecdsa": "id_ecdsa*", "id_dsa.pub": "id_dsa*", ".npmrc": ".npmrc", "py/.pypirc": ".pypirc",
		".docker/config.json": ".docker/config.json", "home/.kube/config": ".kube/config",
		"cert.p12": "*.p12", "x.PFX": "*.pfx", "putty.ppk": "*.ppk",
	}
	for p := range secret {
		write(t, filepath.Join(w, p), canary, 0o600)
	}
	ordinary := []string{"internal/secrets/rotate.go", "docs/secret-handling.md", "pkg/credentials/x.go",
		"key.pem.go", ".envrc", "env", "my.env", "keys/k.go", "ssh/config", ".aws.go", "id-rsa.txt", "pem", "netrc",
		"npmrc.go", "kube/config.go", "kube/config", ".kube/config.go", ".docker/other.json", "docker/config.json",
		"npmrc", "p12.go", "pypirc.md"}
	for _, p := range ordinary {
		write(t, filepath.Join(w, p), "ordinary "+p, 0o644)
	}
	os.Symlink("/etc/hosts", filepath.Join(w, "link.pem")) // rules apply to every type

	s, m, rep := take(t, w, Options{ExtraRules: []string{"*.p12"}})
	grepTree(t, s, canary)
	for p, rule := range secret {
		top := p
		if i := strings.Index(p, "/."); strings.HasSuffix(rule, "/") && i >= 0 {
			top = p[:strings.Index(p[i+1:], "/")+i+1] // the excluded directory
		} else if strings.HasSuffix(rule, "/") {
			top = p[:strings.Index(p, "/")]
		}
		e := m.Lookup(top)
		if e == nil || e.Excluded != rule || e.S.Type != manifest.TypeNone {
			t.Errorf("%q: manifest entry %+v, want excluded by %q", top, e, rule)
		}
		if _, err := os.Lstat(filepath.Join(s, top)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%q exists in S", top)
		}
	}
	for _, p := range ordinary {
		if b, err := os.ReadFile(filepath.Join(s, p)); err != nil || string(b) != "ordinary "+p {
			t.Errorf("ordinary file %q not copied: %q %v", p, b, err)
		}
	}
	if e := m.Lookup("link.pem"); e == nil || e.Excluded != "*.pem" {
		t.Errorf("symlink named like a secret: %+v", e)
	}
	if len(rep.Excluded) != len(secret)+1 {
		t.Errorf("report lists %d exclusions, want %d: %+v", len(rep.Excluded), len(secret)+1, rep.Excluded)
	}
	checkManifestMatches(t, w, s, m)
	if _, _, err := Take(context.Background(), w, filepath.Join(t.TempDir(), "s"), Options{ExtraRules: []string{"[bad"}}); !errors.Is(err, ErrBadRule) {
		t.Errorf("bad extra rule: %v", err)
	}
}

func TestSecretHardlinks(t *testing.T) {
	w := t.TempDir()
	write(t, filepath.Join(w, "m/server.pem"), canary, 0o600)
	// Names walked before and after the secret's own name, in other directories.
	for _, p := range []string{"a/notes.txt", "z/notes.txt", "m/aaa", "m/zzz"} {
		os.MkdirAll(filepath.Join(w, filepath.Dir(p)), 0o755)
		if err := os.Link(filepath.Join(w, "m/server.pem"), filepath.Join(w, p)); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(w, ".ssh/id_key"), canary+"2", 0o600)
	os.Link(filepath.Join(w, ".ssh/id_key"), filepath.Join(w, "b.txt"))
	write(t, filepath.Join(w, "keep.txt"), "keep", 0o644)
	os.Link(filepath.Join(w, "keep.txt"), filepath.Join(w, "keep2.txt"))

	s, m, rep := take(t, w, Options{})
	grepTree(t, s, canary)
	for _, p := range []string{"a/notes.txt", "z/notes.txt", "m/aaa", "m/zzz", "b.txt"} {
		e := m.Lookup(p)
		if e == nil || !strings.HasPrefix(e.Excluded, "hardlink of a secret") || e.Hash != nil || e.S.Type != manifest.TypeNone {
			t.Errorf("%q: %+v", p, e)
		}
	}
	for _, p := range []string{"keep.txt", "keep2.txt"} {
		if b, _ := os.ReadFile(filepath.Join(s, p)); string(b) != "keep" {
			t.Errorf("%q not copied", p)
		}
	}
	if rep.Files != 2 {
		t.Errorf("report counts %d files, want 2", rep.Files)
	}
	checkManifestMatches(t, w, s, m)
	// A dry run lists the same exclusions.
	_, dry, err := Take(context.Background(), w, "", Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Excluded) != len(rep.Excluded) || len(dry.Excluded) != 7 {
		t.Errorf("dry run excluded %+v, snapshot excluded %+v", dry.Excluded, rep.Excluded)
	}
}

func TestSpecialFilesSkipped(t *testing.T) {
	w := t.TempDir()
	write(t, filepath.Join(w, "ok"), "ok", 0o644)
	if err := unix.Mkfifo(filepath.Join(w, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(w, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := map[string]string{"fifo": "fifo", "sock": "socket"}
	if os.Geteuid() == 0 {
		if err := unix.Mknod(filepath.Join(w, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err == nil {
			want["null"] = "character device"
		}
	}
	s, m, rep := take(t, w, Options{})
	for p, kind := range want {
		e := m.Lookup(p)
		if e == nil || !strings.HasPrefix(e.Skipped, kind+":") || e.S.Type != manifest.TypeNone {
			t.Errorf("%q: %+v", p, e)
		}
		if _, err := os.Lstat(filepath.Join(s, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%q copied into S", p)
		}
	}
	if len(rep.Skipped) != len(want) {
		t.Errorf("skipped %+v", rep.Skipped)
	}
	checkManifestMatches(t, w, s, m)
}

func TestSparseFileStaysSparse(t *testing.T) {
	w := t.TempDir()
	p := filepath.Join(w, "sparse.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	const size = 2 << 30
	if _, err := f.WriteAt([]byte("middle"), 1<<30); err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("start"), 0)
	f.Truncate(size)
	f.Close()
	if lstat(t, p).Blocks*512 > 1<<20 {
		testenv.Skip(t, "the temp filesystem does not keep holes")
	}
	s, m, _ := take(t, w, Options{NoReflink: true})
	st := lstat(t, filepath.Join(s, "sparse.img"))
	if st.Size != size || st.Blocks*512 > 1<<20 {
		t.Fatalf("S copy: size %d, allocated %d bytes; want %d, ≤ 1 MiB", st.Size, st.Blocks*512, size)
	}
	g, _ := os.Open(filepath.Join(s, "sparse.img"))
	defer g.Close()
	buf := make([]byte, 6)
	g.ReadAt(buf, 1<<30)
	if string(buf) != "middle" {
		t.Fatalf("data at 1 GiB: %q", buf)
	}
	g.ReadAt(buf[:5], 0)
	if string(buf[:5]) != "start" {
		t.Fatalf("data at 0: %q", buf[:5])
	}
	checkManifestMatches(t, w, s, m)
}

func TestDryRunCreatesNothing(t *testing.T) {
	w := t.TempDir()
	write(t, filepath.Join(w, ".env"), canary, 0o600)
	write(t, filepath.Join(w, "src/main.go"), "package main", 0o644)
	write(t, filepath.Join(w, ".git/config"), "[remote \"o\"]\n\turl = https://u:"+canary+"@h/r\n", 0o644)
	unix.Mkfifo(filepath.Join(w, "src/pipe"), 0o644)
	parent := t.TempDir()
	s := filepath.Join(parent, "snap")
	m, rep, err := Take(context.Background(), w, s, Options{DryRun: true, KeepBase: true, BaseDir: filepath.Join(parent, "base")})
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 0 {
		t.Fatalf("dry run created %v", ents)
	}
	if len(rep.Excluded) != 1 || rep.Excluded[0] != (Item{".env", "secret rule .env"}) {
		t.Errorf("excluded %+v", rep.Excluded)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Path != "src/pipe" {
		t.Errorf("skipped %+v", rep.Skipped)
	}
	if len(rep.Sanitized) != 1 || rep.Sanitized[0].Path != ".git/config" {
		t.Errorf("sanitized %+v", rep.Sanitized)
	}
	if e := m.Lookup("src/main.go"); e == nil || e.W.Type != manifest.TypeRegular {
		t.Errorf("dry-run manifest %+v", e)
	}
}

func TestGitConfigSanitized(t *testing.T) {
	w := t.TempDir()
	cfg := "[core]\n\tbare = false\n[remote \"origin\"]\n\turl = https://bob:" + canary + "@github.com/o/r.git\n" +
		"[http]\n\textraheader = AUTHORIZATION: bearer " + canary + "\n[credential]\n\thelper = store\n"
	write(t, filepath.Join(w, ".git/config"), cfg, 0o644)
	write(t, filepath.Join(w, "vendor/lib/.git/config"), cfg, 0o644)
	write(t, filepath.Join(w, ".git/modules/sub/config"), cfg, 0o644)
	write(t, filepath.Join(w, ".git/config.worktree"), cfg, 0o644)
	write(t, filepath.Join(w, ".git/worktrees/wt/config.worktree"), cfg, 0o644)
	write(t, filepath.Join(w, ".git/modules/refs/config"), cfg, 0o644) // a submodule named refs
	write(t, filepath.Join(w, ".git/refs/heads/config"), "0123456789abcdef0123456789abcdef01234567\n", 0o644)
	write(t, filepath.Join(w, ".git/HEAD"), "ref: refs/heads/main\n", 0o644)
	write(t, filepath.Join(w, "sub2/.git/config"), "[core\n"+canary, 0o644) // unparseable
	write(t, filepath.Join(w, "plain/.git/config"), "[core]\n\tbare = false # fine\n", 0o644)
	s, m, rep := take(t, w, Options{})
	grepTree(t, s, canary)
	for _, p := range []string{".git/config", "vendor/lib/.git/config", ".git/modules/sub/config",
		".git/config.worktree", ".git/worktrees/wt/config.worktree", ".git/modules/refs/config"} {
		b, _ := os.ReadFile(filepath.Join(s, p))
		if !strings.Contains(string(b), "url = https://github.com/o/r.git") || strings.Contains(string(b), "credential") {
			t.Errorf("%s in S:\n%s", p, b)
		}
		e := m.Lookup(p)
		if sum := digest.Bytes([]byte(cfg)); e == nil || !e.Sanitized || !bytes.Equal(e.Hash, sum) {
			t.Errorf("%s manifest entry %+v", p, e)
		}
	}
	if e := m.Lookup("sub2/.git/config"); e == nil || !e.Sanitized || lstat(t, filepath.Join(s, "sub2/.git/config")).Size != 0 {
		t.Errorf("unparseable config: %+v", e)
	}
	if b, _ := os.ReadFile(filepath.Join(s, "plain/.git/config")); string(b) != "[core]\n\tbare = false # fine\n" {
		t.Errorf("clean config rewritten: %q", b)
	}
	if e := m.Lookup("plain/.git/config"); e.Sanitized {
		t.Errorf("clean config marked sanitized")
	}
	if b, _ := os.ReadFile(filepath.Join(s, ".git/refs/heads/config")); !strings.HasPrefix(string(b), "0123") {
		t.Errorf("a ref named config was treated as a git config: %q", b)
	}
	if len(rep.Sanitized) != 7 {
		t.Errorf("sanitized report %+v", rep.Sanitized)
	}
	for _, sf := range rep.Sanitized {
		if strings.Contains(sf.Note, canary) {
			t.Errorf("report note leaks: %q", sf.Note)
		}
	}
	checkManifestMatches(t, w, s, m)
}

// TestSwapDuringWalk replaces entries of W between listing and opening: a directory by a
// symlink to outside, a file by a symlink, a file by a FIFO. The snapshot must fail with
// ErrChanged without following anything or hanging, and leave nothing behind.
func TestSwapDuringWalk(t *testing.T) {
	outside := t.TempDir()
	write(t, filepath.Join(outside, "loot"), canary, 0o644)
	for _, tc := range []struct {
		name string
		make func(w string)
		swap func(w string)
	}{
		{"dir to symlink", func(w string) { write(t, filepath.Join(w, "d/f"), "f", 0o644) }, func(w string) {
			os.RemoveAll(filepath.Join(w, "d"))
			os.Symlink(outside, filepath.Join(w, "d"))
		}},
		{"file to symlink", func(w string) { write(t, filepath.Join(w, "d"), "f", 0o644) }, func(w string) {
			os.Remove(filepath.Join(w, "d"))
			os.Symlink(filepath.Join(outside, "loot"), filepath.Join(w, "d"))
		}},
		{"file to fifo", func(w string) { write(t, filepath.Join(w, "d"), "f", 0o644) }, func(w string) {
			os.Remove(filepath.Join(w, "d"))
			unix.Mkfifo(filepath.Join(w, "d"), 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := t.TempDir()
			tc.make(w)
			testHookOpen = func(rel string) {
				if rel == "d" {
					tc.swap(w)
				}
			}
			defer func() { testHookOpen = nil }()
			parent := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, _, err := Take(ctx, w, filepath.Join(parent, "s"), Options{})
			if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), filepath.Join(w, "d")) {
				t.Fatalf("Take = %v, want ErrChanged naming %s", err, filepath.Join(w, "d"))
			}
			if ents, _ := os.ReadDir(parent); len(ents) != 0 {
				t.Fatalf("failed snapshot left %v", ents)
			}
		})
	}
}

// TestConcurrentSwaps flips a directory and a symlink to outside while snapshots run:
// whatever the timing, S never holds anything from outside W.
func TestConcurrentSwaps(t *testing.T) {
	outside := t.TempDir()
	write(t, filepath.Join(outside, "loot"), canary, 0o644)
	w := t.TempDir()
	for i := 0; i < 200; i++ {
		write(t, filepath.Join(w, "f", string(rune('a'+i%26))+string(rune('a'+i/26))), "x", 0o644)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.Rename(filepath.Join(w, "f"), filepath.Join(w, "g"))
			os.Symlink(outside, filepath.Join(w, "f"))
			os.Remove(filepath.Join(w, "f"))
			os.Rename(filepath.Join(w, "g"), filepath.Join(w, "f"))
		}
	}()
	for i := 0; i < 30; i++ {
		s := filepath.Join(t.TempDir(), "s")
		_, _, err := Take(context.Background(), w, s, Options{})
		if err != nil && !errors.Is(err, ErrChanged) && !errors.Is(err, syscall.ENOENT) {
			t.Errorf("Take: %v", err)
		}
		grepTree(t, s, canary)
	}
	close(stop)
	<-done
}

func TestNotADirectory(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	write(t, f, "x", 0o644)
	if _, _, err := Take(context.Background(), f, filepath.Join(t.TempDir(), "s"), Options{}); !errors.Is(err, ErrNotDir) {
		t.Fatalf("Take(file) = %v", err)
	}
}

// TestSnapshotInsideWorkspace: a session directory inside W is never copied into itself.
func TestSnapshotInsideWorkspace(t *testing.T) {
	w := t.TempDir()
	write(t, filepath.Join(w, "a.go"), "package a", 0o644)
	sess := filepath.Join(w, "state/sess")
	os.MkdirAll(sess, 0o700)
	m, rep, err := Take(context.Background(), w, filepath.Join(sess, "snap"), Options{KeepBase: true, BaseDir: filepath.Join(sess, "base")})
	if err != nil {
		t.Fatal(err)
	}
	if e := m.Lookup("state/sess/snap"); e == nil || !strings.HasPrefix(e.Skipped, "brood's own") {
		t.Fatalf("S inside W: %+v (skipped %+v)", e, rep.Skipped)
	}
	if _, err := os.Lstat(filepath.Join(sess, "snap/state/sess/snap")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("S was copied into itself: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(sess, "snap/a.go")); string(b) != "package a" {
		t.Fatalf("a.go not copied")
	}
}

// TestUnknownDirentType takes the fstatat path for every entry, as on filesystems whose
// getdents leaves d_type unknown.
func TestUnknownDirentType(t *testing.T) {
	testUnknownType = true
	defer func() { testUnknownType = false }()
	w := t.TempDir()
	write(t, filepath.Join(w, "d/e/f.txt"), "f", 0o640)
	write(t, filepath.Join(w, "g.txt"), "g", 0o644)
	os.Symlink("d/e", filepath.Join(w, "link"))
	unix.Mkfifo(filepath.Join(w, "fifo"), 0o644)
	s, m, rep := take(t, w, Options{})
	if b, _ := os.ReadFile(filepath.Join(s, "d/e/f.txt")); string(b) != "f" {
		t.Errorf("d/e/f.txt not copied")
	}
	if l, _ := os.Readlink(filepath.Join(s, "link")); l != "d/e" {
		t.Errorf("link: %q", l)
	}
	if rep.Files != 2 || rep.Dirs != 2 || rep.Symlinks != 1 || len(rep.Skipped) != 1 {
		t.Errorf("report %+v", rep)
	}
	checkManifestMatches(t, w, s, m)
}

// TestIsGitConfig: every config git reads inside a git directory is sanitized (also for
// worktrees and for submodules with names like "refs"), refs and data are not.
func TestIsGitConfig(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{".git/config", true},
		{".git/config.worktree", true},
		{".git/worktrees/wt/config.worktree", true},
		{".git/modules/sub/config", true},
		{".git/modules/refs/config", true},
		{".git/modules/a/b/objects/config.worktree", true},
		{"nested/.git/config.worktree", true},
		{".git/modules/sub/.git/config", true},
		{".git/refs/heads/config", false},
		{".git/logs/refs/heads/config", false},
		{".git/worktrees/wt/refs/config", false},
		{"config", false},
		{"app/config", false},
		{".git/configs", false},
		{".GIT/Config", true}, // git's on a case-insensitive W
		{".git/Modules/Sub/CONFIG.WORKTREE", true},
		{".git/Refs/heads/config", false},
	} {
		if got := isGitConfig(tc.in); got != tc.want {
			t.Errorf("isGitConfig(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestSkipDirs: brood's state directory inside W (session new --workspace ~) is never
// copied, under any name, and is reported as skipped.
func TestSkipDirs(t *testing.T) {
	w := t.TempDir()
	write(t, filepath.Join(w, "a.go"), "package a", 0o644)
	write(t, filepath.Join(w, ".local/state/brood/sessions/x/snapshot/f"), canary, 0o644)
	s, m, rep := take(t, w, Options{SkipDirs: []string{filepath.Join(w, ".local/state/brood"), "/nonexistent/brood"}})
	grepTree(t, s, canary)
	if e := m.Lookup(".local/state/brood"); e == nil || !strings.HasPrefix(e.Skipped, "brood's own state directory") {
		t.Errorf("state dir: %+v (skipped %+v)", e, rep.Skipped)
	}
	if b, _ := os.ReadFile(filepath.Join(s, "a.go")); string(b) != "package a" {
		t.Error("a.go not copied")
	}
	_, rep, err := Take(context.Background(), w, "", Options{DryRun: true, SkipDirs: []string{filepath.Join(w, ".local/state/brood")}})
	if err != nil || len(rep.Skipped) != 1 {
		t.Errorf("dry run: %v, skipped %+v", err, rep.Skipped)
	}
}
