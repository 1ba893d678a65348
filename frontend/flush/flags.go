package flush

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// flagRule says what the flush does with one inode flag (chattr(1); FS_*_FL of
// <linux/fs.h>, read and set with the FS_IOC_GETFLAGS and FS_IOC_SETFLAGS ioctls) of a
// regular file it replaces, deletes or changes the mode of.
type flagRule struct {
	flag   uint32
	letter string // chattr(1) letter and name, for messages
	// keep: set on the temp file while it is still empty (btrfs honours C only then),
	// before any data is written, and by undo on a file it writes back.
	keep bool
	// refuse: the change is refused before anything is written (this flag makes the
	// kernel refuse the rename, unlink or chmod; nobody may override the user's choice).
	refuse string
	// why: not kept, and not reported: the filesystem manages it (set on the new file as
	// on any), or it is a directory flag, or (reported) it belongs to the prior content.
	why      string
	reported bool // a never-kept flag that is listed in Result.Dropped
}

// flagRules is every inode flag of <linux/fs.h> that a regular file can show.
var flagRules = []flagRule{
	// Immutable and append-only (CAP_LINUX_IMMUTABLE to set or clear): the kernel refuses
	// to replace, unlink or chmod such a file.
	{flag: 0x10, letter: "i (immutable)", refuse: "immutable (chattr +i): it cannot be replaced or changed until the flag is cleared"},
	{flag: 0x20, letter: "a (append only)", refuse: "append-only (chattr +a): it cannot be replaced or changed until the flag is cleared"},
	// Kept: attributes the user chose for the file.
	{flag: 0x40, letter: "d (no dump)", keep: true},
	{flag: 0x80, letter: "A (no atime updates)", keep: true},
	{flag: 0x8, letter: "S (synchronous updates)", keep: true},
	{flag: 0x800000, letter: "C (no copy on write)", keep: true},
	{flag: 0x4, letter: "c (compressed)", keep: true},
	{flag: 0x400, letter: "m (no compression)", keep: true},
	{flag: 0x4000, letter: "j (data journaling)", keep: true}, // CAP_SYS_RESOURCE
	{flag: 0x1, letter: "s (secure deletion)", keep: true},
	{flag: 0x2, letter: "u (undeletable)", keep: true},
	{flag: 0x8000, letter: "t (no tail merging)", keep: true},
	{flag: 0x2000000, letter: "x (direct access, DAX)", keep: true},
	// Of the prior content: fs-verity protects exactly those bytes (FS_IOC_ENABLE_VERITY).
	{flag: unix.FS_VERITY_FL, letter: "V (fs-verity)", why: "an fs-verity hash tree of the prior content", reported: true},
	// Managed by the filesystem, set on the new file as on any new file.
	{flag: 0x80000, letter: "e (extents)", why: "managed by the filesystem"},
	{flag: 0x10000000, letter: "N (inline data)", why: "managed by the filesystem"},
	{flag: 0x800, letter: "E (encrypted)", why: "from the directory's encryption policy"},
	{flag: 0x40000, letter: "h (huge file)", why: "managed by the filesystem"},
	{flag: 0x1000, letter: "I (indexed directory)", why: "managed by the filesystem"},
	{flag: 0x200000, letter: "EA inode", why: "managed by the filesystem"},
	{flag: 0x400000, letter: "EOF blocks", why: "managed by the filesystem"},
	{flag: 0x100 | 0x200 | 0x2000, letter: "compression and imagic state", why: "managed by the filesystem"},
	// Directory flags (directories are changed in place, so they stay).
	{flag: 0x10000, letter: "D (synchronous directory updates)", why: "directories only"},
	{flag: 0x20000, letter: "T (top of directory hierarchy)", why: "directories only"},
	{flag: 0x20000000, letter: "P (project inheritance)", why: "directories only"},
	{flag: 0x40000000, letter: "F (casefold)", why: "directories only"},
}

// keepFlags is the mask of the flags flagRules keeps.
var keepFlags = func() uint32 {
	var m uint32
	for _, r := range flagRules {
		if r.keep {
			m |= r.flag
		}
	}
	return m
}()

// inodeFlags returns the inode flags of the inode of fd (any fd but O_PATH: it is
// reopened for reading through /proc/self/fd); ok is false where the file cannot be
// opened or the filesystem has no flags.
func inodeFlags(fd int) (flags uint32, ok bool) {
	rfd, err := unix.Open(procPath(fd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(rfd)
	f, err := unix.IoctlGetUint32(rfd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return 0, false
	}
	return f, true
}

// setInodeFlags makes the kept flags (keepFlags) of the open file fd be exactly want,
// leaving the others as they are.
func setInodeFlags(fd int, want uint32) error {
	cur, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return fmt.Errorf("get inode flags: %w", err)
	}
	next := cur&^keepFlags | want
	if next == cur {
		return nil
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(next)); err != nil {
		return fmt.Errorf("set inode flags %#x: %w: %w", next, ErrMetadata, err)
	}
	return nil
}

// planFlags records the inode flags of the regular file o acts on in o.Old, refuses the
// change (ErrRefused) when one of them forbids it, and for a replacement by an entry of
// type newType decides which flags the new file gets (o.keepFlags), probing them on an
// unnamed O_TMPFILE file as planMeta probes attributes; a refused one is a MetaLoss.
func (a *applier) planFlags(o *op, fd int, replaced bool, regular bool) error {
	flags, ok := inodeFlags(fd)
	if !ok {
		return nil
	}
	o.Old.Flags, o.Old.FlagsRead = flags, true
	for _, r := range flagRules {
		if flags&r.flag == 0 {
			continue
		}
		if r.refuse != "" {
			return fmt.Errorf("apply %q: %s: %w", o.Path, r.refuse, ErrRefused)
		}
		if replaced && r.reported {
			o.lost = append(o.lost, MetaLoss{Path: o.Path, Attr: "inode flag " + r.letter, Why: r.why})
		}
	}
	want := flags & keepFlags
	if !replaced || want == 0 {
		return nil
	}
	if !regular {
		a.loseFlags(o, want, "the new entry is not a regular file")
		return nil
	}
	probe, err := a.probeFile(o)
	if err != nil {
		o.keepFlags = want // no O_TMPFILE here: a refusal shows when the temp file is written
		return nil
	}
	defer unix.Close(probe)
	for _, r := range flagRules {
		if want&r.flag == 0 {
			continue
		}
		if err := setInodeFlags(probe, o.keepFlags|r.flag); err != nil {
			a.loseFlags(o, r.flag, "the workspace filesystem or the kernel refuses it here: "+err.Error())
			continue
		}
		o.keepFlags |= r.flag
	}
	return nil
}

// loseFlags records the kept flags in mask as refused losses of o.
func (a *applier) loseFlags(o *op, mask uint32, why string) {
	for _, r := range flagRules {
		if r.keep && mask&r.flag != 0 {
			o.lost = append(o.lost, MetaLoss{Path: o.Path, Attr: "inode flag " + r.letter, Refused: true, Why: why})
		}
	}
}
