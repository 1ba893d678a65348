//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package review

import "golang.org/x/sys/unix"

// fread is FREAD of <sys/fcntl.h>: TIOCFLUSH's "flush the input queue" bit (tty(4)).
const fread = 0x1

// flushInput discards the data the terminal fd received and nobody read yet:
// tcflush(fd, TCIFLUSH), which these systems implement as TIOCFLUSH with FREAD (tty(4)).
func flushInput(fd int) error { return unix.IoctlSetPointerInt(fd, unix.TIOCFLUSH, fread) }
