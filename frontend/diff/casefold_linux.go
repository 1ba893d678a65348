package diff

import (
	"os"

	"golang.org/x/sys/unix"
)

// Super-block magics of Linux file systems that fold case on every name (from
// <linux/magic.h> and fs/exfat, fs/ntfs3): vfat/msdos, exFAT, NTFS (ntfs3).
const (
	msdosSuperMagic = 0x4d44
	exfatSuperMagic = 0x2011bab0
	ntfsSuperMagic  = 0x5346544e
	// fsCasefoldFL is FS_CASEFOLD_FL from <linux/fs.h>: an ext4/f2fs directory whose
	// names are looked up case-insensitively (inherited by new subdirectories).
	fsCasefoldFL = 0x40000000
)

// foldsCase reports whether the directory fd (W's root) looks up names ignoring case.
func foldsCase(fd int) (bool, error) {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return false, os.NewSyscallError("fstatfs W", err)
	}
	switch uint32(sfs.Type) {
	case msdosSuperMagic, exfatSuperMagic, ntfsSuperMagic:
		return true, nil
	}
	flags, err := unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return false, nil // the file system has no inode flags (tmpfs, 9p, ...): case-sensitive
	}
	return flags&fsCasefoldFL != 0, nil
}
