package guest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"brood.dev/brood/sandbox/guestcfg"
)

// homeFile serves one guestcfg.HomeFileRequest: it decodes the payload and writes the
// file into the agent's home (writeHomeFile). It returns the decode or write error.
func (g *guest) homeFile(payload []byte) error {
	var f guestcfg.HomeFile
	if err := ssh.Unmarshal(payload, &f); err != nil {
		return fmt.Errorf("home file request: %w", err)
	}
	home := g.home
	if home == "" {
		home = homeDir(g.cfg)
	}
	return writeHomeFile(home, g.cfg.UID, g.cfg.GID, f)
}

// writeHomeFile writes f into home, owned by uid:gid: missing parent directories are
// made with mode 0700; the data goes to a new file beside the target (O_EXCL,
// O_NOFOLLOW) that is then renamed over it, so an existing file, a hard link or a symlink
// at f.Path is replaced and never written through. Everything is resolved inside an
// os.Root of home, so no symlink in the home can lead the write out of it; a parent that
// is not a directory (a symlink included) is an error. It returns the first error,
// naming the path.
func writeHomeFile(home string, uid, gid int, f guestcfg.HomeFile) error {
	if err := f.Check(); err != nil {
		return err
	}
	root, err := os.OpenRoot(home)
	if err != nil {
		return fmt.Errorf("write home file: %w", err)
	}
	defer root.Close()
	if err := makeParents(root, path.Dir(f.Path), uid, gid); err != nil {
		return fmt.Errorf("write home file %s: %w", f.Path, err)
	}
	tmp := f.Path + ".brood-new"
	_ = root.Remove(tmp) // a leftover of an earlier attempt; never followed
	out, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("write home file %s: %w", f.Path, err)
	}
	_, err = out.Write(f.Data)
	if err == nil {
		err = out.Chown(uid, gid)
	}
	if err == nil {
		err = out.Chmod(fs.FileMode(f.Mode)) // not narrowed by the umask
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, f.Path)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return fmt.Errorf("write home file %s: %w", f.Path, err)
	}
	return nil
}

// makeParents makes each directory of dir (relative to root) that does not exist, mode
// 0700, owned by uid:gid; an existing component must be a directory, not a symlink.
func makeParents(root *os.Root, dir string, uid, gid int) error {
	if dir == "." {
		return nil
	}
	p := ""
	for _, c := range strings.Split(dir, "/") {
		p = path.Join(p, c)
		err := root.Mkdir(p, 0o700)
		if err == nil {
			if err := root.Lchown(p, uid, gid); err != nil {
				return err
			}
			continue
		}
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		fi, err := root.Lstat(p)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s: %w", p, unix.ENOTDIR)
		}
	}
	return nil
}
