package snapshot

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// skipReason says why a special file is never opened or copied.
func skipReason(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "fifo: special file, never opened"
	case unix.S_IFSOCK:
		return "socket: special file, never opened"
	case unix.S_IFCHR:
		return "character device: special file, never opened"
	case unix.S_IFBLK:
		return "block device: special file, never opened"
	}
	return "unknown file type, never opened"
}

// futimens sets the access and modification times of the file open at fd
// (utimensat(fd, NULL, ts, 0), which x/sys/unix does not wrap).
func futimens(fd int, st *unix.Stat_t) error {
	ts := [2]unix.Timespec{st.Atim, st.Mtim}
	_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// processUmask reads the umask from /proc/self/status ("Umask:" line, Linux ≥ 4.7)
// without changing it; when unknown it returns 0o7777 so that every mode is set with
// fchmod.
func processUmask() uint32 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0o7777
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			if err == nil {
				return uint32(m)
			}
		}
	}
	return 0o7777
}

// writeAll writes b to fd at its current offset, retrying short writes and EINTR.
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// closeFd closes fd if it is valid.
func closeFd(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// removeTree removes p and everything below it, first giving the owner rwx on every
// directory (S keeps W's directory modes, which may lack write permission).
func removeTree(p string) error {
	var fix func(string)
	fix = func(d string) {
		if err := os.Chmod(d, 0o700); err != nil {
			return
		}
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if e.IsDir() {
				fix(d + "/" + e.Name())
			}
		}
	}
	if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
		fix(p)
	}
	return os.RemoveAll(p)
}
