package flush

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"sort"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/digest"
	"brood.dev/brood/frontend/manifest"
)

// applier holds the open trees of one apply, undo or recover.
type applier struct {
	w, s     *tree // s is nil for undo and recover
	m        *manifest.Manifest
	workers  int
	dropMeta bool    // Options.DropMetadata
	cl       *cloner // FICLONE refusals seen by this apply
}

func newApplier(ws, snap string, m *manifest.Manifest, opts Options) (*applier, error) {
	w, err := openTree(ws, "workspace")
	if err != nil {
		return nil, err
	}
	a := &applier{w: w, m: m, workers: opts.Workers, dropMeta: opts.DropMetadata, cl: &cloner{}}
	if a.workers <= 0 {
		a.workers = 4
	}
	if snap != "" {
		if a.s, err = openTree(snap, "snapshot"); err != nil {
			w.close()
			return nil, err
		}
	}
	return a, nil
}

func (a *applier) close() {
	a.w.close()
	if a.s != nil {
		a.s.close()
	}
}

// statMatches reports whether the current lstat st is the entry recorded at snapshot time.
func statMatches(st *unix.Stat_t, base *manifest.Stat) bool {
	return st.Ino == base.Ino && st.Size == base.Size &&
		st.Mtim.Nano() == base.Mtime && st.Ctim.Nano() == base.Ctime &&
		st.Mode&07777 == base.Mode && manifest.TypeFromMode(st.Mode) == base.Type
}

// sameEntry reports whether two lstat results are the same, unchanged entry.
func sameEntry(a, b *unix.Stat_t) bool {
	return a.Ino == b.Ino && a.Dev == b.Dev && a.Size == b.Size && a.Mode == b.Mode &&
		a.Mtim == b.Mtim && a.Ctim == b.Ctim
}

// hashFile returns the content digest (package digest: data read, holes skipped) of the
// regular file rel below t and its fstat.
func hashFile(t *tree, rel string) ([]byte, unix.Stat_t, error) {
	f, _, err := t.openFile(rel)
	if err != nil {
		return nil, unix.Stat_t{}, err
	}
	defer f.Close()
	d, err := digest.File(f)
	if err != nil {
		return nil, unix.Stat_t{}, fmt.Errorf("hash %s %q: %w", t.name, rel, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, st, fmt.Errorf("fstat %s %q: %w", t.name, rel, err)
	}
	return d.Sum, st, nil
}

// plan turns items into ordered operations; items that cannot be applied go to
// res.Problems. Removals come first, deepest path first; then directory creations, files,
// symlinks and mode changes, in path order (parents before children).
func (a *applier) plan(items []Item, res *Result) []*op {
	var ops []*op
	listed := map[string]bool{}
	for _, it := range items {
		if listed[it.Change.Path] {
			res.Problems = append(res.Problems, Problem{Path: it.Change.Path,
				Err: fmt.Errorf("apply %q: listed twice: %w", it.Change.Path, ErrRefused)})
			continue
		}
		listed[it.Change.Path] = true
		o, err := a.planItem(it)
		if err != nil {
			res.Problems = append(res.Problems, Problem{Path: it.Change.Path, Err: err})
			continue
		}
		ops = append(ops, o...)
	}
	ops = a.planParents(ops, res)
	sort.SliceStable(ops, func(i, j int) bool {
		ri, rj := ops[i].Action == actDelete || ops[i].Action == actRmdir, ops[j].Action == actDelete || ops[j].Action == actRmdir
		if ri != rj {
			return ri
		}
		if ri {
			return ops[i].Path > ops[j].Path
		}
		return ops[i].Path < ops[j].Path
	})
	return ops
}

// planParents adds implicit mkdir operations for missing parents of created entries
// (mode taken from S's directory, masked with 0777) and drops creations whose parent is
// not a plain directory in W.
func (a *applier) planParents(ops []*op, res *Result) []*op {
	dirs := map[string]bool{} // parent path -> exists or will be created
	for _, o := range ops {
		if o.Action == actMkdir {
			dirs[o.Path] = true
		}
	}
	var out []*op
	for _, o := range ops {
		if o.Action != actCreate && o.Action != actMkdir {
			out = append(out, o)
			continue
		}
		var added []*op
		var err error
		parent, _ := splitPath(o.Path)
		var chain []string
		for p := parent; p != ""; p, _ = splitPath(p) {
			chain = append(chain, p)
		}
		for i := len(chain) - 1; i >= 0 && err == nil; i-- {
			p := chain[i]
			if dirs[p] {
				continue
			}
			if rule := diff.ProtectedPath(p); rule != "" {
				err = fmt.Errorf("apply %q: parent %q is a protected path (%s): %w", o.Path, p, rule, ErrRefused)
				break
			}
			st, ok, lerr := a.w.lstat(p)
			switch {
			case lerr != nil:
				err = fmt.Errorf("apply %q: %w", o.Path, lerr)
			case ok && manifest.TypeFromMode(st.Mode) == manifest.TypeDir:
				dirs[p] = true
			case ok:
				err = fmt.Errorf("apply %q: parent %q is not a directory in the workspace: %w", o.Path, p, ErrConflict)
			default:
				mode := uint32(0o755)
				if sst, sok, _ := a.s.lstat(p); sok && manifest.TypeFromMode(sst.Mode) == manifest.TypeDir {
					mode = sst.Mode & 0o777
				}
				added = append(added, &op{Path: p, Kind: diff.KindAdded, Action: actMkdir, Implicit: true,
					New: entryState{Type: manifest.TypeDir, Mode: mode}})
				dirs[p] = true
			}
		}
		if err != nil {
			res.Problems = append(res.Problems, Problem{Path: o.Path, Err: err})
			continue
		}
		out = append(out, added...)
		out = append(out, o)
	}
	return out
}

// planItem checks one item and returns its operations (two for a type change that
// involves a directory: remove, then create), or none when W already has the new state's
// type, content and mode. Errors name the path: ErrRefused for a change flush does not
// apply, ErrConflict when W changed since the snapshot, ErrNoReviewedHash for a mode
// change without content of W's to keep.
func (a *applier) planItem(it Item) ([]*op, error) {
	c := it.Change
	if err := a.admissible(c); err != nil {
		return nil, err
	}
	nw, err := a.newState(it)
	if err != nil {
		return nil, err
	}
	old, seen, err := a.oldState(c)
	if err != nil {
		return nil, err
	}
	if c.Kind == diff.KindMode && nw.Type == manifest.TypeRegular && len(nw.Hash) != digest.Size {
		// A mode-only change without a new hash: the content stays W's; only fchmod.
		if old.Type != manifest.TypeRegular {
			return nil, fmt.Errorf("apply %q: %w", c.Path, ErrNoReviewedHash)
		}
		nw.Hash = old.Hash
	}
	o := &op{Path: c.Path, Kind: c.Kind, Old: old, New: nw, content: it.Content, seen: seen}
	isDir := func(t manifest.Type) bool { return t == manifest.TypeDir }
	switch {
	case old.Type == manifest.TypeNone && nw.Type == manifest.TypeNone:
		return nil, fmt.Errorf("apply %q: absent from both the workspace and the snapshot: %w", c.Path, ErrRefused)
	case nw.Type == manifest.TypeNone:
		o.Action = actDelete
		if isDir(old.Type) {
			o.Action = actRmdir
		}
	case old.Type == manifest.TypeNone:
		o.Action = actCreate
		if isDir(nw.Type) {
			o.Action = actMkdir
		}
	case isDir(old.Type) && isDir(nw.Type):
		if old.Mode == nw.Mode {
			return nil, nil
		}
		o.Action, o.New.Type = actChmod, manifest.TypeDir
	case isDir(old.Type) || isDir(nw.Type):
		return a.planTypeChange(it, old, nw, seen)
	case old.Type == manifest.TypeRegular && nw.Type == manifest.TypeRegular && bytes.Equal(old.Hash, nw.Hash):
		if old.Mode == nw.Mode {
			return nil, nil
		}
		o.Action = actChmod
	default:
		o.Action = actReplace
	}
	if o.Action == actChmod && it.Content != nil {
		o.content = nil
	}
	if err := a.planMeta(o, nw.Type); err != nil {
		return nil, err
	}
	return []*op{o}, nil
}

// admissible refuses, before W or S is looked at, a change flush never applies: an
// invalid path (ValidatePath's error), a change the diff refused or left in conflict
// (ErrRefused, ErrConflict, with its reason), a protected path or an unknown change kind
// (ErrRefused), or a path that was never copied into S (excluded).
func (a *applier) admissible(c diff.Change) error {
	if err := ValidatePath(c.Path); err != nil {
		return err
	}
	switch c.Kind {
	case diff.KindRefused:
		return fmt.Errorf("apply %q: %s: %w", c.Path, c.Reason, ErrRefused)
	}
	if rule := diff.ProtectedPath(c.Path); rule != "" {
		// The diff refuses these already; flush never trusts a Change to say so.
		return fmt.Errorf("apply %q: protected path (%s): %w", c.Path, rule, ErrRefused)
	}
	switch c.Kind {
	case diff.KindConflict:
		return fmt.Errorf("apply %q: %s: %w", c.Path, c.Reason, ErrConflict)
	case diff.KindAdded, diff.KindModified, diff.KindDeleted, diff.KindMode, diff.KindSymlink, diff.KindType:
	default:
		return fmt.Errorf("apply %q: unknown change kind %q: %w", c.Path, c.Kind, ErrRefused)
	}
	return a.excluded(c.Path)
}

// planTypeChange returns the two operations of a type change that involves a directory
// (old or nw is one), which cannot be one atomic rename: remove W's entry old (lstat
// seen; rmdir for a directory, else unlink), then create nw (mkdir, or a temp file and a
// rename). It returns planMeta's error for the removal.
func (a *applier) planTypeChange(it Item, old, nw entryState, seen unix.Stat_t) ([]*op, error) {
	c := it.Change
	rm := &op{Path: c.Path, Kind: c.Kind, Old: old, Action: actDelete, seen: seen}
	if old.Type == manifest.TypeDir {
		rm.Action = actRmdir
	}
	mk := &op{Path: c.Path, Kind: c.Kind, New: nw, Action: actCreate, content: it.Content}
	if nw.Type == manifest.TypeDir {
		mk.Action = actMkdir
	}
	if err := a.planMeta(rm, nw.Type); err != nil {
		return nil, err
	}
	return []*op{rm, mk}, nil
}

// excluded fails with ErrRefused when path, or a directory above it, was never copied
// into S (a secret, a special or unreadable file): S cannot speak for it.
func (a *applier) excluded(path string) error {
	if a.m == nil {
		return nil
	}
	for p := path; p != ""; p, _ = splitPath(p) {
		if e := a.m.Lookup(p); e != nil && (e.Excluded != "" || e.Skipped != "") {
			return fmt.Errorf("apply %q: excluded from the snapshot: %w", path, ErrRefused)
		}
	}
	return nil
}

// planMeta records the inode flags (planFlags) and extended attributes of the regular
// file o replaces, deletes or changes the mode of in o.Old (for undo) and, when an entry
// of type newType replaces it, decides which ones the new file gets (o.keep,
// o.keepFlags) and which it loses (o.lost). A loss of one the flush keeps by rule fails
// with ErrMetadata unless the apply drops metadata: the change is then refused before
// anything is written.
func (a *applier) planMeta(o *op, newType manifest.Type) error {
	if o.Old.Type != manifest.TypeRegular || (o.Action != actReplace && o.Action != actDelete && o.Action != actChmod) {
		return nil
	}
	fd, err := a.openSeen(o)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	replaced := newType != manifest.TypeNone && o.Action != actChmod
	if err := a.planFlags(o, fd, replaced, newType == manifest.TypeRegular); err != nil {
		return err
	}
	if o.Action == actChmod {
		return nil
	}
	xs, err := listXattrs(procPath(fd))
	if err != nil {
		return fmt.Errorf("read attributes of %q: %w", o.Path, err)
	}
	o.Old.Xattrs, o.Old.XattrsRead = xs, true
	if !replaced {
		return nil // deleted as reviewed; undo puts the attributes back
	}
	keep, lost := a.keptXattrs(o, xs, newType)
	o.keep, o.lost = keep, append(o.lost, lost...)
	for _, l := range o.lost {
		if l.Refused && !a.dropMeta {
			return fmt.Errorf("apply %q: cannot keep %s (%s): %w", o.Path, l.Attr, l.Why, ErrMetadata)
		}
	}
	return nil
}

// newState is what the item asks W to hold: from Content, or from S's entry.
func (a *applier) newState(it Item) (entryState, error) {
	c := it.Change
	var nw entryState
	if c.Kind == diff.KindDeleted {
		if it.Content != nil {
			return nw, fmt.Errorf("apply %q: content given for a deletion: %w", c.Path, ErrRefused)
		}
		return nw, nil
	}
	st, ok, err := a.s.lstat(c.Path)
	if err != nil {
		return nw, fmt.Errorf("apply %q: %w", c.Path, err)
	}
	typ := manifest.TypeNone
	if ok {
		typ = manifest.TypeFromMode(st.Mode)
	}
	if it.Content != nil {
		if typ != manifest.TypeRegular && typ != manifest.TypeNone {
			return nw, fmt.Errorf("apply %q: content given for a non-regular file: %w", c.Path, ErrRefused)
		}
		sum := digest.Bytes(it.Content)
		mode := c.NewMode & 0o777
		if mode == 0 && ok {
			mode = st.Mode & 0o777
		} else if mode == 0 {
			mode = 0o644
		}
		return entryState{Type: manifest.TypeRegular, Mode: mode, Hash: sum}, nil
	}
	switch typ {
	case manifest.TypeNone:
		return nw, nil
	case manifest.TypeRegular:
		if len(c.NewHash) != digest.Size && c.Kind != diff.KindMode {
			return nw, fmt.Errorf("apply %q: %w", c.Path, ErrNoReviewedHash)
		}
		mode := c.NewMode & 0o777
		if mode == 0 {
			mode = st.Mode & 0o777
		}
		return entryState{Type: typ, Mode: mode, Hash: append([]byte(nil), c.NewHash...)}, nil
	case manifest.TypeSymlink:
		target, err := a.s.readlink(c.Path)
		if err != nil {
			return nw, fmt.Errorf("apply %q: %w", c.Path, err)
		}
		if err := checkLinkTarget(c.Path, target); err != nil {
			return nw, err
		}
		return entryState{Type: typ, Mode: 0o777, Link: target}, nil
	case manifest.TypeDir:
		return entryState{Type: typ, Mode: st.Mode & 0o777}, nil
	}
	return nw, fmt.Errorf("apply %q: special file in the snapshot: %w", c.Path, ErrRefused)
}

// oldState checks that W's entry still matches the base recorded at snapshot time and
// returns it with its current lstat. A mismatch is ErrConflict naming what changed; a
// special file in W is ErrRefused; errors name c.Path.
func (a *applier) oldState(c diff.Change) (entryState, unix.Stat_t, error) {
	var old entryState
	base, baseHash, baseLink := a.snapshotBase(c)
	cur, ok, err := a.w.lstat(c.Path)
	if err != nil {
		return old, cur, fmt.Errorf("apply %q: %w", c.Path, err)
	}
	conflict := func(why string) (entryState, unix.Stat_t, error) {
		return old, cur, conflictErr(c.Path, why)
	}
	if base.Type == manifest.TypeNone {
		if ok {
			return conflict("absent at snapshot, present in the workspace now")
		}
		return old, cur, nil
	}
	if !ok {
		return conflict("removed from the workspace since the snapshot")
	}
	typ := manifest.TypeFromMode(cur.Mode)
	if typ != base.Type {
		return conflict("type changed in the workspace since the snapshot")
	}
	if cur.Mode&0o7777 != base.Mode {
		return conflict("mode changed in the workspace since the snapshot")
	}
	old = entryState{Type: typ, Mode: cur.Mode & 0o7777}
	same := statMatches(&cur, &base)
	switch typ {
	case manifest.TypeRegular:
		if old.Hash, err = a.oldHash(c.Path, &cur, same, baseHash); err != nil {
			return old, cur, err
		}
	case manifest.TypeSymlink:
		if old.Link, err = a.oldLink(c.Path, same, baseLink); err != nil {
			return old, cur, err
		}
	case manifest.TypeDir:
	default:
		return old, cur, fmt.Errorf("apply %q: special file in the workspace: %w", c.Path, ErrRefused)
	}
	return old, cur, nil
}

// snapshotBase returns what W held at c.Path when the snapshot was taken, as the
// manifest recorded it: its stat (type TypeNone when absent), content digest and link
// hash (sha256 of the link text). The reviewed c.OldHash, when set, overrides the
// content digest; for a reviewed addition the base is "absent" whatever the manifest
// says.
func (a *applier) snapshotBase(c diff.Change) (base manifest.Stat, baseHash, baseLink []byte) {
	if a.m != nil {
		if e := a.m.Lookup(c.Path); e != nil {
			base, baseHash, baseLink = e.W, e.Hash, e.LinkHash
		}
	}
	if c.OldHash != nil {
		baseHash = c.OldHash
	}
	if c.Kind == diff.KindAdded {
		// What was reviewed is an addition: W must not hold the path, whatever the
		// manifest recorded (the review may hand a conflict resolved over a W deletion).
		base, baseHash = manifest.Stat{}, nil
	}
	return base, baseHash, baseLink
}

// oldHash returns the content digest of W's regular file path, whose lstat is cur: the
// base digest when the stat still matches the snapshot's (same) and the digest is
// complete, else the digest of the file hashed now. The file is ErrConflict when it
// changes while hashed, when its content differs from baseHash, or when there is no base
// digest and its stat changed.
func (a *applier) oldHash(path string, cur *unix.Stat_t, same bool, baseHash []byte) ([]byte, error) {
	if same && len(baseHash) == digest.Size {
		return baseHash, nil
	}
	h, st, err := hashFile(a.w, path)
	if err != nil {
		return nil, fmt.Errorf("apply %q: %w", path, err)
	}
	if !sameEntry(&st, cur) {
		return nil, conflictErr(path, "changing in the workspace")
	}
	if baseHash == nil && !same {
		return nil, conflictErr(path, "changed in the workspace since the snapshot (no base hash)")
	}
	if baseHash != nil && !bytes.Equal(h, baseHash) {
		return nil, conflictErr(path, "content changed in the workspace since the snapshot")
	}
	return h, nil
}

// oldLink returns the target of W's symlink path. When its stat still matches the
// snapshot's (same), the target is returned as read. When it does not, the snapshot must
// have recorded a complete link hash (sha256) and the link text must hash to it (a
// symlink recreated with the same text is unchanged); else it is ErrConflict.
func (a *applier) oldLink(path string, same bool, baseLink []byte) (string, error) {
	if !same && len(baseLink) != sha256.Size {
		return "", conflictErr(path, "symlink changed in the workspace since the snapshot")
	}
	link, err := a.w.readlink(path)
	if err != nil {
		return "", fmt.Errorf("apply %q: %w", path, err)
	}
	// Recreated (new inode, ctime) but with the same link text: unchanged.
	if sum := sha256.Sum256([]byte(link)); !same && !bytes.Equal(sum[:], baseLink) {
		return "", conflictErr(path, "symlink changed in the workspace since the snapshot")
	}
	return link, nil
}

// conflictErr is the ErrConflict of applying path, saying why.
func conflictErr(path, why string) error {
	return fmt.Errorf("apply %q: %s: %w", path, why, ErrConflict)
}
