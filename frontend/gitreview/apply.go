package gitreview

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"

	"brood.dev/brood/internal/atomicfile"
)

// BranchName returns the branch Apply creates for ref in session id:
// "refs/heads/brood/<id>/<short>", where short is the branch name for refs/heads/<b>,
// "tags/<t>" for refs/tags/<t> and "HEAD" for a detached HEAD.
func BranchName(id, ref string) string {
	return "refs/heads/brood/" + id + "/" + refShort(ref)
}

// refShort is the part of a branch name that stands for ref: the branch name for
// refs/heads/<b>, "tags/<t>" for refs/tags/<t>, "HEAD" for a detached HEAD.
func refShort(ref string) string {
	if strings.HasPrefix(ref, "refs/tags/") {
		return "tags/" + strings.TrimPrefix(ref, "refs/tags/")
	}
	return strings.TrimPrefix(ref, "refs/heads/")
}

// NamedBranch returns the branch Apply creates for ref when the developer names it
// (brood apply --branch NAME): "refs/heads/<name>" when ref is the only ref that changed
// (several false), else "refs/heads/<name>/<short>" with short as in BranchName. A name
// given as "refs/heads/<b>" means <b>. Check the name first with CheckBranchName.
func NamedBranch(name, ref string, several bool) string {
	name = "refs/heads/" + strings.TrimPrefix(name, "refs/heads/")
	if several {
		return name + "/" + refShort(ref)
	}
	return name
}

// CheckBranchName returns an error naming name (escaped) when refs/heads/<name> is not a
// branch name git accepts (git-check-ref-format(1), the rules refNameProblem applies to
// the agent's refs).
func CheckBranchName(name string) error {
	full := "refs/heads/" + strings.TrimPrefix(name, "refs/heads/")
	if name == "" || name == "HEAD" || strings.HasPrefix(name, "-") {
		return fmt.Errorf("branch %s: not a branch name", escapeText(name))
	}
	if why := refNameProblem(full); why != "" {
		return fmt.Errorf("branch %s: %s", escapeText(name), why)
	}
	return nil
}

// BranchFree returns an error wrapping ErrRefExists when the repository at the root of
// workspace w cannot get branch (a full ref name): the ref exists, loose or packed, or
// git's directory/file rule forbids it (a ref is a prefix of it, "refs/heads/a" for
// "refs/heads/a/b", or lies below it).
func BranchFree(w, branch string) error {
	return refFree(filepath.Join(w, ".git"), branch)
}

// Apply writes the objects u needs into W's object store (one pack, writePack; each
// object verified when it was read) and creates branch (a full ref name, BranchName by default) at u.New
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
	if err := refFree(r.wDir, branch); err != nil {
		return err
	}
	if err := r.writePack(u.needed); err != nil {
		return fmt.Errorf("apply %s: %w", escapeText(u.Name), err)
	}
	if err := journal(branch, tip.String()); err != nil {
		return fmt.Errorf("apply %s: journal: %w", escapeText(branch), err)
	}
	return r.createRef(branch, tip.String())
}

// refFree returns ErrRefExists when the repository gitDir has branch, as a loose or a
// packed ref, or a ref that git's directory/file rule puts in its way (BranchFree).
func refFree(gitDir, branch string) error {
	wst := openStore(gitDir, false)
	defer wst.Close()
	if _, err := wst.Reference(plumbing.ReferenceName(branch)); err == nil {
		return fmt.Errorf("create %s: %w", escapeText(branch), ErrRefExists)
	}
	refs, err := wst.IterReferences()
	if err != nil {
		return fmt.Errorf("create %s: list refs: %w", escapeText(branch), err)
	}
	defer refs.Close()
	return refs.ForEach(func(ref *plumbing.Reference) error {
		n := ref.Name().String()
		if strings.HasPrefix(branch, n+"/") || strings.HasPrefix(n, branch+"/") {
			return fmt.Errorf("create %s: %w: %s is in its way", escapeText(branch), ErrRefExists, escapeText(n))
		}
		return nil
	})
}

// writePack writes the verified objects hashes (those W lacks) into W's object store as
// one pack with its index (objects/pack/pack-<sha>.{pack,idx}, gitformat-pack(5)),
// encoded by go-git from the verified copies and parsed back by go-git's pack writer
// (which hashes every object again), then fsyncs both files and the directory. Nothing
// is written when W already has every object.
func (r *Review) writePack(hashes []plumbing.Hash) error {
	var need []plumbing.Hash
	for _, h := range hashes {
		if _, ok := r.obj.verified[h]; !ok {
			return fmt.Errorf("write object %s: not verified", h)
		}
		if !r.obj.inW(h) {
			need = append(need, h)
		}
	}
	if len(need) == 0 {
		return nil
	}
	w, err := r.obj.Storage.ObjectStorage.PackfileWriter()
	if err != nil {
		return fmt.Errorf("write pack: %w", err)
	}
	sum, err := packfile.NewEncoder(w, r.obj, false).Encode(need, 0)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write pack: %w", err)
	}
	dir := filepath.Join(r.wDir, "objects", "pack")
	for _, ext := range []string{".pack", ".idx"} {
		if err := fsyncFile(filepath.Join(dir, "pack-"+sum.String()+ext)); err != nil {
			return err
		}
	}
	return atomicfile.SyncDir(dir)
}

// fsyncFile fsyncs the file at p.
func fsyncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("sync %s: %w", p, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", p, err)
	}
	return nil
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
	err = writeRefLock(f, value)
	if err == nil {
		err = os.Link(p+".lock", p)
	}
	os.Remove(p + ".lock")
	if err != nil {
		return fmt.Errorf("create %s: %w", escapeText(name), err)
	}
	return atomicfile.SyncDir(filepath.Dir(p))
}

// DeleteRef removes the loose branch name (a full ref below refs/heads/: one an apply
// created and journaled) from the repository at the root of workspace w when it still
// holds value, then the directories below refs/heads/ it leaves empty. It reports whether the ref was removed; a ref that moved, or was packed by git
// since, is left as it is (moved is then false, with an error saying why).
func DeleteRef(w, name, value string) (bool, error) {
	if !strings.HasPrefix(name, "refs/heads/") || refNameProblem(name) != "" {
		return false, fmt.Errorf("delete %s: not a branch", escapeText(name))
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

// writeRefLock writes value (a 40-hex object id) and a newline into the ref's lock file
// f, syncs it and closes it, as git's own ref writes do; it returns the first error of
// the write, the fsync or the close. f is closed either way.
func writeRefLock(f *os.File, value string) error {
	_, err := f.WriteString(value + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
