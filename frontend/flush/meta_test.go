package flush

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/internal/testenv"
)

// TestReplaceKeepsXattrsAndACL replaces a file that has user attributes and an ACL
// denying uid nobody, on ext4 mounted with user_xattr,acl: the new file has the same
// attributes byte for byte, nobody cannot read it (nor the temp file before the rename),
// and undo restores the prior attributes exactly (of a deleted file too), with the journal
// holding the prior
// inode ("link") or a copy ("copy": the file has a second hard link). A file in a
// directory whose default ACL was set after it was created does not get the ACL the
// directory would give a new file, before or after undo.
func TestReplaceKeepsXattrsAndACL(t *testing.T) {
	for _, mode := range []string{"link", "copy"} {
		t.Run(mode, func(t *testing.T) {
			root := mountLoop(t, "mkfs.ext4", "user_xattr,acl", "-q")
			f := fixtureIn(t, root, map[string]string{"doc.txt": "old\n", "open.txt": "o\n", "inherit/doc.txt": "i\n", "gone.txt": "g\n"})
			doc, gone := filepath.Join(f.W, "doc.txt"), filepath.Join(f.W, "gone.txt")
			setXattr(t, gone, "user.xdg.tags", []byte("keep"))
			setXattr(t, gone, "system.posix_acl_access", denyACL(nobody))
			setXattr(t, doc, "user.xdg.origin.url", []byte("https://example.test/doc"))
			setXattr(t, doc, "user.empty", nil)
			setXattr(t, doc, "system.posix_acl_access", denyACL(nobody))
			inherit := filepath.Join(f.W, "inherit")
			setXattr(t, inherit, "system.posix_acl_default", aclXattr(aclEntry{aclUserObj, 7, aclNoID},
				aclEntry{aclUser, 4, nobody}, aclEntry{aclGroupObj, 5, aclNoID}, aclEntry{aclMask, 5, aclNoID},
				aclEntry{aclOther, 5, aclNoID}))
			if mode == "copy" {
				if err := os.Link(doc, filepath.Join(root, "second-link")); err != nil {
					t.Fatal(err)
				}
				if err := os.Link(gone, filepath.Join(root, "second-link-gone")); err != nil {
					t.Fatal(err)
				}
			}
			before, beforeGone := xattrsOf(t, doc), xattrsOf(t, gone)
			if !strings.Contains(before, "system.posix_acl_access") || canRead(t, doc) {
				t.Fatalf("the ACL does not deny uid %d: %s", nobody, before)
			}
			if !canRead(t, filepath.Join(f.W, "open.txt")) {
				t.Fatalf("uid %d cannot read a 0644 file without an ACL: the test cannot tell", nobody)
			}
			put(t, f.S, "doc.txt", "new\n", 0o644)
			put(t, f.S, "inherit/doc.txt", "I\n", 0o644)
			os.Remove(filepath.Join(f.S, "gone.txt"))
			staged := 0
			testHook = func(p string, n int) {
				if p != "staged" {
					return
				}
				temps, _ := filepath.Glob(filepath.Join(f.W, ".brood-*.tmp"))
				for _, tmp := range temps {
					staged++
					if got := xattrsOf(t, tmp); got != before {
						t.Errorf("temp file attributes before the rename:\n%s\nwant\n%s", got, before)
					}
					if canRead(t, tmp) {
						t.Errorf("uid %d can read the temp file %s", nobody, tmp)
					}
				}
			}
			defer func() { testHook = nil }()
			res, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindModified, "doc.txt"),
				f.change(diff.KindModified, "inherit/doc.txt"), f.change(diff.KindDeleted, "gone.txt")), Options{})
			testHook = nil
			if err != nil || len(res.Applied) != 3 || len(res.Dropped) != 0 {
				t.Fatalf("Apply: %v %+v", err, res)
			}
			if staged != 1 {
				t.Errorf("%d temp files seen in W's root at the staged point, want 1", staged)
			}
			if read(t, f.W, "doc.txt") != "new\n" {
				t.Fatal("content not applied")
			}
			if got := xattrsOf(t, doc); got != before {
				t.Errorf("after apply:\n%s\nwant\n%s", got, before)
			}
			if canRead(t, doc) {
				t.Errorf("uid %d can read the applied file", nobody)
			}
			if got := xattrsOf(t, filepath.Join(inherit, "doc.txt")); got != "" {
				t.Errorf("inherit/doc.txt got attributes it did not have: %s", got)
			}
			if _, err := Undo(ctx, f.sess); err != nil {
				t.Fatal(err)
			}
			if read(t, f.W, "doc.txt") != "old\n" {
				t.Fatal("undo: content not restored")
			}
			if got := xattrsOf(t, doc); got != before {
				t.Errorf("after undo:\n%s\nwant\n%s", got, before)
			}
			if got := xattrsOf(t, gone); got != beforeGone {
				t.Errorf("deleted file after undo:\n%s\nwant\n%s", got, beforeGone)
			}
			if got := xattrsOf(t, filepath.Join(inherit, "doc.txt")); got != "" {
				t.Errorf("undo: inherit/doc.txt got attributes it did not have: %s", got)
			}
		})
	}
}

// xattrMembers is, for every row of xattrRules, an attribute it covers; TestXattrRules
// fails when a row has none.
var xattrMembers = map[string][]string{
	"system.posix_acl_access":  {"system.posix_acl_access"},
	"system.posix_acl_default": {"system.posix_acl_default"},
	"system.nfs4_acl":          {"system.nfs4_acl"},
	"system.nfs4_dacl":         {"system.nfs4_dacl"},
	"system.nfs4_sacl":         {"system.nfs4_sacl"},
	"security.capability":      {"security.capability"},
	"security.ima":             {"security.ima"},
	"security.evm":             {"security.evm"},
	"security.selinux":         {"security.selinux"},
	"security.SMACK64*":        {"security.SMACK64", "security.SMACK64EXEC", "security.SMACK64MMAP", "security.SMACK64TRANSMUTE"},
	"security.":                {"security.NTACL", "security.apparmor"},
	"trusted.overlay.":         {"trusted.overlay.origin", "trusted.overlay.redirect", "trusted.overlay.metacopy"},
	"trusted.":                 {"trusted.gfid", "trusted.glusterfs.volume-id"},
	"btrfs.":                   {"btrfs.compression"},
	"user.":                    {"user.xdg.origin.url", "user.xdg.tags", "user.mime_type", "user.charset", "user.DOSATTRIB", "user.rsync.%stat", "user.shatag.sha256", "user.org.netatalk.Metadata"},
	"":                         {"newns.attr"},
}

// TestXattrRules checks that every row of xattrRules has members and that each member is
// decided by its row.
func TestXattrRules(t *testing.T) {
	for _, r := range xattrRules {
		ms := xattrMembers[r.name]
		if len(ms) == 0 {
			t.Errorf("rule %q has no member in xattrMembers", r.name)
		}
		for _, m := range ms {
			if got := ruleFor(m); got.name != r.name {
				t.Errorf("%s: decided by rule %q, want %q", m, got.name, r.name)
			}
		}
	}
}

// capV2 is a vfs_cap_data of revision 2 (<linux/capability.h>) granting CAP_NET_RAW
// (bit 13) permitted and effective.
var capV2 = []byte{0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

// TestXattrRowsOnExt4 replaces, as root on ext4 (user_xattr,acl), a file carrying each
// attribute that ext4 stores on a regular file: those the rules keep are on the new file
// byte for byte, the others are not and are listed in Result.Dropped; undo puts every
// one back.
func TestXattrRowsOnExt4(t *testing.T) {
	root := mountLoop(t, "mkfs.ext4", "user_xattr,acl", "-q")
	f := fixtureIn(t, root, map[string]string{"bin/tool": "#!/bin/sh\n"})
	p := filepath.Join(f.W, "bin/tool")
	set := map[string][]byte{
		"system.posix_acl_access": denyACL(nobody),
		"security.capability":     capV2,
		"security.ima":            {0x03, 0x04, 0xde, 0xad},
		"security.evm":            {0x02, 0xbe, 0xef},
		"security.selinux":        []byte("system_u:object_r:bin_t:s0\x00"),
		"security.SMACK64EXEC":    []byte("_"),
		"security.NTACL":          {1, 2, 3},
		"trusted.overlay.origin":  {0, 0xfb},
		"trusted.gfid":            []byte("0123456789abcdef"),
		"user.mime_type":          []byte("text/x-shellscript"),
	}
	for name, v := range set {
		setXattr(t, p, name, v)
	}
	before := xattrsOf(t, p)
	put(t, f.S, "bin/tool", "#!/bin/sh\necho new\n", 0o644)
	res, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindModified, "bin/tool")), Options{})
	if err != nil {
		t.Fatal(err)
	}
	dropped := map[string]bool{}
	for _, l := range res.Dropped {
		if l.Refused || l.Path != "bin/tool" || l.Why == "" {
			t.Errorf("unexpected loss %+v", l)
		}
		dropped[l.Attr] = true
	}
	for name, v := range set {
		got, err := getXattr(p, name)
		keep := ruleFor(name).keep
		switch {
		case keep && (err != nil || string(got) != string(v)):
			t.Errorf("%s: not kept (%v, %q)", name, err, got)
		case !keep && !errors.Is(err, unix.ENODATA):
			t.Errorf("%s: kept on new content (%v)", name, err)
		case !keep && !dropped[name]:
			t.Errorf("%s: dropped but not reported", name)
		}
	}
	if _, err := Undo(ctx, f.sess); err != nil {
		t.Fatal(err)
	}
	if got := xattrsOf(t, p); got != before {
		t.Errorf("after undo:\n%s\nwant\n%s", got, before)
	}
}

// TestDirDefaultACLKept changes the mode of a directory with a default ACL: the flush
// changes directories in place, so the default ACL stays.
func TestDirDefaultACLKept(t *testing.T) {
	root := mountLoop(t, "mkfs.ext4", "user_xattr,acl", "-q")
	f := fixtureIn(t, root, map[string]string{"d/x": "x\n"})
	d := filepath.Join(f.W, "d")
	setXattr(t, d, "system.posix_acl_default", denyACL(nobody))
	before := xattrsOf(t, d)
	syscallChmod(t, filepath.Join(f.S, "d"), 0o750)
	c := f.change(diff.KindMode, "d")
	c.NewMode = 0o750
	if _, err := Apply(ctx, f.sess, f.m, items(c), Options{}); err != nil {
		t.Fatal(err)
	}
	if modeOf(t, f.W, "d").Perm() != 0o750 || xattrsOf(t, d) != before {
		t.Fatalf("mode %v, attributes %q, want 0750 and %q", modeOf(t, f.W, "d"), xattrsOf(t, d), before)
	}
}

// TestBtrfsPropertyKept replaces a file with a btrfs compression property on btrfs.
func TestBtrfsPropertyKept(t *testing.T) {
	root := mountLoop(t, "mkfs.btrfs", "", "-q")
	f := fixtureIn(t, root, map[string]string{"log.txt": "old\n"})
	p := filepath.Join(f.W, "log.txt")
	setXattr(t, p, "btrfs.compression", []byte("zstd"))
	put(t, f.S, "log.txt", "new\n", 0o644)
	if _, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindModified, "log.txt")), Options{}); err != nil {
		t.Fatal(err)
	}
	if got, err := getXattr(p, "btrfs.compression"); err != nil || string(got) != "zstd" {
		t.Fatalf("btrfs.compression: %q %v", got, err)
	}
}

// TestMetadataRefusedBeforeWriting: when an attribute of the replaced file cannot be set
// here (security.* without CAP_SYS_ADMIN; a regular file replaced by a symlink),
// CheckMetadata names it, Apply refuses the change with ErrMetadata and changes nothing
// in W, and with DropMetadata applies it and lists the attribute in Result.Dropped.
func TestMetadataRefusedBeforeWriting(t *testing.T) {
	cases := []struct {
		name, attr string
		value      []byte
		root       bool
		prepare    func(t *testing.T, f *fixture)
	}{
		{name: "security-without-CAP_SYS_ADMIN", attr: "security.NTACL", value: []byte{1, 2, 3}, root: true,
			prepare: func(t *testing.T, f *fixture) {
				put(t, f.S, "a.txt", "new\n", 0o644)
				dropCapOnThread(t, unix.CAP_SYS_ADMIN)
			}},
		{name: "replaced-by-symlink", attr: "user.xdg.origin.url", value: []byte("https://example.test/"),
			prepare: func(t *testing.T, f *fixture) {
				os.Remove(filepath.Join(f.S, "a.txt"))
				if err := os.Symlink("b.txt", filepath.Join(f.S, "a.txt")); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root {
				testenv.RequireRoot(t)
			}
			f := newFixture(t, map[string]string{"a.txt": "old\n", "b.txt": "b\n"})
			p := filepath.Join(f.W, "a.txt")
			if err := unix.Lsetxattr(p, tc.attr, tc.value, 0); err != nil {
				testenv.Skip(t, "the temp filesystem refuses "+tc.attr+": "+err.Error())
			}
			before := treeState(t, f.W)
			tc.prepare(t, f)
			kind := diff.KindModified
			if tc.name == "replaced-by-symlink" {
				kind = diff.KindSymlink
			}
			its := items(f.change(kind, "a.txt"))
			losses, err := CheckMetadata(f.sess, f.m, its)
			if err != nil || len(losses) != 1 || !losses[0].Refused || losses[0].Attr != tc.attr || losses[0].Path != "a.txt" {
				t.Fatalf("CheckMetadata: %v %+v", err, losses)
			}
			res, err := Apply(ctx, f.sess, f.m, its, Options{})
			if !errors.Is(err, ErrMetadata) || len(res.Applied) != 0 || res.Tx != "" || !strings.Contains(err.Error(), tc.attr) {
				t.Fatalf("Apply without DropMetadata: %v %+v", err, res)
			}
			sameTree(t, before, treeState(t, f.W))
			res, err = Apply(ctx, f.sess, f.m, its, Options{DropMetadata: true})
			if err != nil || len(res.Applied) != 1 || len(res.Dropped) != 1 || res.Dropped[0].Attr != tc.attr {
				t.Fatalf("Apply with DropMetadata: %v %+v", err, res)
			}
		})
	}
}
