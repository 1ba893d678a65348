package diff

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/manifest"
)

// contents reads what the planner cannot learn from a stat: file digests and symlink
// targets. The real one reads beneath the tree roots (tree.go); fuzz targets fake it.
type contents interface {
	digest(t Tree, p string, st manifest.Stat) (Digest, error)
	readlink(t Tree, p string) (string, error)
}

// planner turns (manifest entry, W now, S now) triples into changes. It reads the content
// of a file only when the file's stat differs from the manifest (or to learn the base of a
// file whose S stat differs), and each file at most once.
type planner struct {
	src       contents
	maxSize   int64
	protected []string
	caseFold  bool
	// gitIncluded maps foldPath of each file a git config in W includes to its risk reason.
	gitIncluded map[string]string
	// allowUnsafeNames lists names with control characters as ordinary changes.
	allowUnsafeNames bool
	memo             map[memoKey]Digest
	unhashed         map[string]manifest.Stat // deleted in S, unchanged in W, no manifest hash
	excluded         map[string]excludedEntry // foldPath -> entry kept out of S as a secret
	skipped          map[string]string        // path -> reason, for other entries not copied
	// deepS lists (sorted) the directories of S the walk did not fully list (maxPathLen).
	deepS []string
	// sn is the walk of S sorted by path (set by plan): symlink and git dir lookups.
	sn []node
	// sFold holds foldPath of every path of sn, built on first use (sHolds).
	sFold map[string]bool
	// gitDerivedOn: W's root holds a .git directory, so gitDerived paths are no changes.
	gitDerivedOn bool
	// prefetch, if set, may fill memo before classification (parallel hashing).
	prefetch func(p *planner, candidates []item)
}

type memoKey struct {
	t Tree
	p string
}

// item is one path of the merge: its manifest entry (nil when new) and its stat in W and
// S now (TypeNone when absent).
type item struct {
	path string
	me   *manifest.Entry
	w, s manifest.Stat
}

// plan merges the sorted manifest entries and the sorted walks of W and S and returns the
// changes sorted by path bytes. entries must be sorted by Path without duplicates.
func (p *planner) plan(entries []manifest.Entry, wn, sn []node) ([]Change, error) {
	p.memo = make(map[memoKey]Digest)
	p.unhashed = make(map[string]manifest.Stat)
	p.excluded = make(map[string]excludedEntry)
	p.skipped = make(map[string]string)
	p.sn = sn
	for _, e := range entries {
		if e.Excluded != "" {
			p.excluded[foldPath(e.Path)] = excludedEntry{path: e.Path, rule: e.Excluded}
		}
		if e.Skipped != "" && e.W.Type == manifest.TypeDir {
			p.skipped[e.Path] = e.Skipped
		}
	}
	var candidates []item // paths whose S stat changed: the only ones that can be changes
	var wNew []string     // created in W during the session, absent from S (sorted)
	i, j, k := 0, 0, 0
	for i < len(entries) || j < len(wn) || k < len(sn) {
		// The smallest path among the three heads.
		var cur string
		have := false
		if i < len(entries) {
			cur, have = entries[i].Path, true
		}
		if j < len(wn) && (!have || wn[j].path < cur) {
			cur, have = wn[j].path, true
		}
		if k < len(sn) && (!have || sn[k].path < cur) {
			cur = sn[k].path
		}
		it := item{path: cur}
		if i < len(entries) && entries[i].Path == cur {
			it.me = &entries[i]
			i++
		}
		if j < len(wn) && wn[j].path == cur {
			it.w = wn[j].st
			j++
		}
		if k < len(sn) && sn[k].path == cur {
			it.s = sn[k].st
			k++
		}
		var baseS manifest.Stat
		if it.me != nil {
			baseS = it.me.S
		}
		if statChanged(baseS, it.s) || p.isDeep(it.path) {
			candidates = append(candidates, it)
		}
		if it.me == nil && it.w.Type != manifest.TypeNone && it.s.Type == manifest.TypeNone {
			wNew = append(wNew, it.path)
		}
	}
	if p.prefetch != nil {
		p.prefetch(p, candidates)
	}
	var out []Change
	for _, it := range candidates {
		c, err := p.classify(it)
		if err != nil {
			return nil, err
		}
		if c != nil {
			addModeRisk(c)
			out = append(out, *c)
		}
	}
	markRemovedDirsWithNewEntries(out, entries, wNew)
	if p.caseFold {
		markCaseCollisions(out, wn, sn)
	}
	p.refuseBelowRefused(out)
	if err := p.findRenames(out); err != nil {
		return nil, err
	}
	return out, nil
}

// statChanged reports whether now differs from base in any field the guest could have
// changed: type, permission bits, and for non-directories size, mtime, ctime and inode.
// A directory's times and size change whenever its entries do, so only its type and
// mode count (its entries are compared one by one).
func statChanged(base, now manifest.Stat) bool {
	if base.Type != now.Type {
		return true
	}
	if base.Type == manifest.TypeNone {
		return false
	}
	if base.Mode != now.Mode {
		return true
	}
	if base.Type == manifest.TypeDir {
		return false
	}
	return base.Size != now.Size || base.Mtime != now.Mtime || base.Ctime != now.Ctime || base.Ino != now.Ino
}

func isSpecial(t manifest.Type) bool {
	return t == manifest.TypeFIFO || t == manifest.TypeSocket || t == manifest.TypeDevice
}

func typeName(t manifest.Type) string {
	switch t {
	case manifest.TypeNone:
		return "nothing"
	case manifest.TypeRegular:
		return "file"
	case manifest.TypeDir:
		return "directory"
	case manifest.TypeSymlink:
		return "symlink"
	case manifest.TypeFIFO:
		return "fifo"
	case manifest.TypeSocket:
		return "socket"
	case manifest.TypeDevice:
		return "device"
	}
	return fmt.Sprintf("type %d", t)
}

// classify decides what happened to one path. It returns nil when S holds no change
// there (in particular when only W changed).
func (p *planner) classify(it item) (*Change, error) {
	var baseS, baseW manifest.Stat
	if it.me != nil {
		baseS, baseW = it.me.S, it.me.W
	}
	sNow, wNow := it.s, it.w
	if !statChanged(baseS, sNow) && !p.isDeep(it.path) {
		return nil, nil // S untouched here: nothing to flush, whatever W did
	}
	if sNow.Type == manifest.TypeNone && wNow.Type == manifest.TypeNone || p.gitDerivedOn && gitDerived(it.path, p.caseFold) {
		return nil, nil // deleted in both, or a file git derives (reviewed as commits by package gitreview)
	}
	c := &Change{Path: it.path}
	if baseW.Type != manifest.TypeNone {
		c.OldMode = baseW.Mode
	}
	if baseW.Type == manifest.TypeRegular {
		c.OldSize = baseW.Size
	}
	if sNow.Type != manifest.TypeNone {
		c.NewMode = sNow.Mode
	}
	if sNow.Type == manifest.TypeRegular {
		c.NewSize = sNow.Size
	}
	c.Risk = p.risk(it.path, baseS, sNow)

	// 1. Refusals decided from names and stats alone: nothing is read.
	if why := p.nameStatRefusal(it, baseW, sNow); why != "" {
		return refuse(c, why), nil
	}

	// 2. What S did, from content where the stat alone cannot tell.
	if it.me == nil && sNow.Type == manifest.TypeDir && wNow.Type == manifest.TypeDir {
		return nil, nil // the same directory created on both sides
	}
	change, err := p.sChange(it, c, baseS, baseW, sNow, wNow)
	if err != nil || !change {
		return nil, err
	}

	// 3. Refusals that need the target or the kind.
	if sNow.Type == manifest.TypeSymlink {
		t, err := p.src.readlink(TreeS, it.path)
		if err != nil {
			return nil, fmt.Errorf("classify %s: %w", Escape(it.path), err)
		}
		if why := symlinkTargetProblem(it.path, t); why != "" {
			return refuse(c, "symlink "+Escape(it.path)+": "+why), nil
		}
		into, err := p.linkIntoGitDir(it.path, t)
		if err != nil {
			return nil, err
		}
		if into {
			return refuse(c, "symlink "+Escape(it.path)+": target is inside a .git directory"), nil
		}
	}
	if rule := protectedPath(it.path, p.protected); rule != "" {
		return refuse(c, fmt.Sprintf("protected path (%s)", Escape(rule))), nil
	}
	if why := p.bareGitDirProblem(it.path); why != "" {
		return refuse(c, why), nil
	}

	// 4. W changed too: a conflict, unless W now holds exactly what S holds.
	if why, err := p.wChange(it, baseW, wNow); err != nil {
		return nil, err
	} else if why != "" {
		if p.sameOnBothSides(it, c, sNow, wNow) {
			return nil, nil
		}
		c.Kind = KindConflict
		c.Reason = "W changed since the snapshot (" + why + ")"
	}
	return c, nil
}

// nameStatRefusal says why the change at it is refused from its name and the stats alone
// ("" when nothing here refuses it): a name brood cannot write, a path too deep, a secret
// rule or a skipped ancestor, a sanitized or skipped W entry, a special file or a file
// over the size limit. Nothing is read.
func (p *planner) nameStatRefusal(it item, baseW, sNow manifest.Stat) string {
	if err := CheckPath(it.path); err != nil && !(p.allowUnsafeNames && errors.Is(err, ErrControlByte)) {
		return nameReason(err)
	}
	if why := p.tooDeep(it.path); why != "" {
		return why
	}
	if it.me != nil && it.me.Excluded != "" {
		return fmt.Sprintf("path is excluded from the snapshot by secret rule %s; S created a %s there", Escape(it.me.Excluded), typeName(sNow.Type))
	}
	if e, ok := p.excludedSpelling(it.path); ok {
		return fmt.Sprintf("another spelling of %s, excluded from the snapshot by secret rule %s", Escape(e.path), Escape(e.rule))
	}
	if dir, rule := p.excludedAncestor(it.path); dir != "" {
		return fmt.Sprintf("below %s, excluded from the snapshot by secret rule %s", Escape(dir), Escape(rule))
	}
	if dir, why := ancestorIn(p.skipped, it.path); dir != "" {
		return fmt.Sprintf("below %s, which the snapshot did not copy (%s)", Escape(dir), why)
	}
	if it.me != nil && it.me.Sanitized {
		return "S holds a sanitized copy of this file (credentials and commands removed); its changes are never flushed"
	}
	if it.me != nil && it.me.Skipped != "" {
		return fmt.Sprintf("W holds a %s here that was not copied; S created a %s there", typeName(baseW.Type), typeName(sNow.Type))
	}
	if isSpecial(sNow.Type) {
		return fmt.Sprintf("special file (%s) in S", typeName(sNow.Type))
	}
	if sNow.Type == manifest.TypeRegular && sNow.Size > p.maxSize {
		return fmt.Sprintf("size %d bytes is over the limit of %d bytes", sNow.Size, p.maxSize)
	}
	return ""
}

// tooDeep says why path cannot be reviewed because of its length ("" when it can): it
// is longer than maxPathLen (never listed by the walk, so a manifest path that long is
// unknown in S, not deleted), or it is a directory of S holding such entries.
func (p *planner) tooDeep(path string) string {
	if len(path) > maxPathLen {
		return fmt.Sprintf("path longer than %d bytes", maxPathLen)
	}
	if p.isDeep(path) {
		return fmt.Sprintf("directory nesting too deep to review (entries with paths over %d bytes)", maxPathLen)
	}
	return ""
}

// isDeep reports whether path is a directory of S whose entries were not all listed
// (maxPathLen): it is always refused, so what S holds there is never silently dropped.
func (p *planner) isDeep(path string) bool {
	_, ok := slices.BinarySearch(p.deepS, path)
	return ok
}

// excludedEntry is a manifest entry the snapshot excluded as a secret: W's spelling of
// its path and the secret rule.
type excludedEntry struct{ path, rule string }

// excludedAncestor returns the nearest directory above path that the snapshot excluded
// as a secret (W's spelling), and its rule ("" when none): S must not write into the
// developer's secret directories, in any spelling (compared by foldName).
func (p *planner) excludedAncestor(path string) (dir, rule string) {
	if len(p.excluded) == 0 {
		return "", ""
	}
	f := foldPath(path) // as many components as path
	for i := strings.LastIndexByte(f, '/'); i > 0; i = strings.LastIndexByte(f[:i], '/') {
		if e, ok := p.excluded[f[:i]]; ok {
			return e.path, e.rule
		}
	}
	return "", ""
}

// excludedSpelling returns the excluded entry path is another spelling of (by foldName),
// if any: on a case-insensitive W, S's ".ENV" is W's secret ".env".
func (p *planner) excludedSpelling(path string) (excludedEntry, bool) {
	e, ok := p.excluded[foldPath(path)]
	return e, ok && e.path != path
}

// ancestorIn returns the nearest directory above path that is a key of m, and its value
// ("" when none).
func ancestorIn(m map[string]string, path string) (dir, val string) {
	if len(m) == 0 {
		return "", ""
	}
	for i := strings.LastIndexByte(path, '/'); i > 0; i = strings.LastIndexByte(path[:i], '/') {
		if v, ok := m[path[:i]]; ok {
			return path[:i], v
		}
	}
	return "", ""
}

func refuse(c *Change, reason string) *Change {
	c.Kind = KindRefused
	c.Reason = reason
	c.OldHash, c.NewHash, c.SameAs = nil, nil, ""
	return c
}

func nameReason(err error) string {
	switch {
	case errors.Is(err, ErrControlByte):
		return "control or formatting character in name"
	case errors.Is(err, ErrEscapesRoot), errors.Is(err, ErrEmptyPath):
		return "path escapes the root"
	case errors.Is(err, ErrNUL):
		return "NUL byte in path"
	}
	return "invalid path"
}

// sChange fills c's kind, hashes and flags from what S holds now versus the snapshot.
// It reports false when the stat changed but nothing real did (a touch, a rewrite of
// the same bytes, a symlink recreated with the same target).
func (p *planner) sChange(it item, c *Change, baseS, baseW, sNow, wNow manifest.Stat) (bool, error) {
	switch {
	case baseS.Type == manifest.TypeNone:
		return true, p.sAdded(it, c, sNow)
	case sNow.Type == manifest.TypeNone:
		p.sDeleted(it, c, baseS, baseW, wNow)
		return true, nil
	case baseS.Type != sNow.Type:
		c.Kind = KindType
		c.Reason = typeName(baseS.Type) + " became " + typeName(sNow.Type)
		if sNow.Type == manifest.TypeRegular {
			d, err := p.digestS(it.path, sNow)
			if err != nil {
				return false, err
			}
			c.NewHash, c.Binary = d.Sum, d.Binary
		}
	case sNow.Type == manifest.TypeRegular:
		return p.sRegular(it, c, baseS, baseW, sNow, wNow)
	case sNow.Type == manifest.TypeDir:
		c.Kind = KindMode // statChanged on a directory means its mode changed
	case sNow.Type == manifest.TypeSymlink:
		return p.sSymlink(it, c, baseW, wNow)
	default:
		c.Kind = KindModified
	}
	return true, nil
}

// sAdded fills c for a path S holds now and did not hold at snapshot time: an added file
// (hashed), symlink or other entry. It returns the error of reading S.
func (p *planner) sAdded(it item, c *Change, sNow manifest.Stat) error {
	switch sNow.Type {
	case manifest.TypeRegular:
		d, err := p.digestS(it.path, sNow)
		if err != nil {
			return err
		}
		c.Kind, c.NewHash, c.Binary = KindAdded, d.Sum, d.Binary
	case manifest.TypeSymlink:
		c.Kind, c.Reason = KindSymlink, "added"
	default:
		c.Kind = KindAdded
	}
	return nil
}

// sDeleted fills c for a path S no longer holds. A deleted regular file whose hash the
// manifest lacks is remembered in p.unhashed while W still matches the manifest, so
// findRenames can hash it if an added file has its size.
func (p *planner) sDeleted(it item, c *Change, baseS, baseW, wNow manifest.Stat) {
	if it.me != nil && it.me.Hash != nil && baseS.Type == manifest.TypeRegular {
		c.OldHash = it.me.Hash
	}
	c.Kind = KindDeleted
	if c.OldHash == nil && baseS.Type == manifest.TypeRegular && baseW.Type == manifest.TypeRegular && !statChanged(baseW, wNow) {
		p.unhashed[it.path] = wNow
	}
	if baseS.Type == manifest.TypeSymlink {
		c.Kind, c.Reason = KindSymlink, "removed"
	}
}

// sRegular fills c for a regular file in both the snapshot and S: modified, a mode
// change only, or no change (false) when content and mode are what they were.
func (p *planner) sRegular(it item, c *Change, baseS, baseW, sNow, wNow manifest.Stat) (bool, error) {
	d, err := p.digestS(it.path, sNow)
	if err != nil {
		return false, err
	}
	c.NewHash, c.Binary = d.Sum, d.Binary
	base, baseBinary, known, err := p.base(it, baseW, wNow)
	if err != nil {
		return false, err
	}
	c.OldHash = base
	if known && bytes.Equal(base, d.Sum) {
		if baseS.Mode == sNow.Mode {
			return false, nil
		}
		c.Kind = KindMode
		return true, nil
	}
	c.Kind = KindModified
	c.BecameBinary = d.Binary && baseBinary == 0
	return true, nil
}

// sSymlink fills c for a symlink in both the snapshot and S: retargeted, or no change
// (false) when the agent recreated it with the target it had (by the manifest's link
// hash, else by W's link while W still matches the manifest). It returns the error of
// reading a link.
func (p *planner) sSymlink(it item, c *Change, baseW, wNow manifest.Stat) (bool, error) {
	if len(it.me.LinkHash) == sha256.Size {
		ts, err := p.src.readlink(TreeS, it.path)
		if err != nil {
			return false, fmt.Errorf("classify %s: %w", Escape(it.path), err)
		}
		if sum := sha256.Sum256([]byte(ts)); bytes.Equal(sum[:], it.me.LinkHash) {
			return false, nil
		}
	} else if baseW.Type == manifest.TypeSymlink && !statChanged(baseW, wNow) {
		ts, err := p.src.readlink(TreeS, it.path)
		if err != nil {
			return false, fmt.Errorf("classify %s: %w", Escape(it.path), err)
		}
		tw, err := p.src.readlink(TreeW, it.path)
		if err != nil {
			return false, fmt.Errorf("classify %s: %w", Escape(it.path), err)
		}
		if ts == tw {
			return false, nil
		}
	}
	c.Kind, c.Reason = KindSymlink, "retargeted"
	return true, nil
}

// base returns the content hash S held at snapshot time: the manifest's hash, or W's
// current content when W's stat still matches the manifest. baseBinary is 1 (binary),
// 0 (text) or -1 (unknown). known is false when the base cannot be learned (W changed
// and no hash was recorded; the change then becomes a conflict anyway).
func (p *planner) base(it item, baseW, wNow manifest.Stat) (sum []byte, baseBinary int, known bool, err error) {
	baseBinary = -1
	wSame := baseW.Type == manifest.TypeRegular && !statChanged(baseW, wNow)
	if it.me.Hash != nil {
		sum, known = it.me.Hash, true
	}
	if wSame {
		d, ok, err := p.digestW(it.path, wNow)
		if err != nil {
			return nil, -1, false, err
		}
		if ok && (!known || bytes.Equal(d.Sum, sum)) {
			sum, known = d.Sum, true
			baseBinary = 0
			if d.Binary {
				baseBinary = 1
			}
		}
	}
	return sum, baseBinary, known, nil
}

// wChange describes how W differs from the snapshot ("" when it does not): a stat
// change whose content and mode turn out equal to the recorded hash is not a change.
func (p *planner) wChange(it item, baseW, wNow manifest.Stat) (string, error) {
	if !statChanged(baseW, wNow) {
		return "", nil
	}
	switch {
	case baseW.Type == manifest.TypeNone:
		return "created " + typeName(wNow.Type), nil
	case wNow.Type == manifest.TypeNone:
		return "deleted", nil
	case baseW.Type != wNow.Type:
		return typeName(baseW.Type) + " became " + typeName(wNow.Type), nil
	case baseW.Mode != wNow.Mode:
		return "mode", nil
	case wNow.Type == manifest.TypeSymlink && len(it.me.LinkHash) == sha256.Size:
		// Recreated with the same link text (brood undo, a tool rewriting links): no
		// change. Only the text is compared; the target is never followed.
		tw, err := p.src.readlink(TreeW, it.path)
		if err != nil {
			return "content", nil // changing under the walk: treat W as changed
		}
		if sum := sha256.Sum256([]byte(tw)); bytes.Equal(sum[:], it.me.LinkHash) {
			return "", nil
		}
		return "link target", nil
	case wNow.Type == manifest.TypeRegular && it.me.Hash != nil && !it.me.Sanitized:
		d, ok, err := p.digestW(it.path, wNow)
		if err != nil {
			return "", err
		}
		if ok && bytes.Equal(d.Sum, it.me.Hash) {
			return "", nil
		}
	}
	return "content", nil
}

// sameOnBothSides reports whether W now holds exactly what S holds at a path where both
// sides changed (then there is nothing to flush).
func (p *planner) sameOnBothSides(it item, c *Change, sNow, wNow manifest.Stat) bool {
	if sNow.Type != manifest.TypeRegular || wNow.Type != manifest.TypeRegular || sNow.Mode != wNow.Mode || sNow.Size != wNow.Size || c.NewHash == nil {
		return false
	}
	d, ok, err := p.digestW(it.path, wNow)
	return err == nil && ok && bytes.Equal(d.Sum, c.NewHash)
}

func (p *planner) digestS(path string, st manifest.Stat) (Digest, error) {
	k := memoKey{TreeS, path}
	if d, ok := p.memo[k]; ok {
		return d, nil
	}
	d, err := p.src.digest(TreeS, path, st)
	if err != nil {
		return Digest{}, fmt.Errorf("classify %s: %w", Escape(path), err)
	}
	p.memo[k] = d
	return d, nil
}

// digestW hashes W's file; ok is false when W is being changed under the walk (the file
// vanished, changed, or is no longer a regular file): the caller then treats W as changed.
func (p *planner) digestW(path string, st manifest.Stat) (d Digest, ok bool, err error) {
	k := memoKey{TreeW, path}
	if d, ok := p.memo[k]; ok {
		return d, d.Sum != nil, nil
	}
	d, err = p.src.digest(TreeW, path, st)
	if errors.Is(err, ErrChanged) || errors.Is(err, ErrNotRegular) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) {
		p.memo[k] = Digest{}
		return Digest{}, false, nil
	}
	if err != nil {
		return Digest{}, false, fmt.Errorf("classify %s: %w", Escape(path), err)
	}
	p.memo[k] = d
	return d, true, nil
}

// risk says why a change at path is high-risk ("" when it is not): its name (PathRisk),
// a git config's include of it (gitIncluded), a symlink standing for a risky directory
// (linkRisk), a new executable bit, or setuid/setgid/sticky bits (the flush drops
// setuid/setgid).
func (p *planner) risk(path string, baseS, sNow manifest.Stat) string {
	var rs []string
	if r := PathRisk(path); r != "" {
		rs = append(rs, r)
	} else if r := p.gitIncluded[foldPath(path)]; r != "" {
		rs = append(rs, r)
	} else if sNow.Type == manifest.TypeSymlink {
		if r := linkRisk(path); r != "" {
			rs = append(rs, r)
		}
	}
	if sNow.Type == manifest.TypeRegular && sNow.Mode&0o111 != 0 &&
		(baseS.Type != manifest.TypeRegular || baseS.Mode&0o111 == 0) {
		rs = append(rs, "new executable bit")
	}
	if sNow.Type != manifest.TypeNone && sNow.Mode&0o7000 != 0 && sNow.Mode&0o7000 != baseS.Mode&0o7000 {
		rs = append(rs, "setuid/setgid/sticky bit")
	}
	return strings.Join(rs, "; ")
}

// symlinkTargetProblem returns why a symlink at path with target t must not reach W
// ("" when it may): an empty or absolute target, or a relative one that climbs above the
// root when resolved lexically from the link's directory. The reason names the class of
// target only, never its bytes.
func symlinkTargetProblem(path, t string) string {
	switch {
	case t == "":
		return "empty target"
	case t[0] == '/':
		return "target is an absolute path"
	case strings.IndexByte(t, 0) >= 0:
		return "target holds a NUL byte"
	}
	depth := strings.Count(path, "/") // directories above the link, below the root
	for _, c := range strings.Split(t, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return "target is a relative path escaping the workspace"
			}
		default:
			depth++
		}
	}
	return ""
}

// maxLinkHops bounds the symlinks linkIntoGitDir follows through S (the kernel's
// MAXSYMLINKS, include/linux/namei.h).
const maxLinkHops = 40

// linkIntoGitDir reports whether the symlink at path with target t (already checked by
// symlinkTargetProblem) names a ".git" component, or resolves, lexically and through the
// symlinks S holds, to a path with one: ".git", ".git/hooks", "sub/.git/config",
// "a/../.git", "hooks-link/x" where S's hooks-link points into .git. Such a link gives a
// harmless-looking name to git's own files, a standing way around DefaultProtected for
// any tool that writes through it. A link to a directory that merely contains a .git
// (".", "..") is allowed: reaching git's files through it still spells ".git".
func (p *planner) linkIntoGitDir(path, t string) (bool, error) {
	// A ".git" component anywhere in the text counts, whatever comes around it: what
	// "a/../.git" resolves to in W depends on what W's "a" is when the link is followed.
	if slices.ContainsFunc(strings.Split(t, "/"), isDotGit) {
		return true, nil
	}
	dir := ""
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		dir = path[:i]
	}
	rest := strings.Split(t, "/")
	var cur []string
	if dir != "" {
		cur = strings.Split(dir, "/")
	}
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return false, nil // escapes W: refused elsewhere or outside brood's reach
			}
			cur = cur[:len(cur)-1]
			continue
		}
		if isDotGit(c) {
			return true, nil
		}
		cur = append(cur, c)
		q := strings.Join(cur, "/")
		if q == path || !p.sIsSymlink(q) {
			continue
		}
		if hops++; hops > maxLinkHops {
			return false, nil // a loop: nothing can be reached through it
		}
		next, err := p.src.readlink(TreeS, q)
		if err != nil {
			return false, fmt.Errorf("classify %s: %w", Escape(path), err)
		}
		if next == "" || next[0] == '/' {
			return false, nil
		}
		cur = cur[:len(cur)-1]
		rest = append(strings.Split(next, "/"), rest...)
	}
	return false, nil
}

// LinkIntoGitDir reports whether a symlink at path (relative to the root) with target t
// resolves lexically to a path with a ".git" component. Flush checks it again for every
// link it writes; the diff also follows the symlinks S holds.
func LinkIntoGitDir(path, t string) bool {
	into, _ := (&planner{}).linkIntoGitDir(path, t) // no S: readlink is never called
	return into
}

// sStat returns the stat of path in S's walk (TypeNone when absent).
func (p *planner) sStat(path string) manifest.Stat {
	i, ok := slices.BinarySearchFunc(p.sn, path, func(n node, q string) int { return strings.Compare(n.path, q) })
	if !ok {
		return manifest.Stat{}
	}
	return p.sn[i].st
}

// sHolds reports whether S holds path, or another spelling of it (by foldName).
func (p *planner) sHolds(path string) bool {
	if p.sStat(path).Type != manifest.TypeNone {
		return true
	}
	if p.sFold == nil {
		p.sFold = make(map[string]bool, len(p.sn))
		for _, n := range p.sn {
			p.sFold[foldPath(n.path)] = true
		}
	}
	return p.sFold[foldPath(path)]
}

func (p *planner) sIsSymlink(path string) bool {
	return p.sStat(path).Type == manifest.TypeSymlink
}

// bareGitDirProblem says why path must be refused as part of a git directory that is not
// named ".git" ("" when it need not be): git treats any directory holding HEAD (with
// objects/ and refs/) as a bare repository when run inside it, and then reads its config
// and hooks like .git's. In a directory of S holding HEAD, the DefaultProtected names
// directly below it are refused; and so is a HEAD added beside a config, commondir,
// hooks, remotes or branches (which would turn existing files into git's). Names only
// count directly in that directory, so an ordinary project with a file called HEAD keeps
// its src/hooks/.
func (p *planner) bareGitDirProblem(path string) string {
	dir, base := "", path
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		dir, base = path[:i], path[i+1:]
	}
	join := func(d, n string) string {
		switch {
		case d == "" && n == "":
			return "."
		case d == "":
			return n
		case n == "":
			return d
		}
		return d + "/" + n
	}
	if foldName(base) == "head" {
		for _, n := range []string{"config", "config.worktree", "commondir", "hooks", "remotes", "branches"} {
			if p.sHolds(join(dir, n)) {
				return fmt.Sprintf("makes %s a bare git repository holding %s", Escape(join(dir, "")), n)
			}
		}
		return ""
	}
	// Each ancestor d of path: is path d's hooks/..., config, ... and does d hold HEAD?
	// Names compare by foldName: on a case-insensitive W, "Hooks" and "CONFIG" are git's.
	comps := strings.Split(path, "/")
	fcomps := strings.Split(foldPath(path), "/")
	for i := len(comps) - 1; i >= 0; i-- {
		d := strings.Join(comps[:i], "/")
		rel := fcomps[i:]
		var rule string
		switch {
		case rel[0] == "hooks":
			rule = "hooks/"
		case gitDirDirs[rel[0]]:
			rule = rel[0] + "/"
		case len(rel) == 1 && gitDirFiles[rel[0]]:
			rule = rel[0]
		case slices.Contains(gitDirSuffixes, strings.Join(rel, "/")):
			rule = strings.Join(rel, "/")
		default:
			continue
		}
		if p.sHolds(join(d, "HEAD")) {
			return fmt.Sprintf("%s of a bare git repository (%s holds HEAD)", rule, Escape(join(d, "")))
		}
	}
	return ""
}

// refuseBelowRefused refuses every change below a refused path: a directory S may not
// create (evil/.git) must not appear in W as the parent of its applied children. A
// directory refused only because it is nested too deep to list is the exception: it is
// W's own directory, and the entries of it that were listed stand alone.
func (p *planner) refuseBelowRefused(changes []Change) {
	refused := make(map[string]bool)
	for _, c := range changes {
		if c.Kind == KindRefused && !p.isDeep(c.Path) {
			refused[c.Path] = true
		}
	}
	if len(refused) == 0 {
		return
	}
	for i := range changes {
		c := &changes[i]
		if c.Kind == KindRefused {
			continue
		}
		for j := strings.LastIndexByte(c.Path, '/'); j > 0; j = strings.LastIndexByte(c.Path[:j], '/') {
			if refused[c.Path[:j]] {
				refuse(c, "below "+Escape(c.Path[:j])+", which is refused")
				break
			}
		}
	}
}

// hashJob is one file digest the planner will need.
type hashJob struct {
	t  Tree
	p  string
	st manifest.Stat
}

// prefetchDigests returns a prefetch function that hashes, with workers goroutines, the
// files classify will hash: regular files whose S stat changed and that pass the
// name/size/secret checks, and for those already in the manifest, W's unchanged base.
// Failures are not recorded; classify repeats the read and reports them.
func prefetchDigests(workers int) func(p *planner, candidates []item) {
	return func(p *planner, candidates []item) {
		var jobs []hashJob
		for _, it := range candidates {
			if it.s.Type != manifest.TypeRegular || it.s.Size > p.maxSize || CheckPath(it.path) != nil && !p.allowUnsafeNames || p.tooDeep(it.path) != "" {
				continue
			}
			if it.me != nil && (it.me.Excluded != "" || it.me.Skipped != "") {
				continue
			}
			if d, _ := p.excludedAncestor(it.path); d != "" {
				continue
			}
			if d, _ := ancestorIn(p.skipped, it.path); d != "" {
				continue
			}
			jobs = append(jobs, hashJob{TreeS, it.path, it.s})
			if it.me != nil && it.me.S.Type == manifest.TypeRegular && it.me.W.Type == manifest.TypeRegular && !statChanged(it.me.W, it.w) {
				jobs = append(jobs, hashJob{TreeW, it.path, it.w})
			}
		}
		if len(jobs) < 2 || workers < 2 {
			return
		}
		results := make([]Digest, len(jobs))
		var next atomic.Int64
		var wg sync.WaitGroup
		for range min(workers, len(jobs)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					n := int(next.Add(1)) - 1
					if n >= len(jobs) {
						return
					}
					if d, err := p.src.digest(jobs[n].t, jobs[n].p, jobs[n].st); err == nil {
						results[n] = d
					}
				}
			}()
		}
		wg.Wait()
		for n, j := range jobs {
			if results[n].Sum != nil {
				p.memo[memoKey{j.t, j.p}] = results[n]
			}
		}
	}
}

// markRemovedDirsWithNewEntries turns into a conflict every removal of a directory by S
// (deleted, or replaced by another type) below which the developer created entries in W
// during the session: applying it would have to remove work S never saw.
func markRemovedDirsWithNewEntries(changes []Change, entries []manifest.Entry, wNew []string) {
	if len(wNew) == 0 {
		return
	}
	for i := range changes {
		c := &changes[i]
		if c.Kind != KindDeleted && c.Kind != KindType {
			continue
		}
		e := lookup(entries, c.Path)
		if e == nil || e.S.Type != manifest.TypeDir {
			continue
		}
		prefix := c.Path + "/"
		n, _ := slices.BinarySearch(wNew, prefix)
		if n < len(wNew) && strings.HasPrefix(wNew[n], prefix) {
			c.Kind = KindConflict
			c.Reason = "W changed since the snapshot (entries created below " + Escape(c.Path) + ", e.g. " + Escape(wNew[n]) + ")"
		}
	}
}

// lookup finds path in entries sorted by Path.
func lookup(entries []manifest.Entry, path string) *manifest.Entry {
	i, ok := slices.BinarySearchFunc(entries, path, func(e manifest.Entry, p string) int { return strings.Compare(e.Path, p) })
	if !ok {
		return nil
	}
	return &entries[i]
}

// markCaseCollisions refuses every change whose path equals another path of W or S
// when case is folded (both would be one file on a case-insensitive W). Names are
// compared by foldName (case folding and Unicode normalization, as APFS does).
func markCaseCollisions(changes []Change, wn, sn []node) {
	if len(changes) == 0 {
		return
	}
	first := make(map[string]string, len(wn)+len(sn))
	other := make(map[string]string)
	add := func(p string) {
		k := foldPath(p)
		f, ok := first[k]
		if !ok {
			first[k] = p
			return
		}
		if f != p {
			other[p] = f
			if _, ok := other[f]; !ok {
				other[f] = p
			}
		}
	}
	for _, n := range wn {
		add(n.path)
	}
	for _, n := range sn {
		add(n.path)
	}
	for i := range changes {
		c := &changes[i]
		if c.Kind == KindRefused {
			continue
		}
		if o, ok := other[c.Path]; ok {
			refuse(c, "case collision with "+Escape(o)+" on a case-insensitive workspace")
		}
	}
}

// findRenames sets SameAs on added files whose content equals a deleted file's content
// (a likely rename). Deleted files are hashed only when the manifest holds no hash and
// an added file has the same size. Nothing else is implied: the delete stays a delete.
func (p *planner) findRenames(changes []Change) error {
	bySize := make(map[int64][]int)
	for i, c := range changes {
		if c.Kind == KindAdded && c.NewHash != nil {
			bySize[c.NewSize] = append(bySize[c.NewSize], i)
		}
	}
	if len(bySize) == 0 {
		return nil
	}
	for i := range changes {
		d := &changes[i]
		if d.Kind != KindDeleted {
			continue
		}
		adds := bySize[d.OldSize]
		if len(adds) == 0 {
			continue
		}
		if d.OldHash == nil {
			st, ok := p.unhashed[d.Path]
			if !ok {
				continue // not a regular file, or W changed: no trustworthy base
			}
			dg, ok, err := p.digestW(d.Path, st)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			d.OldHash = dg.Sum
		}
		for _, a := range adds {
			if changes[a].SameAs == "" && bytes.Equal(changes[a].NewHash, d.OldHash) {
				changes[a].SameAs = d.Path
			}
		}
	}
	return nil
}
