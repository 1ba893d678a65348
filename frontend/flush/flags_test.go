package flush

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/diff"
)

func getFlags(t *testing.T, p string) uint32 {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatalf("FS_IOC_GETFLAGS %s: %v", p, err)
	}
	return v
}

// setFlags adds flags to the inode flags of the file at p (chattr +...).
func setFlags(t *testing.T, p string, flags uint32) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cur, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err == nil {
		err = unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(cur|flags))
	}
	if err != nil {
		t.Fatalf("chattr %#x %s: %v", flags, p, err)
	}
}

// TestFlagRules: the rows of flagRules cover distinct bits, and keepFlags is exactly the
// kept rows.
func TestFlagRules(t *testing.T) {
	var seen, keep uint32
	for _, r := range flagRules {
		if r.flag == 0 || seen&r.flag != 0 {
			t.Errorf("rule %s: flag %#x empty or overlapping", r.letter, r.flag)
		}
		seen |= r.flag
		if r.keep {
			keep |= r.flag
			if r.refuse != "" || r.why != "" {
				t.Errorf("rule %s: kept and not kept", r.letter)
			}
		} else if (r.refuse == "") == (r.why == "") {
			t.Errorf("rule %s: needs exactly one of refuse and why", r.letter)
		}
	}
	if keep != keepFlags {
		t.Errorf("keepFlags %#x, kept rows %#x", keepFlags, keep)
	}
}

// TestReplaceKeepsInodeFlags replaces files with kept inode flags on ext4 (d, A, S, s, u,
// t, x; ext4 refuses j with delayed allocation) and btrfs (C on a file made nocow while
// empty; c): the new files have the same kept flags, and undo, with the journal holding a
// copy (a second hard link), puts them back.
func TestReplaceKeepsInodeFlags(t *testing.T) {
	for _, fs := range []struct {
		mkfs  string
		flags map[string]uint32
	}{
		{"mkfs.ext4", map[string]uint32{"f": 0x40 | 0x80 | 0x8 | 0x1 | 0x2 | 0x8000 | 0x2000000}},
		{"mkfs.btrfs", map[string]uint32{"nocow": 0x800000, "compressed": 0x4}},
	} {
		t.Run(fs.mkfs, func(t *testing.T) {
			root := mountLoop(t, fs.mkfs, "", "-q")
			files := map[string]string{}
			for name := range fs.flags {
				files[name] = ""
			}
			f := fixtureIn(t, root, files)
			var cs []diff.Change
			for name, fl := range fs.flags {
				p := filepath.Join(f.W, name)
				setFlags(t, p, fl) // while empty, for C
				if err := os.WriteFile(p, []byte("old "+name+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Link(p, filepath.Join(root, name+".second-link")); err != nil {
					t.Fatal(err)
				}
				f.m.Lookup(name).Hash = sum([]byte("old " + name + "\n"))
				put(t, f.S, name, "new "+name+"\n", 0o644)
				c := f.change(diff.KindModified, name)
				c.OldHash = f.m.Lookup(name).Hash
				cs = append(cs, c)
			}
			res, err := Apply(ctx, f.sess, f.m, items(cs...), Options{})
			if err != nil || len(res.Applied) != len(cs) || len(res.Dropped) != 0 {
				t.Fatalf("Apply: %v %+v", err, res)
			}
			for name, fl := range fs.flags {
				if got := getFlags(t, filepath.Join(f.W, name)) & keepFlags; got != fl {
					t.Errorf("%s after apply: kept flags %#x, want %#x", name, got, fl)
				}
			}
			if _, err := Undo(ctx, f.sess); err != nil {
				t.Fatal(err)
			}
			for name, fl := range fs.flags {
				p := filepath.Join(f.W, name)
				if got := getFlags(t, p) & keepFlags; got != fl || read(t, f.W, name) != "old "+name+"\n" {
					t.Errorf("%s after undo: kept flags %#x, want %#x; content %q", name, got, fl, read(t, f.W, name))
				}
			}
		})
	}
}

// TestImmutableRefusedBeforeWriting: a replacement, deletion or mode change of an
// immutable or append-only file is refused in the plan (ErrRefused naming the flag),
// nothing is journaled or written.
func TestImmutableRefusedBeforeWriting(t *testing.T) {
	root := mountLoop(t, "mkfs.ext4", "", "-q")
	f := fixtureIn(t, root, map[string]string{"i.txt": "i\n", "a.txt": "a\n", "gone.txt": "g\n", "mode.txt": "m\n"})
	flags := map[string]uint32{"i.txt": 0x10, "a.txt": 0x20, "gone.txt": 0x10, "mode.txt": 0x20}
	for name, fl := range flags {
		setFlags(t, filepath.Join(f.W, name), fl)
	}
	t.Cleanup(func() {
		for name := range flags {
			p := filepath.Join(f.W, name)
			if g, err := os.Open(p); err == nil {
				unix.IoctlSetPointerInt(int(g.Fd()), unix.FS_IOC_SETFLAGS, int(getFlags(t, p)&^0x30))
				g.Close()
			}
		}
	})
	before := treeState(t, f.W)
	put(t, f.S, "i.txt", "I\n", 0o644)
	put(t, f.S, "a.txt", "A\n", 0o644)
	os.Remove(filepath.Join(f.S, "gone.txt"))
	syscallChmod(t, filepath.Join(f.S, "mode.txt"), 0o600)
	its := items(f.change(diff.KindModified, "i.txt"), f.change(diff.KindModified, "a.txt"),
		f.change(diff.KindDeleted, "gone.txt"), f.change(diff.KindMode, "mode.txt"))
	res, err := Apply(ctx, f.sess, f.m, its, Options{DropMetadata: true})
	if !errors.Is(err, ErrRefused) || res.Tx != "" || len(res.Problems) != 4 {
		t.Fatalf("Apply: %v %+v", err, res)
	}
	for _, p := range res.Problems {
		if want := map[uint32]string{0x10: "immutable", 0x20: "append-only"}[flags[p.Path]]; !strings.Contains(p.Err.Error(), want) {
			t.Errorf("%s: %v, want it to name %s", p.Path, p.Err, want)
		}
	}
	sameTree(t, before, treeState(t, f.W))
}
