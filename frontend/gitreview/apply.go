package gitreview

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"brood.dev/brood/internal/atomicfile"
)

// BranchName returns the branch Apply creates for ref in session id:
// "refs/heads/brood/<id>/<short>", where short is the branch name for refs/heads/<b>,
// "tags/<t>" for refs/tags/<t> and "HEAD" for a detached HEAD.
func BranchName(id, ref string) string {
	short := strings.TrimPrefix(ref, "refs/heads/")
	if strings.HasPrefix(ref, "refs/tags/") {
		short = "tags/" + strings.TrimPrefix(ref, "refs/tags/")
	}
	return "refs/heads/brood/" + id + "/" + short
}

// Apply writes the objects u needs into W's object store (loose objects, each verified
// when it was read) and creates branch (a full ref name, BranchName by default) at u.New
// peeled to its commit. Before the ref is created, journal is called with the ref name
// and value, so the caller can record it for undo. It refuses a refused ref
// (ErrNotAppliable) and a branch that exists (ErrRefExists, loose or packed).
func (r *Review) Apply(u *RefUpdate, branch string, journal func(ref, value string) error) error {
	if u.Refused != "" {
		return fmt.Errorf("apply %s: %w: %s", escapeText(u.Name), ErrNotAppliable, u.Refused)
	}
	if why := refNameProblem(branch); why != "" || !strings.HasPrefix(branch, "refs/heads/") {
		return fmt.Errorf("apply %s as %s: not a branch name git accepts", escapeText(u.Name), escapeText(branch))
	}
	tip, err := (&refWalk{r: r, u: u, seen: map[plumbing.Hash]bool{}}).peel(plumbing.NewHash(u.New), false)
	if err != nil {
		return fmt.Errorf("apply %s: %w", escapeText(u.Name), err)
	}
	if err := r.refFree(branch); err != nil {
		return err
	}
	for _, h := range u.needed {
		if err := r.writeObject(h); err != nil {
			return err
		}
	}
	if err := journal(branch, tip.String()); err != nil {
		return fmt.Errorf("apply %s: journal: %w", escapeText(branch), err)
	}
	return r.createRef(branch, tip.String())
}

// refFree returns ErrRefExists when W has branch, as a loose or a packed ref.
func (r *Review) refFree(branch string) error {
	wst := openStore(r.wDir)
	if _, err := wst.Reference(plumbing.ReferenceName(branch)); err == nil {
		return fmt.Errorf("create %s: %w", escapeText(branch), ErrRefExists)
	}
	return nil
}

// writeObject writes the verified object h as a loose object of W
// (objects/xx/yyyy..., zlib-compressed "type size\0content", gitrepository-layout(5)),
// unless W has it: a temp file in the fan-out directory, fsync'd, hard-linked into
// place (an existing file wins, as git does), mode 0444.
func (r *Review) writeObject(h plumbing.Hash) error {
	if r.obj.inW(h) {
		return nil
	}
	obj, ok := r.obj.verified[h]
	if !ok {
		return fmt.Errorf("write object %s: not verified", h)
	}
	data, err := content(obj)
	if err != nil {
		return err
	}
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write([]byte(obj.Type().String() + " " + strconv.Itoa(len(data)) + "\x00"))
	zw.Write(data)
	if err := zw.Close(); err != nil {
		return fmt.Errorf("write object %s: %w", h, err)
	}
	hex := h.String()
	dir := filepath.Join(r.wDir, "objects", hex[:2])
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("write object %s: %w", h, err)
	}
	return linkNew(dir, hex[2:], z.Bytes(), 0o444)
}

// linkNew writes data to a temp file in dir, fsyncs it and links it to name (an
// existing name is kept), then removes the temp file and fsyncs dir.
func linkNew(dir, name string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(dir, "tmp_obj_")
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if err = os.Link(tmp, filepath.Join(dir, name)); errors.Is(err, fs.ErrExist) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
	}
	os.Remove(tmp)
	return atomicfile.SyncDir(dir)
}

// createRef creates the loose ref file name ("<hex>\n") in W, creating its directories
// below refs/heads/; it fails when the name exists.
func (r *Review) createRef(name, value string) error {
	p := filepath.Join(r.wDir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", escapeText(name), err)
	}
	f, err := os.OpenFile(p+".lock", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", escapeText(name), err)
	}
	_, err = f.WriteString(value + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(p+".lock", p)
	}
	os.Remove(p + ".lock")
	if err != nil {
		return fmt.Errorf("create %s: %w", escapeText(name), err)
	}
	return atomicfile.SyncDir(filepath.Dir(p))
}

// DeleteRef removes the loose ref name from the repository at the root of workspace w
// when it still holds value, then the directories below refs/heads/brood/ it leaves
// empty. It reports whether the ref was removed; a ref that moved, or was packed by git
// since, is left as it is (moved is then false, with an error saying why).
func DeleteRef(w, name, value string) (bool, error) {
	if !strings.HasPrefix(name, "refs/heads/brood/") || refNameProblem(name) != "" {
		return false, fmt.Errorf("delete %s: not a brood branch", escapeText(name))
	}
	gitDir := filepath.Join(w, ".git")
	p := filepath.Join(gitDir, filepath.FromSlash(name))
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("delete %s: no loose ref (removed, or packed by git since): delete it with git branch -D", escapeText(name))
	}
	if err != nil {
		return false, fmt.Errorf("delete %s: %w", escapeText(name), err)
	}
	if strings.TrimSpace(string(b)) != value {
		return false, fmt.Errorf("delete %s: it moved since the apply (now %s); left as it is", escapeText(name), escapeText(strings.TrimSpace(string(b))))
	}
	if err := os.Remove(p); err != nil {
		return false, fmt.Errorf("delete %s: %w", escapeText(name), err)
	}
	stop := filepath.Join(gitDir, "refs", "heads")
	for d := filepath.Dir(p); d != stop && strings.HasPrefix(d, stop+"/"); d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			break
		}
	}
	return true, atomicfile.SyncDir(stop)
}
