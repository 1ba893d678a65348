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

// foldsCase reports whether the directory fd (W's root) looks up names ignoring case:
// a file system that always folds (by its statfs magic), an ext4/f2fs directory with
// FS_CASEFOLD_FL, or else what probeFold finds.
func foldsCase(fd int) (bool, error) {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return false, os.NewSyscallError("fstatfs W", err)
	}
	switch uint32(sfs.Type) {
	case msdosSuperMagic, exfatSuperMagic, ntfsSuperMagic:
		return true, nil
	}
	if flags, err := unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS); err == nil && flags&fsCasefoldFL != 0 {
		return true, nil
	}
	// FUSE, 9p, SMB and NFS report no magic or flag that says how the server compares
	// names: ask the directory itself.
	return probeFold(fd)
}

// maxProbeNames bounds how many of W's root entries probeFold tries.
const maxProbeNames = 64

// probeFold reports whether the directory fd looks up names ignoring case: for an entry
// whose name has ASCII letters and whose case-swapped spelling is not itself an entry,
// fstatat(2) of the swapped spelling resolves to the same inode. A directory without
// such an entry (empty, or only names without letters) probes as case-sensitive.
func probeFold(fd int) (bool, error) {
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, os.NewSyscallError("open W to probe case folding", err)
	}
	defer unix.Close(dfd)
	names, err := readNames(dfd, nil, make([]byte, 32<<10))
	if err != nil {
		return false, os.NewSyscallError("getdents W to probe case folding", err)
	}
	present := make(map[string]bool, len(names))
	for _, n := range names {
		present[n] = true
	}
	tried := 0
	for _, n := range names {
		sw := swapASCIICase(n)
		if sw == n || present[sw] {
			continue
		}
		var a, b unix.Stat_t
		if unix.Fstatat(dfd, n, &a, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue // gone meanwhile
		}
		err := unix.Fstatat(dfd, sw, &b, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case err == nil:
			return a.Dev == b.Dev && a.Ino == b.Ino, nil
		case err == unix.ENOENT:
			return false, nil
		}
		if tried++; tried >= maxProbeNames {
			break
		}
	}
	return false, nil
}

// swapASCIICase returns s with the case of every ASCII letter swapped.
func swapASCIICase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c >= 'A' && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}
