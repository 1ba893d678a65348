package snapshot

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// dirent is one entry read with getdents64(2).
type dirent struct {
	name string
	typ  uint8 // d_type: unix.DT_REG, DT_DIR, DT_LNK, ..., or DT_UNKNOWN
}

// readDir returns every entry of the directory open at fd except "." and "..", using
// buf for getdents64. The record layout is struct linux_dirent64 (<linux/dirent.h>):
// u64 d_ino, s64 d_off, u16 d_reclen, u8 d_type, then the NUL-terminated name.
func readDir(fd int, buf []byte) ([]dirent, error) {
	var out []dirent
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		for off := 0; off+19 <= n; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 19 || off+reclen > n {
				break
			}
			typ := buf[off+18]
			nb := buf[off+19 : off+reclen]
			for i, c := range nb {
				if c == 0 {
					nb = nb[:i]
					break
				}
			}
			off += reclen
			if name := string(nb); name != "." && name != ".." {
				out = append(out, dirent{name, typ})
			}
		}
	}
}
