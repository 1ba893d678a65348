package flush

import (
	"crypto/rand"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/digest"
	"brood.dev/brood/internal/testenv"
)

// mountLoop mounts a fresh 768 MiB loop filesystem made by mkfs with args, mounted with
// opts (testenv.MountLoop), reachable by other uids.
func mountLoop(t *testing.T, mkfs, opts string, args ...string) string {
	mnt := testenv.MountLoop(t, mkfs, 768<<20, opts, args...)
	reachable(t, mnt)
	return mnt
}

// reachable gives every directory from p up to the system temp directory o+x, so that a
// process of another uid can reach p (t.TempDir makes 0700 directories).
func reachable(t *testing.T, p string) {
	t.Helper()
	top := filepath.Clean(os.TempDir())
	for d := p; strings.HasPrefix(d, top+"/"); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o055); err != nil {
			t.Fatal(err)
		}
	}
}

// fixtureIn is newFixture with W and the session state below root (one filesystem).
func fixtureIn(t *testing.T, root string, files map[string]string) *fixture {
	t.Helper()
	t.Setenv("BROOD_STATE_DIR", filepath.Join(root, "state"))
	w := filepath.Join(root, "w")
	if err := os.Mkdir(w, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, c := range files {
		put(t, w, p, c, 0o644)
	}
	return snapshotOf(t, w)
}

// fileSum is the content digest of the file at p, read as a stream (digest.Reader: every
// byte read, holes too, so it does not share the hole skipping it checks).
func fileSum(t testing.TB, p string) []byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := digest.Reader(f)
	if err != nil {
		t.Fatal(err)
	}
	return d.Sum
}

// bigChange is f.change for a file too large to read into memory.
func (f *fixture) bigChange(t testing.TB, k diff.Kind, rel string) diff.Change {
	c := diff.Change{Path: rel, Kind: k, NewMode: 0o644, NewHash: fileSum(t, filepath.Join(f.S, rel))}
	if e := f.m.Lookup(rel); e != nil {
		c.OldMode, c.OldHash, c.OldSize = e.W.Mode, e.Hash, e.W.Size
	}
	return c
}

// makeSparse writes a file of size bytes at p holding chunks random 512 KiB extents,
// evenly spaced, and holes elsewhere (mode 0644).
func makeSparse(t testing.TB, p string, size int64, chunks int) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 512<<10)
	for i := 0; i < chunks; i++ {
		rand.Read(buf)
		if _, err := f.WriteAt(buf, int64(i)*(size/int64(chunks))); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

func allocated(t testing.TB, p string) int64 {
	t.Helper()
	var st syscall.Stat_t
	lstat(t, p, &st)
	return st.Blocks * 512
}

// sharedExtents: see testenv.SharedExtents.
func sharedExtents(t *testing.T, p string) (total, shared int) { return testenv.SharedExtents(t, p) }

// POSIX ACL xattr format, <linux/posix_acl_xattr.h> and <linux/posix_acl.h>: a
// little-endian u32 version (2), then entries of u16 tag, u16 perm, u32 id.
const (
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclMask     = 0x10
	aclOther    = 0x20
	aclNoID     = 0xffffffff
)

type aclEntry struct {
	tag, perm uint16
	id        uint32
}

func aclXattr(es ...aclEntry) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range es {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// denyACL is the access ACL of a 0644 file that denies uid (user::rw-, user:uid:---,
// group::r--, mask::r--, other::r--).
func denyACL(uid uint32) []byte {
	return aclXattr(aclEntry{aclUserObj, 6, aclNoID}, aclEntry{aclUser, 0, uid},
		aclEntry{aclGroupObj, 4, aclNoID}, aclEntry{aclMask, 4, aclNoID}, aclEntry{aclOther, 4, aclNoID})
}

// nobody is the uid (and gid) of the other user of the tests.
const nobody = 65534

// canRead reports whether a process of uid and gid nobody, without supplementary groups,
// can read the file at p (setpriv(1) runs cat(1) as that user).
func canRead(t *testing.T, p string) bool {
	t.Helper()
	testenv.RequireCommand(t, "setpriv")
	u := strconv.Itoa(nobody)
	out, err := exec.Command("setpriv", "--reuid", u, "--regid", u, "--clear-groups", "cat", p).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("setpriv cat %s: %v %s", p, err, out)
	}
	return err == nil
}

func setXattr(t testing.TB, p, name string, value []byte) {
	t.Helper()
	if err := unix.Lsetxattr(p, name, value, 0); err != nil {
		t.Fatalf("setxattr %s %s: %v", p, name, err)
	}
}

// xattrsOf returns every attribute of the file at p as name=value lines (values quoted).
func xattrsOf(t testing.TB, p string) string {
	t.Helper()
	xs, err := listXattrs(p)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, x := range xs {
		b.WriteString(x.Name + "=" + strconv.Quote(string(x.Value)) + "\n")
	}
	return b.String()
}

// dropCapOnThread locks the calling goroutine to its thread and removes capability c
// from the thread's effective set; the thread is never unlocked, so it exits with the
// goroutine (run it in a subtest).
func dropCapOnThread(t *testing.T, c uint) {
	t.Helper()
	runtime.LockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
	data[c/32].Effective &^= 1 << (c % 32)
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
}
