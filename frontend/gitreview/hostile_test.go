package gitreview

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// refusedMaster inspects and returns master's refusal, failing when it is not refused
// or the refusal does not contain want.
func refusedMaster(t *testing.T, w, s, want string) {
	t.Helper()
	r, err := Inspect(w, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range r.Refs {
		if u.Name == "refs/heads/master" {
			if !strings.Contains(u.Refused, want) {
				t.Fatalf("master refused %q, want %q", u.Refused, want)
			}
			if err := r.Apply(&u, BranchName("s", u.Name), noJournal); err == nil {
				t.Fatal("a refused ref was applied")
			}
			return
		}
	}
	t.Fatalf("master not reviewed: %+v", r)
}

// hostileTree commits a tree of entries on top of master in S and checks the refusal.
func hostileTree(t *testing.T, want string, entries ...[3]string) {
	t.Helper()
	w, s := newRepo(t)
	tree := looseObject(t, s, "tree", treeBody(entries...), "")
	commitOnTree(t, s, tree, git(t, s, "rev-parse", "HEAD"))
	refusedMaster(t, w, s, want)
}

func TestHostileTrees(t *testing.T) {
	_, s := newRepo(t)
	blob := git(t, s, "rev-parse", "HEAD:a.txt")
	sub := git(t, s, "rev-parse", "HEAD^{tree}")
	cases := []struct {
		name, want string
		entry      [3]string
	}{
		{".git", "tree entry .git: names a .git directory", [3]string{"40000", ".git", sub}},
		{".GIT.", "names a .git directory", [3]string{"40000", ".GIT.", sub}},
		{"git~1", "names a .git directory", [3]string{"40000", "GIT~1", sub}},
		{"dotdot", `"..`, [3]string{"40000", "..", sub}},
		{"control", `tree entry a\x1b[31mb: control byte`, [3]string{"100644", "a\x1b[31mb", blob}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { hostileTree(t, c.want, c.entry) })
	}
}

func TestHostileSymlinks(t *testing.T) {
	for target, want := range map[string]string{
		".git/config":        "target is inside a .git directory",
		"sub/../.git/hooks/": "target is inside a .git directory",
		"../../etc/passwd":   "target climbs out",
		"/etc/passwd":        "absolute target",
	} {
		t.Run(target, func(t *testing.T) {
			w, s := newRepo(t)
			link := looseObject(t, s, "blob", []byte(target), "")
			hostileTreeIn(t, w, s, "symlink l: "+want, [3]string{"120000", "l", link})
		})
	}
}

// hostileTreeIn is hostileTree on an existing pair.
func hostileTreeIn(t *testing.T, w, s, want string, entries ...[3]string) {
	t.Helper()
	tree := looseObject(t, s, "tree", treeBody(entries...), "")
	commitOnTree(t, s, tree, git(t, s, "rev-parse", "HEAD"))
	refusedMaster(t, w, s, want)
}

func TestForgedObject(t *testing.T) {
	w, s := newRepo(t)
	forged := looseObject(t, s, "blob", []byte("evil\n"), "1111111111111111111111111111111111111111")
	hostileTreeIn(t, w, s, "content hashes to", [3]string{"100644", "f", forged})
}

func TestOversizedObject(t *testing.T) {
	w, s := newRepo(t)
	// A loose object whose header claims 200 MB: refused from the header, never inflated.
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	fmt.Fprintf(zw, "blob %d\x00abc", 200<<20)
	zw.Close()
	id := "2222222222222222222222222222222222222222"
	writeFile(t, filepath.Join(s, ".git", "objects", id[:2]), id[2:], z.String())
	hostileTreeIn(t, w, s, "MaxObjectSize", [3]string{"100644", "big", id})
}

func TestMissingParentAndShallow(t *testing.T) {
	w, s := newRepo(t)
	tree := git(t, s, "rev-parse", "HEAD^{tree}")
	commitOnTree(t, s, tree, "3333333333333333333333333333333333333333")
	refusedMaster(t, w, s, "shallow or incomplete history")

	w, s = newRepo(t)
	agentCommit(t, s)
	writeFile(t, s, ".git/shallow", git(t, s, "rev-parse", "HEAD~1")+"\n")
	if r, _ := Inspect(w, s); !strings.Contains(r.Refused, "shallow") || r.Blocked() != 1 {
		t.Fatalf("shallow: %+v", r)
	}
	os.Remove(filepath.Join(s, ".git/shallow"))
	writeFile(t, s, ".git/info/grafts", git(t, s, "rev-parse", "HEAD")+"\n")
	if r, _ := Inspect(w, s); !strings.Contains(r.Refused, "grafts") {
		t.Fatalf("grafts: %+v", r)
	}
	os.Remove(filepath.Join(s, ".git/info/grafts"))
	os.Symlink("/etc", filepath.Join(s, ".git/refs/heads/evil"))
	if r, _ := Inspect(w, s); !strings.Contains(r.Refused, "refs/heads/evil is a symlink") {
		t.Fatalf("symlink in refs: %+v", r)
	}
}

func TestNotADescendant(t *testing.T) {
	w, s := newRepo(t)
	writeFile(t, s, "a.txt", "rewritten\n")
	git(t, s, "commit", "-q", "-a", "--amend", "-m", "rewritten init")
	r, err := Inspect(w, s)
	if err != nil {
		t.Fatal(err)
	}
	u := r.Refs[0]
	if !u.NotDescendant || !strings.Contains(u.Refused, "not a descendant") || len(u.Commits) != 1 {
		t.Fatalf("amended master: %+v", u)
	}
	if err := r.Apply(&u, BranchName("s", u.Name), noJournal); err == nil {
		t.Fatal("a rewritten history was applied")
	}
}

func TestHostileRefNames(t *testing.T) {
	w, s := newRepo(t)
	head := git(t, s, "rev-parse", "HEAD")
	writeFile(t, s, ".git/refs/heads/a\x01b", head+"\n")
	writeFile(t, s, ".git/packed-refs", "# pack-refs with: peeled fully-peeled sorted\n"+
		head+" refs/heads/../../config\n"+head+" refs/heads/x..y\n")
	r, err := Inspect(w, s)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"refs/heads/a\x01b":       `ref refs/heads/a\x01b: control byte`,
		"refs/heads/../../config": `ref refs/heads/../../config: ".."`,
		"refs/heads/x..y":         `".."`,
	}
	got := 0
	for _, u := range r.Refs {
		if w, ok := want[u.Name]; ok {
			got++
			if !strings.Contains(u.Refused, w) {
				t.Errorf("%q refused %q, want %q", u.Name, u.Refused, w)
			}
		}
	}
	if got != len(want) {
		t.Fatalf("reviewed %d of the hostile refs: %+v", got, r.Refs)
	}
	for _, n := range []string{"refs/heads/brood/s/../../config", "refs/heads/brood/s/a\x01"} {
		if err := r.Apply(&r.Refs[0], n, noJournal); err == nil {
			t.Errorf("applied as %q", n)
		}
	}
}

// TestDeltaChainBomb packs a blob behind MaxDeltaDepth+1 deltas (each adding one byte):
// refused from the entry headers before the chain is resolved.
func TestDeltaChainBomb(t *testing.T) {
	for _, n := range []int{10, MaxDeltaDepth + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { deltaChain(t, n) })
	}
}

// deltaChain checks a blob behind n deltas: refused over MaxDeltaDepth, else applied.
func deltaChain(t *testing.T, n int) {
	w, s := newRepo(t)
	pack, final := deltaChainPack(n)
	dir := filepath.Join(s, ".git", "objects", "pack")
	os.MkdirAll(dir, 0o755)
	sum := sha1.Sum(pack[:len(pack)-20])
	p := filepath.Join(dir, "pack-"+hex.EncodeToString(sum[:])+".pack")
	if err := os.WriteFile(p, pack, 0o444); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "index-pack", p).CombinedOutput(); err != nil {
		t.Fatalf("index-pack: %v %s", err, out)
	}
	if n > MaxDeltaDepth {
		hostileTreeIn(t, w, s, "MaxDeltaDepth", [3]string{"100644", "bomb", final})
		return
	}
	tree := looseObject(t, s, "tree", treeBody([3]string{"100644", "ok", final}), "")
	commitOnTree(t, s, tree, git(t, s, "rev-parse", "HEAD"))
	r, _ := Inspect(w, s)
	if len(r.Refs) != 1 || r.Refs[0].Refused != "" {
		t.Fatalf("chain of %d: %+v", n, r)
	}
	if err := r.Apply(&r.Refs[0], BranchName("s", r.Refs[0].Name), noJournal); err != nil {
		t.Fatal(err)
	}
	git(t, w, "fsck", "--strict", "--no-dangling")
	if got := git(t, w, "cat-file", "-p", "brood/s/master:ok"); got != "x"+strings.Repeat("y", n) {
		t.Fatalf("content %q", got)
	}
}

// deltaChainPack returns a pack (format: gitformat-pack(5)) of a one-byte blob followed
// by n OFS deltas, each the previous content plus one byte, and the last object's id.
func deltaChainPack(n int) ([]byte, string) {
	var b bytes.Buffer
	b.WriteString("PACK\x00\x00\x00\x02")
	b.Write([]byte{byte((n + 1) >> 24), byte((n + 1) >> 16), byte((n + 1) >> 8), byte(n + 1)})
	entry := func(typ byte, data []byte, ofs int) {
		size := len(data)
		c := typ<<4 | byte(size&15)
		size >>= 4
		for size > 0 {
			b.WriteByte(c | 0x80)
			c, size = byte(size&0x7f), size>>7
		}
		b.WriteByte(c)
		if ofs > 0 { // offset encoding of gitformat-pack(5)
			enc := []byte{byte(ofs & 0x7f)}
			for ofs >>= 7; ofs > 0; ofs >>= 7 {
				ofs--
				enc = append([]byte{byte(0x80 | ofs&0x7f)}, enc...)
			}
			b.Write(enc)
		}
		zw := zlib.NewWriter(&b)
		zw.Write(data)
		zw.Close()
	}
	varint := func(v int) []byte {
		var out []byte
		for v >= 0x80 {
			out = append(out, byte(v|0x80))
			v >>= 7
		}
		return append(out, byte(v))
	}
	content := []byte("x")
	prev := b.Len()
	entry(3, content, 0)
	for i := 0; i < n; i++ {
		src := len(content)
		d := append(varint(src), varint(src+1)...)
		d = append(d, 0x80|0x10|0x20, byte(src), byte(src>>8), 0x01, 'y') // copy 0..src, insert "y"
		content = append(content, 'y')
		here := b.Len()
		entry(6, d, here-prev)
		prev = here
	}
	sum := sha1.Sum(b.Bytes())
	b.Write(sum[:])
	id := sha1.Sum(append([]byte(fmt.Sprintf("blob %d\x00", len(content))), content...))
	return b.Bytes(), hex.EncodeToString(id[:])
}

// TestLooseInflateBomb: a loose object whose zlib stream inflates past the size in its
// header is refused after reading one byte more than the header's size.
func TestLooseInflateBomb(t *testing.T) {
	w, s := newRepo(t)
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	zw.Write([]byte("blob 3\x00"))
	zw.Write(make([]byte, 64<<20)) // 64 MiB of zeros behind a 3-byte header
	zw.Close()
	id := "5555555555555555555555555555555555555555"
	writeFile(t, filepath.Join(s, ".git", "objects", id[:2]), id[2:], z.String())
	hostileTreeIn(t, w, s, "more or fewer bytes of content than its header's 3", [3]string{"100644", "bomb", id})
}

// TestIndexBomb: a pack index claiming more objects than its bytes can hold is refused
// before go-git's decoder allocates for that count.
func TestIndexBomb(t *testing.T) {
	w, s := newRepo(t)
	idx := make([]byte, 8+256*4+40)
	copy(idx, "\xfftOc\x00\x00\x00\x02")
	for i := range 256 {
		copy(idx[8+i*4:], []byte{0xff, 0xff, 0xff, 0xff})
	}
	writeFile(t, filepath.Join(s, ".git", "objects", "pack"), "pack-0000000000000000000000000000000000000000.idx", string(idx))
	agentCommit(t, s)
	r, err := Inspect(w, s)
	if err != nil || !strings.Contains(r.Refused, "claims 4294967295 objects") {
		t.Fatalf("review = %+v, %v", r, err)
	}
}

// TestRefCaps: a packed-refs file over MaxPackedRefsBytes refuses the repository.
func TestRefCaps(t *testing.T) {
	w, s := newRepo(t)
	f, err := os.Create(filepath.Join(s, ".git", "packed-refs"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(MaxPackedRefsBytes + 1)
	f.Close()
	if r, _ := Inspect(w, s); !strings.Contains(r.Refused, "MaxPackedRefsBytes") {
		t.Fatalf("review = %+v", r)
	}
}
