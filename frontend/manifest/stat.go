package manifest

import "golang.org/x/sys/unix"

// TypeFromMode maps the S_IFMT bits of an st_mode (<sys/stat.h>) to a Type; block and
// character devices are both TypeDevice.
func TypeFromMode(mode uint32) Type {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return TypeRegular
	case unix.S_IFDIR:
		return TypeDir
	case unix.S_IFLNK:
		return TypeSymlink
	case unix.S_IFIFO:
		return TypeFIFO
	case unix.S_IFSOCK:
		return TypeSocket
	}
	return TypeDevice
}

// FromStat converts lstat(2) output to a Stat. Mode keeps the permission and
// setuid/setgid/sticky bits (07777); times are nanoseconds since the Unix epoch.
func FromStat(st *unix.Stat_t) Stat {
	return Stat{
		Type:  TypeFromMode(uint32(st.Mode)),
		Mode:  uint32(st.Mode) & 0o7777,
		Size:  st.Size,
		Mtime: st.Mtim.Nano(),
		Ctime: st.Ctim.Nano(),
		Ino:   st.Ino,
		Dev:   uint64(st.Dev),
		Nlink: uint64(st.Nlink),
	}
}
