package review

import "golang.org/x/sys/unix"

// flushInput discards the data the terminal fd received and nobody read yet:
// tcflush(fd, TCIFLUSH), the TCFLSH ioctl (ioctl_tty(2)).
func flushInput(fd int) error { return unix.IoctlSetInt(fd, unix.TCFLSH, unix.TCIFLUSH) }
