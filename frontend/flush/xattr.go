package flush

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/manifest"
)

// Xattr is one extended attribute of a file (xattr(7)): its full name, namespace
// included ("user.xdg.origin.url", "system.posix_acl_access"), and its raw value.
type Xattr struct {
	Name  string
	Value []byte
}

// MetaLoss is one extended attribute of a replaced workspace file that the new file does
// not get.
type MetaLoss struct {
	Path string // workspace path, '/'-separated
	Attr string // attribute name
	Why  string // reason, for the user
	// Refused: the attribute is one the flush keeps, but it cannot be set on the new file
	// here (the filesystem or the kernel refused it on a probe). Apply refuses such a
	// change with ErrMetadata unless Options.DropMetadata. When false the attribute is
	// never carried over to new content (xattrRule.why), and Apply always drops it.
	Refused bool
}

// xattrRule says what the flush does with one attribute of a file it replaces.
type xattrRule struct {
	name string // exact name, or a namespace or prefix when it ends in "."
	keep bool   // copy the raw value onto the new file (before it is renamed into place)
	// exact: a name of this rule that the prior file did not have is removed from the
	// new file (one the kernel added, such as an ACL inherited from the directory's
	// default ACL) and from a file undo restores, so the file has exactly its prior set.
	exact bool
	why   string // keep == false: why new content never gets it
}

// xattrRules is every attribute family known to the flush, most specific first; the
// first rule whose name is the attribute's name, or a prefix of it (a rule name ending in
// "." or "*"; "" covers every name), applies.
// Names and the privilege each needs are from xattr(7), acl(5), capabilities(7) and the
// kernel's security/ and fs/ sources.
var xattrRules = []xattrRule{
	// POSIX access ACL (acl(5); <linux/posix_acl_xattr.h> format): who else may read or
	// write the file. Set by the file's owner or with CAP_FOWNER, on filesystems mounted
	// with ACL support. Keeping it is what keeps a user the ACL denied out of the new file.
	{name: "system.posix_acl_access", keep: true, exact: true},
	// POSIX default ACL: on directories only, which the flush changes in place (their
	// attributes stay); a replaced regular file never has one.
	{name: "system.posix_acl_default", keep: true, exact: true},
	// NFSv4 ACLs on NFS mounts (nfs4_setfacl(1)): nfs4_acl, and the newer nfs4_dacl and
	// nfs4_sacl.
	{name: "system.nfs4_acl", keep: true},
	{name: "system.nfs4_dacl", keep: true},
	{name: "system.nfs4_sacl", keep: true},
	// File capabilities (capabilities(7), <linux/capability.h> vfs_cap_data): privileges
	// granted to whoever executes the file. The kernel clears them when the file is
	// written, as the flush clears setuid and setgid bits (modes are masked with 0777).
	{name: "security.capability", why: "grants privileges to the content it was set for; a write clears it"},
	// IMA measurement or signature (security/integrity/ima): a hash of the prior
	// content, wrong for the new.
	{name: "security.ima", why: "an integrity hash of the prior content"},
	// EVM HMAC or signature over the prior file's attributes (security/integrity/evm);
	// the kernel computes a new file's.
	{name: "security.evm", why: "a signature over the prior file's attributes"},
	// SELinux label (selinux(8)): set when the policy allows relabelfrom/relabelto, or
	// with CAP_SYS_ADMIN where no LSM claims it.
	{name: "security.selinux", keep: true},
	// Smack labels (security.SMACK64, SMACK64EXEC, SMACK64MMAP, SMACK64TRANSMUTE):
	// CAP_MAC_ADMIN, or CAP_SYS_ADMIN where Smack is not active.
	{name: "security.SMACK64*", keep: true},
	// Any other security.* attribute (Samba's security.NTACL, LSM labels): CAP_SYS_ADMIN
	// unless an LSM handles it.
	{name: "security.", keep: true},
	// overlayfs bookkeeping of the prior inode (origin, redirect, metacopy, ...): says
	// where that inode came from, false for a new one.
	{name: "trusted.overlay.", why: "overlayfs bookkeeping of the prior inode"},
	// trusted.* (glusterfs trusted.gfid, ...): CAP_SYS_ADMIN to read or set; listed only
	// to such a process, so a flush without it cannot see them.
	{name: "trusted.", keep: true},
	// btrfs properties (btrfs-property(8)): btrfs.compression.
	{name: "btrfs.", keep: true},
	// User attributes (xdg user.xdg.origin.url, user.xdg.tags, user.mime_type,
	// user.charset, Samba user.DOSATTRIB, rsync --fake-super user.rsync.%stat, checksum
	// tools' user.shatag.*, macOS metadata kept by Netatalk as user.org.netatalk.*):
	// set by anyone who may write the file, where the filesystem supports them.
	{name: "user.", keep: true, exact: true},
	// Any namespace not listed (a new kernel's): kept where the kernel accepts it.
	{name: "", keep: true},
}

// ruleFor returns the first rule of xattrRules that covers name.
func ruleFor(name string) xattrRule {
	for _, r := range xattrRules {
		prefix, wild := strings.CutSuffix(r.name, "*")
		if r.name == name || (wild || strings.HasSuffix(r.name, ".") || r.name == "") && strings.HasPrefix(name, prefix) {
			return r
		}
	}
	return xattrRule{keep: true}
}

// procPath is the /proc/self/fd link of fd: xattr syscalls on it act on fd's inode, also
// for an O_PATH fd, without resolving a path in W again.
func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// listXattrs returns every attribute of the inode at the path p (a procPath; followed),
// sorted by name. A filesystem without attributes gives none.
func listXattrs(p string) ([]Xattr, error) {
	var buf []byte
	for {
		size, err := unix.Listxattr(p, nil)
		if err == unix.ENOTSUP {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("listxattr: %w", err)
		}
		buf = make([]byte, size)
		n, err := unix.Listxattr(p, buf)
		if err == unix.ERANGE {
			continue // grew meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("listxattr: %w", err)
		}
		buf = buf[:n]
		break
	}
	var out []Xattr
	for _, name := range strings.Split(string(buf), "\x00") {
		if name == "" {
			continue
		}
		v, err := getXattr(p, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, Xattr{Name: name, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func getXattr(p, name string) ([]byte, error) {
	for {
		size, err := unix.Getxattr(p, name, nil)
		if err != nil {
			return nil, fmt.Errorf("getxattr %s: %w", name, err)
		}
		buf := make([]byte, size)
		n, err := unix.Getxattr(p, name, buf)
		if err == unix.ERANGE {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("getxattr %s: %w", name, err)
		}
		return buf[:n], nil
	}
}

// setXattrs makes the attributes of the open file fd be want: each attribute of want
// whose value differs is set, and each attribute of an exact rule that want lacks is
// removed. An attribute of want that the kernel refuses is an error when its rule keeps
// it and ignored otherwise (undo puts back a prior file's security.capability where it
// can).
func setXattrs(fd int, want []Xattr) error {
	cur, err := listXattrs(procPath(fd))
	if err != nil {
		return err
	}
	have := map[string][]byte{}
	for _, x := range cur {
		have[x.Name] = x.Value
	}
	wanted := map[string]bool{}
	for _, x := range want {
		wanted[x.Name] = true
		if v, ok := have[x.Name]; ok && bytes.Equal(v, x.Value) {
			continue
		}
		if err := unix.Fsetxattr(fd, x.Name, x.Value, 0); err != nil && ruleFor(x.Name).keep {
			return fmt.Errorf("set extended attribute %s: %w: %w", x.Name, ErrMetadata, err)
		}
	}
	for _, x := range cur {
		if !wanted[x.Name] && ruleFor(x.Name).exact {
			if err := unix.Fremovexattr(fd, x.Name); err != nil && err != unix.ENODATA {
				return fmt.Errorf("remove extended attribute %s: %w: %w", x.Name, ErrMetadata, err)
			}
		}
	}
	return nil
}

// keptXattrs splits the prior attributes old of o's file, replaced by an entry of type
// newType, into those the new file gets
// and the losses: attributes never carried over (by rule), and attributes kept by rule
// that a probe file in the target directory refused (Refused), or that the new entry,
// not a regular file, cannot take. The probe is an O_TMPFILE inode (open(2)) owned like
// the new file will be: it has no name, so nothing in W changes.
func (a *applier) keptXattrs(o *op, old []Xattr, newType manifest.Type) (keep []Xattr, lost []MetaLoss) {
	var try []Xattr
	for _, x := range old {
		if r := ruleFor(x.Name); !r.keep {
			lost = append(lost, MetaLoss{Path: o.Path, Attr: x.Name, Why: r.why})
		} else {
			try = append(try, x)
		}
	}
	if len(try) == 0 {
		return nil, lost
	}
	if newType != manifest.TypeRegular {
		for _, x := range try {
			lost = append(lost, MetaLoss{Path: o.Path, Attr: x.Name, Refused: true,
				Why: "the new entry is not a regular file"})
		}
		return nil, lost
	}
	probe, err := a.probeFile(o)
	if err != nil {
		// No O_TMPFILE here: keep them all; a refusal shows when the temp file is written.
		return try, lost
	}
	defer unix.Close(probe)
	for _, x := range try {
		if err := unix.Fsetxattr(probe, x.Name, x.Value, 0); err != nil {
			lost = append(lost, MetaLoss{Path: o.Path, Attr: x.Name, Refused: true,
				Why: "the workspace filesystem or the kernel refuses it here: " + err.Error()})
			continue
		}
		keep = append(keep, x)
	}
	return keep, lost
}

// probeFile opens an unnamed temp file (O_TMPFILE) in o's target directory, given the
// owner and group the new file will get (keepOwner).
func (a *applier) probeFile(o *op) (int, error) {
	pfd, _, err := a.parentFD(o, "probe")
	if err != nil {
		return -1, err
	}
	fd, err := unix.Openat(pfd, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, err
	}
	if err := keepOwner(fd, &o.seen); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// openSeen opens W's entry at o.Path with O_PATH, checking it is still the inode o.seen.
func (a *applier) openSeen(o *op) (int, error) {
	pfd, name, err := a.parentFD(o, "read attributes of")
	if err != nil {
		return -1, err
	}
	fd, err := unix.Openat(pfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("read attributes of %q: %w", o.Path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Ino != o.seen.Ino || st.Dev != o.seen.Dev {
		unix.Close(fd)
		return -1, fmt.Errorf("read attributes of %q: changed in the workspace: %w", o.Path, ErrConflict)
	}
	return fd, nil
}
