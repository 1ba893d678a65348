package review

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/digest"
)

// DefaultMaxLines is how many diff lines a change shows before "v" (view all).
const DefaultMaxLines = 200

// Interactive is one interactive review over a terminal. In delivers key presses one byte at a
// time (a terminal in raw mode, see Terminal); Out receives the screen.
type Interactive struct {
	Changes   []diff.Change
	Trees     Trees
	In        io.Reader
	Out       io.Writer
	Color     bool
	Workspace string // shown in the final confirmation
	MaxLines  int    // diff lines per change before "v"; 0 means DefaultMaxLines
	// Notes are shown with the change of their path in its view and in the summary: what
	// the apply does to that file besides its content and mode (its extended attributes).
	// Escaped by the caller.
	Notes map[string]string
}

// entry is a change with the contents the review loaded for it.
type entry struct {
	c                diff.Change
	old, new         string // W now, S; "" when absent or not loaded
	haveOld, haveNew bool   // regular file read on that side
	oldErr, newErr   error  // why a side was not read (nil: absent by kind, or read)
	binary           bool   // either side binary (or too large): sizes and hashes only
	becameBinary     bool   // base text, new content binary: diff of printable text + flag
	hunks            []Hunk // W -> S (text only)
}

// errQuit is returned by decide when the developer pressed q.
var errQuit = errors.New("quit")

// Run shows every change, asks for a decision on each, then prints a summary and asks for
// confirmation. It returns one decision per change (in order; changes left when the
// developer quit are Skip) and whether the developer confirmed applying the accepted ones.
// It returns ErrAborted on Ctrl-C, Ctrl-D or end of input: nothing is to be applied then.
func (s *Interactive) Run() ([]Decision, bool, error) {
	p := &printer{w: s.Out, color: s.Color}
	k := &keys{r: s.In, p: p}
	ds := make([]Decision, len(s.Changes))
	for i := range ds {
		ds[i] = Decision{Change: s.Changes[i], Verdict: Skip, Note: "not reviewed"}
	}
	p.printf("Reviewing %d change(s). Press ? for help.\n", len(s.Changes))
	for i := range s.Changes {
		e := s.load(s.Changes[i])
		d, err := s.decide(p, k, e, i)
		if errors.Is(err, errQuit) {
			break
		}
		if err != nil {
			return nil, false, err
		}
		ds[i] = d
		if p.err != nil {
			return nil, false, fmt.Errorf("write review: %w", p.err)
		}
	}
	ok, err := s.confirm(p, k, ds)
	if err != nil {
		return nil, false, err
	}
	if p.err != nil {
		return nil, false, fmt.Errorf("write review: %w", p.err)
	}
	return ds, ok, nil
}

// load reads the sides of c the review shows.
func (s *Interactive) load(c diff.Change) *entry {
	e := &entry{c: c}
	readOld := c.Kind == diff.KindModified || c.Kind == diff.KindDeleted || c.Kind == diff.KindConflict
	readNew := c.Kind == diff.KindModified || c.Kind == diff.KindAdded || c.Kind == diff.KindConflict
	// W's side must still be the base the diff compared against (except for a conflict,
	// where W's current content is what is shown and resolved); S's side must be what the
	// diff hashed.
	var wantOld []byte
	if c.Kind != diff.KindConflict {
		wantOld = c.OldHash
	}
	if readOld {
		b, err := s.Trees.Workspace(c.Path, wantOld)
		e.old, e.haveOld, e.oldErr = string(b), err == nil, err
	}
	if readNew {
		b, err := s.Trees.Snapshot(c.Path, c.NewHash)
		e.new, e.haveNew, e.newErr = string(b), err == nil, err
	}
	// A side that does not exist (deleted in S, or by the developer in W) is empty text;
	// a side that exists but could not be read (too large, not regular) makes the change
	// binary-like: only sizes and hashes are shown and hunk selection is off.
	for _, err := range []error{e.oldErr, e.newErr} {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			e.binary = true
		}
	}
	oldBin, newBin := isBinary([]byte(e.old)), isBinary([]byte(e.new))
	if c.BecameBinary || (!oldBin && newBin && e.haveOld && e.old != "") {
		e.becameBinary = true
	} else if c.Binary || oldBin || newBin {
		e.binary = true
	}
	if (readOld || readNew) && !e.binary {
		hs, err := Hunks(e.old, e.new)
		if err != nil {
			e.binary, e.oldErr = true, err
		}
		e.hunks = hs
	}
	return e
}

// show prints a change: header, then its diff (limited to maxLines lines; 0 = all).
func (s *Interactive) show(p *printer, e *entry, i int, maxLines int) {
	c := e.c
	stat := ""
	if e.hunks != nil {
		stat = diffStat(e.hunks)
	}
	p.header(i, len(s.Changes), c, stat)
	if n := s.Notes[c.Path]; n != "" {
		p.printf("  %s\n", p.paint(sgrBold, n))
	}
	for _, err := range []error{e.oldErr, e.newErr} {
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrNotRegular) {
			p.printf("  note: %s\n", EscapeLine(err.Error()))
		}
	}
	switch c.Kind {
	case diff.KindRefused:
		p.printf("  %s\n", p.paint(sgrBoldRed, "This change is refused and cannot be accepted."))
		return
	case diff.KindSymlink, diff.KindType:
		p.printf("  W: %s\n  S: %s\n", s.describe(s.Trees.W, c.Path), s.describe(s.Trees.S, c.Path))
		return
	}
	if c.Kind == diff.KindConflict {
		p.printf("  %s\n", p.paint(sgrYellow, "You changed this path in W after the snapshot, and the agent changed it in S."))
		if _, err := s.Trees.BaseCopy(c.Path, c.OldHash); err == nil {
			p.printf("  A three-way merge is available (m).\n")
		} else {
			p.printf("  No three-way merge: %s. Pick w (keep yours) or t (take the agent's).\n%s", EscapeLine(err.Error()), baseHint(err))
		}
	}
	if errors.Is(e.oldErr, ErrNotRegular) || errors.Is(e.newErr, ErrNotRegular) {
		// A directory (or other non-file) on one side: say what each side holds.
		p.printf("  W: %s\n  S: %s\n", s.describe(s.Trees.W, c.Path), s.describe(s.Trees.S, c.Path))
		return
	}
	if c.Kind == diff.KindMode {
		return
	}
	switch {
	case e.binary:
		p.binary(c, []byte(e.old), []byte(e.new), e.haveOld, e.haveNew)
	case e.becameBinary:
		p.printf("  %s\n", p.paint(sgrBoldRed, "TEXT -> BINARY: the new content has NUL bytes; printable changes below (non-printable bytes escaped)"))
		p.binary(c, []byte(e.old), []byte(e.new), e.haveOld, e.haveNew)
		p.hunks(s.oldLabel(c), s.newLabel(c), e.hunks, maxLines)
	default:
		p.hunks(s.oldLabel(c), s.newLabel(c), e.hunks, maxLines)
	}
}

func (s *Interactive) oldLabel(c diff.Change) string {
	if c.Kind == diff.KindConflict {
		return "W (yours, now) " + EscapeName(c.Path)
	}
	return "W " + EscapeName(c.Path)
}

func (s *Interactive) newLabel(c diff.Change) string { return "S (agent) " + EscapeName(c.Path) }

// describe says what path is in the tree dir, for symlink and type changes: the kind of
// entry and, for a symlink, its escaped target (read with readlink, never followed).
func (s *Interactive) describe(dir, path string) string {
	fi, err := s.Trees.Lstat(dir, path)
	if errors.Is(err, fs.ErrNotExist) {
		return "(absent)"
	}
	if err != nil {
		return "(" + EscapeLine(err.Error()) + ")"
	}
	switch m := fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		t, err := s.Trees.Readlink(dir, path)
		if err != nil {
			return "symlink (" + EscapeLine(err.Error()) + ")"
		}
		return "symlink -> " + EscapeName(t)
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return fmt.Sprintf("regular file, %d bytes, mode %04o", fi.Size(), m.Perm())
	default:
		return "special file (" + m.Type().String() + ")"
	}
}

func (s *Interactive) maxLines() int {
	if s.MaxLines > 0 {
		return s.MaxLines
	}
	return DefaultMaxLines
}

// decide runs the prompt loop for one change: it shows e (the i-th change), then reads
// keys until one decides. q returns errQuit, ? prints the help for the change's kind, v
// shows the change again in full, s skips it; the other keys depend on the kind (see
// refusedKey, conflictKey and changeKey). It returns the error of reading a key, of a
// confirmation prompt, or of the merge or hunk selection.
func (s *Interactive) decide(p *printer, k *keys, e *entry, i int) (Decision, error) {
	c := e.c
	s.show(p, e, i, s.maxLines())
	canHunks := c.Kind == diff.KindModified && !e.binary && !e.becameBinary && len(e.hunks) > 0
	choices, helpText := keysFor(c.Kind, canHunks)
	prompt := fmt.Sprintf("%s [%s]? ", promptFor(c.Kind), choices)
	for {
		key, err := k.read(p.paint(sgrBold, prompt))
		if err != nil {
			return Decision{}, err
		}
		var d Decision
		done := false
		switch {
		case key == 'q':
			return Decision{}, errQuit
		case key == '?':
			p.printf("%s", helpText)
		case key == 'v':
			s.view(p, e, i)
		case key == 's':
			return Decision{Change: c, Verdict: Skip, Note: "skipped"}, nil
		case c.Kind == diff.KindRefused:
			d, done = refusedKey(p, c, key)
		case c.Kind == diff.KindConflict:
			d, done, err = s.conflictKey(p, k, e, key)
		default:
			d, done, err = s.changeKey(p, k, e, key, canHunks)
		}
		if done || err != nil {
			return d, err
		}
	}
}

// keysFor returns the keys decide offers for a change of kind k (as the prompt lists
// them) and the help text ? prints; h (select hunks) only when canHunks.
func keysFor(k diff.Kind, canHunks bool) (choices, helpText string) {
	switch k {
	case diff.KindRefused:
		return "r,s,v,q,?", helpRefused
	case diff.KindConflict:
		return "w,t,m,s,v,q,?", helpConflict
	}
	if canHunks {
		return "a,r,s,h,v,q,?", helpChange + helpHunks
	}
	return "a,r,s,v,q,?", helpChange
}

// refusedKey handles key for a change the diff refused: r records the rejection (done);
// a explains that it cannot be accepted, any other key is unknown, and the prompt repeats.
func refusedKey(p *printer, c diff.Change, key byte) (d Decision, done bool) {
	switch key {
	case 'r':
		return Decision{Change: c, Verdict: Reject, Note: "refused: " + c.Reason}, true
	case 'a':
		p.printf("  refused (%s): this change cannot be accepted.\n", EscapeLine(c.Reason))
	default:
		p.printf("  unknown key; ? for help\n")
	}
	return Decision{}, false
}

// conflictKey handles key for a conflict: w (or r) keeps W's version; t takes the agent's
// after the risk confirmation (with W's content digest, and S's content when it was
// read), unless takeable says it cannot be taken; m runs the three-way merge. done is
// true once a decision is made; a declined confirmation or an abandoned merge, a, and
// unknown keys repeat the prompt. err is the confirmation's or the merge's error.
func (s *Interactive) conflictKey(p *printer, k *keys, e *entry, key byte) (d Decision, done bool, err error) {
	c := e.c
	switch key {
	case 'w', 'r':
		return Decision{Change: c, Verdict: Reject, Note: "conflict: kept yours (W)"}, true, nil
	case 't':
		if why := takeable(e); why != "" {
			p.printf("  cannot take the agent's version: %s. Pick w (keep yours).\n", why)
			return Decision{}, false, nil
		}
		ok, err := s.confirmRisk(p, k, c)
		if err != nil {
			return Decision{}, true, err
		}
		if ok {
			d := Decision{Change: c, Verdict: Accept, Note: "conflict: took the agent's (S)", WHash: sha(e.old)}
			if e.haveNew {
				d.Content = []byte(e.new)
			}
			return d, true, nil
		}
	case 'm':
		d, ok, err := s.merge(p, k, e)
		if err != nil || ok {
			return d, true, err
		}
	case 'a':
		p.printf("  conflict: choose w (keep yours), t (take the agent's) or m (three-way merge).\n")
	default:
		p.printf("  unknown key; ? for help\n")
	}
	return Decision{}, false, nil
}

// changeKey handles key for any other change: a accepts after the risk confirmation, r
// rejects, h (when canHunks) selects hunks. done is true once a decision is made; a
// declined confirmation, an abandoned hunk selection and unknown keys repeat the prompt.
// err is the confirmation's or the hunk selection's error.
func (s *Interactive) changeKey(p *printer, k *keys, e *entry, key byte, canHunks bool) (d Decision, done bool, err error) {
	c := e.c
	switch {
	case key == 'a':
		ok, err := s.confirmRisk(p, k, c)
		if err != nil {
			return Decision{}, true, err
		}
		if ok {
			return Decision{Change: c, Verdict: Accept, Note: "accepted"}, true, nil
		}
	case key == 'r':
		return Decision{Change: c, Verdict: Reject, Note: "rejected"}, true, nil
	case key == 'h' && canHunks:
		d, ok, err := s.selectHunks(p, k, e)
		if err != nil || ok {
			return d, true, err
		}
	default:
		p.printf("  unknown key; ? for help\n")
	}
	return Decision{}, false, nil
}

func promptFor(k diff.Kind) string {
	switch k {
	case diff.KindRefused:
		return "Refused change"
	case diff.KindConflict:
		return "Resolve conflict"
	}
	return "Apply this change to W"
}

// view prints the change again without the line limit; for a conflict with a base copy it
// also prints each side's own changes since the snapshot.
func (s *Interactive) view(p *printer, e *entry, i int) {
	s.show(p, e, i, 0)
	if e.c.Kind != diff.KindConflict || e.binary || e.becameBinary {
		return
	}
	base, err := s.Trees.BaseCopy(e.c.Path, e.c.OldHash)
	if err != nil || isBinary(base) {
		// No base to compare against: show both sides in full.
		p.printf("%s\n", p.paint(sgrBold, "W (yours, now) "+EscapeName(e.c.Path)+":"))
		p.text(e.old, 0)
		p.printf("%s\n", p.paint(sgrBold, "S (agent) "+EscapeName(e.c.Path)+":"))
		p.text(e.new, 0)
		return
	}
	for _, side := range []struct{ label, text string }{{"W (yours, now)", e.old}, {"S (agent)", e.new}} {
		hs, err := Hunks(string(base), side.text)
		if err != nil {
			continue
		}
		p.printf("%s\n", p.paint(sgrBold, "Changes in "+side.label+" since the snapshot:"))
		p.hunks("base "+EscapeName(e.c.Path), side.label+" "+EscapeName(e.c.Path), hs, 0)
	}
}

// confirmRisk asks a second, explicit confirmation for a high-risk change; it returns true
// at once for others.
func (s *Interactive) confirmRisk(p *printer, k *keys, c diff.Change) (bool, error) {
	if c.Risk == "" {
		return true, nil
	}
	key, err := k.read(p.paint(sgrBoldRed, "HIGH RISK ("+EscapeLine(c.Risk)+"): really accept? [y/N] "))
	if err != nil {
		return false, err
	}
	if key == 'y' || key == 'Y' {
		return true, nil
	}
	p.printf("  not accepted.\n")
	return false, nil
}

// selectHunks asks y/n for each hunk and returns an Accept with exactly W plus the chosen
// hunks, a Reject when none was chosen, or ok=false when a high-risk selection was not
// confirmed.
func (s *Interactive) selectHunks(p *printer, k *keys, e *entry) (Decision, bool, error) {
	chosen := make([]bool, len(e.hunks))
	var picked []string
	for j := range e.hunks {
		p.printf("%s\n", p.paint(sgrBold, fmt.Sprintf("hunk %d/%d of %s", j+1, len(e.hunks), EscapeName(e.c.Path))))
		p.hunk(&e.hunks[j])
		for {
			key, err := k.read(p.paint(sgrBold, "Apply this hunk [y,n,?]? "))
			if err != nil {
				return Decision{}, false, err
			}
			if key == 'y' || key == 'n' {
				chosen[j] = key == 'y'
				break
			}
			p.printf("%s", helpHunk)
		}
		if chosen[j] {
			picked = append(picked, "#"+strconv.Itoa(j+1)+" "+e.hunks[j].Header())
		}
	}
	// Name each hunk taken by number and header: "1 of 2 hunks taken: #2 @@ -5,3 +5,4 @@".
	note := fmt.Sprintf("%d of %d hunks taken: %s", len(picked), len(e.hunks), strings.Join(picked, ", "))
	switch len(picked) {
	case 0:
		return Decision{Change: e.c, Verdict: Reject, Note: "no hunk selected"}, true, nil
	case len(e.hunks):
		note = fmt.Sprintf("all %d hunks", len(e.hunks))
	}
	out, err := Select(e.old, e.hunks, chosen)
	if err != nil {
		return Decision{}, false, fmt.Errorf("select hunks of %s: %w", EscapeName(e.c.Path), err)
	}
	ok, err := s.confirmRisk(p, k, e.c)
	if err != nil || !ok {
		return Decision{}, false, err
	}
	d := Decision{Change: e.c, Verdict: Accept, Note: note}
	if len(picked) < len(e.hunks) {
		d.Content = []byte(out)
	}
	p.printf("  selected %s.\n", note)
	return d, true, nil
}

// baseHint tells how to get a base copy when err is ErrNoBase ("" otherwise): base copies
// are only kept by `brood session new --keep-base`, and only for files the snapshot could
// reflink (FICLONE: btrfs, xfs; not ext4).
func baseHint(err error) string {
	if !errors.Is(err, ErrNoBase) {
		return ""
	}
	return "  (Base copies are kept only by `brood session new --keep-base` on a filesystem that can\n" +
		"  reflink, such as btrfs or xfs with reflink=1; ext4 and tmpfs cannot.)\n"
}

// merge runs the three-way merge of a conflict. A clean result can be accepted after it
// was shown; a conflicted one is shown with markers and never accepted.
func (s *Interactive) merge(p *printer, k *keys, e *entry) (Decision, bool, error) {
	base, err := s.Trees.BaseCopy(e.c.Path, e.c.OldHash)
	if err != nil {
		p.printf("  three-way merge unavailable: %s\n%s  Pick w (keep yours) or t (take the agent's); v shows both sides.\n", EscapeLine(err.Error()), baseHint(err))
		return Decision{}, false, nil
	}
	if e.binary || e.becameBinary || isBinary(base) || !e.haveOld || !e.haveNew {
		p.printf("  three-way merge unavailable: both sides must be text files. Pick w or t.\n")
		return Decision{}, false, nil
	}
	merged, n := Merge3(string(base), e.old, e.new)
	if n > 0 {
		p.printf("%s\n", p.paint(sgrBoldRed, fmt.Sprintf("three-way merge: %d conflicting region(s); result with markers:", n)))
		p.text(merged, 0)
		p.printf("  A conflicted merge is never taken by itself. Pick w (keep yours) or t (take the\n" +
			"  agent's), or write this result with its markers into W and resolve it by hand.\n")
		return s.takeMerge(p, k, e, "Write the result WITH CONFLICT MARKERS into W? [y/N] ", merged,
			fmt.Sprintf("three-way merge with %d conflict(s): markers written", n))
	}
	hs, err := Hunks(e.old, merged)
	if err != nil {
		return Decision{}, false, fmt.Errorf("diff merge of %s: %w", EscapeName(e.c.Path), err)
	}
	p.printf("%s\n", p.paint(sgrGreen, "three-way merge is clean; it changes your current file as follows:"))
	p.hunks("W (yours, now) "+EscapeName(e.c.Path), "merged "+EscapeName(e.c.Path), hs, 0)
	return s.takeMerge(p, k, e, "Accept the merged result [y/N]? ", merged, "three-way merge")
}

// takeMerge asks prompt and, on y and the high-risk confirmation, accepts the merged
// content for e's change with note (the WHash is W's content the merge was made from);
// any other answer takes nothing ("merge not taken").
func (s *Interactive) takeMerge(p *printer, k *keys, e *entry, prompt, merged, note string) (Decision, bool, error) {
	key, err := k.read(p.paint(sgrBold, prompt))
	if err != nil {
		return Decision{}, false, err
	}
	if key != 'y' && key != 'Y' {
		p.printf("  merge not taken.\n")
		return Decision{}, false, nil
	}
	ok, err := s.confirmRisk(p, k, e.c)
	if err != nil || !ok {
		return Decision{}, false, err
	}
	return Decision{Change: e.c, Verdict: Accept, Content: []byte(merged), Note: note, WHash: sha(e.old)}, true, nil
}

// takeable says why S's side of a conflict cannot be taken ("" when it can): the flush
// replaces only a regular file W still holds, with a regular file (or a deletion) from S,
// both read in full here so the developer saw exactly what is written.
func takeable(e *entry) string {
	switch {
	case !e.haveOld:
		return "W holds no regular file here now"
	case e.newErr != nil && !errors.Is(e.newErr, fs.ErrNotExist):
		return EscapeLine(e.newErr.Error())
	}
	return ""
}

// sha is the content digest of s (package digest), the value Change hashes hold.
func sha(s string) []byte {
	return digest.Bytes([]byte(s))
}

// confirm prints the summary and asks whether to apply the accepted changes.
func (s *Interactive) confirm(p *printer, k *keys, ds []Decision) (bool, error) {
	na, nr, ns := Count(ds, Accept), Count(ds, Reject), Count(ds, Skip)
	p.printf("\n%s %d to apply, %d rejected, %d skipped\n", p.paint(sgrBold, "Summary:"), na, nr, ns)
	for _, d := range ds {
		v := string(d.Verdict)
		switch d.Verdict {
		case Accept:
			v = p.paint(sgrGreen, fmt.Sprintf("%-6s", v))
		case Reject:
			v = p.paint(sgrRed, fmt.Sprintf("%-6s", v))
		default:
			v = fmt.Sprintf("%-6s", v)
		}
		risk := ""
		if d.Change.Risk != "" {
			risk = " " + p.paint(sgrBoldRed, "[HIGH RISK]")
		}
		if n := diff.ModeNote(d.Change); n != "" {
			risk += " [" + n + "]"
		}
		if n := s.Notes[d.Change.Path]; n != "" {
			risk += " [" + n + "]"
		}
		p.printf("  %s %-9s %s%s  (%s)\n", v, d.Change.Kind, EscapeName(d.Change.Path), risk, EscapeLine(d.Note))
	}
	if na == 0 {
		p.printf("Nothing to apply; W is unchanged.\n")
		return false, nil
	}
	where := "W"
	if s.Workspace != "" {
		where = EscapeName(s.Workspace)
	}
	key, err := k.read(p.paint(sgrBold, fmt.Sprintf("Apply %d change(s) to %s? [y/N] ", na, where)))
	if err != nil {
		return false, err
	}
	if key != 'y' && key != 'Y' {
		p.printf("Nothing applied; W is unchanged.\n")
		return false, nil
	}
	return true, nil
}

const (
	helpChange = `  a  accept: apply the agent's version of this file to W
  r  reject: keep W's version (recorded)
  s  skip: decide later (nothing is applied, nothing recorded)
  v  view the whole diff
  q  quit: stop reviewing; the remaining changes are skipped
  ?  this help
  Ctrl-C aborts the review without applying anything.
`
	helpHunks = `  h  hunk-select: answer y/n for each hunk; W gets exactly the chosen hunks
`
	helpHunk = `  y  apply this hunk   n  leave this part of W as it is
`
	helpRefused = `  This change was refused by the diff (see the reason) and cannot be accepted.
  r  reject (recorded)   s  skip   v  view   q  quit   ?  help
`
	helpConflict = `  W changed since the snapshot and S changed too: nothing is resolved for you.
  w  keep yours (W unchanged; r does the same)
  t  take the agent's version (S) over yours
  m  three-way merge against the snapshot-time base: a clean merge can be accepted; a
     conflicted one is shown with markers and is only written if you ask for it
  s  skip   v  view both sides   q  quit   ?  help
`
)
