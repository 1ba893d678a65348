package guest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

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

// setUser makes user the account of uid:gid with home in etc/passwd and etc/group (in
// the root overlay, so the image is unchanged): the lines naming user or uid are replaced
// by "user:x:uid:gid:brood agent:home:/bin/sh", and a group user with gid is added unless
// one with gid exists. Programs that look the uid up (git's default identity, Node's
// os.userInfo, ssh) then find it. It returns the read or write error, naming the file.
func setUser(etc, user string, uid, gid int, home string) error {
	id, g := strconv.Itoa(uid), strconv.Itoa(gid)
	passwd, err := readLines(filepath.Join(etc, "passwd"))
	if err != nil {
		return err
	}
	passwd = slices.DeleteFunc(passwd, func(l string) bool {
		f := strings.Split(l, ":")
		return f[0] == user || (len(f) > 2 && f[2] == id)
	})
	passwd = append(passwd, fmt.Sprintf("%s:x:%d:%d:brood agent:%s:/bin/sh", user, uid, gid, home))
	group, err := readLines(filepath.Join(etc, "group"))
	if err != nil {
		return err
	}
	group = slices.DeleteFunc(group, func(l string) bool {
		f := strings.Split(l, ":")
		return f[0] == user && (len(f) < 3 || f[2] != g)
	})
	if !slices.ContainsFunc(group, func(l string) bool {
		f := strings.Split(l, ":")
		return len(f) > 2 && f[2] == g
	}) {
		group = append(group, fmt.Sprintf("%s:x:%d:", user, gid))
	}
	if err := writeLines(filepath.Join(etc, "passwd"), passwd); err != nil {
		return err
	}
	return writeLines(filepath.Join(etc, "group"), group)
}

// readLines returns file's non-empty lines; a missing file has none.
func readLines(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	return slices.DeleteFunc(strings.Split(string(b), "\n"), func(l string) bool { return l == "" }), nil
}

// writeLines replaces file with lines (mode 0644) through a renamed temporary file.
func writeLines(file string, lines []string) error {
	tmp := file + ".brood"
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := os.Rename(tmp, file); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}
