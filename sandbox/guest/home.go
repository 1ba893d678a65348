package guest

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// HomeSize is the size cap of the agent's home, a tmpfs option (tmpfs(5): a percentage
// of the VM's RAM). tmpfs takes memory only for what is written, shared with the root
// overlay's tmpfs and /tmp; the cap keeps a runaway cache in the home from taking all of
// it.
const HomeSize = "50%"

// skelDirs are where the home's initial content comes from, first that exists: what the
// image has at the home path itself, the image's agent home (made by the recipes'
// useradd), then /etc/skel.
func skelDirs(home string) []string { return []string{home, "/home/agent", "/etc/skel"} }

// makeHome makes the agent's home at home: a fresh tmpfs (nosuid, nodev, size HomeSize)
// owned by uid:gid with mode 0700, whatever uid the image's files belong to, holding a
// copy of the first directory of skels that exists (directories, regular files and
// symlinks, each owned by uid:gid, permission bits kept without setuid, setgid and
// sticky). The source is opened before the mount, so a skeleton at home itself is read
// from under it. Nothing of it is in the workspace or the image: it dies with the VM.
// It returns the first mkdir, mount or copy error, naming the path.
func makeHome(home string, uid, gid int, skels []string) error {
	var src *os.Root
	for _, s := range skels {
		if fi, err := os.Lstat(s); err == nil && fi.IsDir() {
			r, err := os.OpenRoot(s)
			if err != nil {
				return fmt.Errorf("open home skeleton: %w", err)
			}
			defer r.Close()
			src = r
			break
		}
	}
	data := fmt.Sprintf("mode=0700,uid=%d,gid=%d,size=%s", uid, gid, HomeSize)
	if err := mount("tmpfs", home, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return fmt.Errorf("make home: %w", err)
	}
	if src == nil {
		return nil
	}
	dst, err := os.OpenRoot(home)
	if err != nil {
		return fmt.Errorf("make home: %w", err)
	}
	defer dst.Close()
	if err := copyTree(src, dst, uid, gid); err != nil {
		return fmt.Errorf("copy home skeleton %s to %s: %w", src.Name(), home, err)
	}
	return nil
}

// copyTree copies src's directories, regular files and symlinks into dst (which must
// be empty), owned by uid:gid; other file types are skipped.
func copyTree(src, dst *os.Root, uid, gid int) error {
	return fs.WalkDir(src.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		perm := fi.Mode().Perm()
		switch {
		case d.IsDir():
			err = dst.Mkdir(p, perm)
		case d.Type()&fs.ModeSymlink != 0:
			var t string
			if t, err = src.Readlink(p); err == nil {
				err = dst.Symlink(t, p)
			}
		case d.Type().IsRegular():
			err = copyFile(src, dst, p, perm)
		default:
			return nil
		}
		if err == nil {
			err = dst.Lchown(p, uid, gid)
		}
		if err == nil && d.Type()&fs.ModeSymlink == 0 {
			err = dst.Chmod(p, perm) // not narrowed by the umask
		}
		return err
	})
}

// copyFile copies the regular file p of src to a new file p of dst with mode perm.
func copyFile(src, dst *os.Root, p string, perm fs.FileMode) error {
	in, err := src.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := dst.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", filepath.Join(src.Name(), p), err)
	}
	return out.Close()
}
