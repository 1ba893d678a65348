package diff

import (
	"fmt"
	"strings"
)

// AppliedMode is the permission bits the flush gives the entry of c: NewMode masked with
// 0777 (setuid, setgid and sticky bits are never written to W, as a copy by another user
// would not keep them either).
func AppliedMode(c Change) uint32 { return c.NewMode & 0o777 }

// specialBits names the mode bits above 0777 (inode(7)); the flush writes none of them.
var specialBits = []struct {
	bit  uint32
	name string
}{
	{0o4000, "setuid"}, // S_ISUID
	{0o2000, "setgid"}, // S_ISGID
	{0o1000, "sticky"}, // S_ISVTX
}

// accessBits names the permission bits of group and others (inode(7), S_IRGRP..S_IXOTH)
// whose addition widens who may use an entry.
var accessBits = []struct {
	bit  uint32
	verb string
	who  string
}{
	{0o040, "readable", "group"},    // S_IRGRP
	{0o004, "readable", "others"},   // S_IROTH
	{0o020, "writable", "group"},    // S_IWGRP
	{0o002, "writable", "others"},   // S_IWOTH
	{0o010, "executable", "group"},  // S_IXGRP
	{0o001, "executable", "others"}, // S_IXOTH
}

// modeApplies reports whether the flush writes c's permission bits onto an entry that
// W held at the snapshot: a content or mode change of a file or directory, or a conflict
// the review resolves by taking S's file or merging into it (the flush then writes S's
// mode too). Symlink and type changes, additions, deletions and refusals carry no mode
// change of W's entry.
func modeApplies(c Change) bool {
	return (c.Kind == KindModified || c.Kind == KindMode || c.Kind == KindConflict) && c.OldMode != 0 && c.NewMode != 0
}

// Widened describes the group and others permission bits c gives W's entry that it did
// not have (for example "readable by others"; "" when none): for a content or mode change
// compared with W's mode at the snapshot, for an added entry only a write bit for others.
func Widened(c Change) string {
	var added uint32
	switch {
	case modeApplies(c):
		added = AppliedMode(c) &^ c.OldMode & 0o077
	case c.Kind == KindAdded:
		added = AppliedMode(c) & 0o002
	}
	if added == 0 {
		return ""
	}
	var parts []string
	for i := 0; i < len(accessBits); i += 2 {
		var who []string
		for _, b := range accessBits[i : i+2] {
			if added&b.bit != 0 {
				who = append(who, b.who)
			}
		}
		if len(who) > 0 {
			parts = append(parts, accessBits[i].verb+" by "+strings.Join(who, " and "))
		}
	}
	return strings.Join(parts, ", ")
}

// ModeNote says what the flush does to the mode of c's entry ("" when nothing shows):
// "mode 0640 -> 0644: readable by others" for a change of W's bits, and the setuid,
// setgid or sticky bits W's entry loses ("setuid dropped") or S's entry has that are not
// written ("setuid in the snapshot not applied").
func ModeNote(c Change) string {
	var parts []string
	applied := AppliedMode(c)
	if modeApplies(c) && c.OldMode != applied {
		s := fmt.Sprintf("mode %04o -> %04o", c.OldMode, applied)
		if w := Widened(c); w != "" {
			s += ": " + w
		}
		parts = append(parts, s)
	} else if w := Widened(c); w != "" {
		parts = append(parts, fmt.Sprintf("mode %04o: %s", applied, w))
	}
	for _, b := range specialBits {
		switch {
		case modeApplies(c) && c.OldMode&b.bit != 0:
			parts = append(parts, b.name+" dropped")
		case c.Kind != KindDeleted && c.Kind != KindRefused && c.NewMode&b.bit != 0:
			parts = append(parts, b.name+" in the snapshot not applied")
		}
	}
	return strings.Join(parts, "; ")
}

// addModeRisk makes a change that widens access to W's entry (Widened) high-risk
// ("widens access: readable by others"; ModeNote shows the modes): --all never applies
// it, as it never applies a new executable bit. A content change whose new file a
// umask-default recreate made readable by others is held too: from the host, an explicit
// chmod and a recreate look the same.
func addModeRisk(c *Change) {
	w := Widened(*c)
	if w == "" {
		return
	}
	r := "widens access: " + w
	if c.Risk != "" {
		r = c.Risk + "; " + r
	}
	c.Risk = r
}
