package gitconfig

import (
	"bytes"
	"fmt"
	"strings"
)

// LineKind says how a git-directory file that is not in config syntax holds URLs, and so
// what SanitizeLines does with it.
type LineKind int

const (
	// Remotes is a legacy remote file, .git/remotes/<name> (gitrepository-layout(5)):
	// "URL: <url>", "Push: <refspec>" and "Pull: <refspec>" lines. git fetches from and
	// pushes to every URL line (remote.c read_remotes_file: each line right-trimmed,
	// the prefixes matched case-sensitively, blanks after the colon skipped).
	Remotes LineKind = iota
	// Branches is a legacy one-URL remote file, .git/branches/<name>
	// (gitrepository-layout(5)): "<url>[#<branch>]" on the first line, which git trims
	// (remote.c read_branches_file); later lines are never read.
	Branches
	// Record is a file in which git records URLs it used, never connecting to them
	// again: FETCH_HEAD ("<sha>\t[not-for-merge]\t<what> of <url>"), reflogs ("clone:
	// from <url>", "pull <url>", "fetch <url>"), objects/info/http-alternates.
	Record
)

// SanitizeLines returns in, a file of kind, with the credentials StripURLCredentials
// finds removed from every line (every line, not only those git reads: S must not hold
// the secret at all), and the removals, one per reason with the line numbers (1-based)
// in Key. A URL git connects to (a Remotes "URL:" line, a Branches first line) that
// urlProblem refuses (control character, no host, host starting with '-') is removed:
// the line of a Remotes file, the whole content of a Branches file (its later lines
// would otherwise become the URL). Lines end at '\n'; in is returned unchanged, with no
// removals, when nothing needs removing. SanitizeLines(out) returns out.
func SanitizeLines(kind LineKind, in []byte) ([]byte, []Removal) {
	lines := bytes.SplitAfter(in, []byte("\n"))
	var out bytes.Buffer
	byReason := map[string][]int{}
	var order []string
	note := func(why string, n int) {
		if byReason[why] == nil {
			order = append(order, why)
		}
		byReason[why] = append(byReason[why], n)
	}
	for i, l := range lines {
		n := i + 1
		if u, ok := connectURL(kind, string(l), n); ok {
			if why := urlProblem(u, fullURL); why != "" {
				note(why, n)
				if kind == Branches {
					out.Reset()
					break
				}
				continue
			}
		}
		if !bytes.Contains(l, []byte("://")) { // credentials need a "scheme://" URL
			out.Write(l)
			continue
		}
		s := string(l)
		clean := StripURLCredentials(s)
		if clean != s && hasUserinfoCredentials(s) {
			note(ReasonURLCredentials, n)
		}
		if clean != s && hasQueryCredentials(s) {
			note(ReasonURLQuery, n)
		}
		out.WriteString(clean)
	}
	if len(order) == 0 {
		return in, nil
	}
	removed := make([]Removal, 0, len(order))
	for _, why := range order {
		rewritten := why == ReasonURLCredentials || why == ReasonURLQuery
		removed = append(removed, Removal{Key: lineList(byReason[why]), Reason: why, Rewritten: rewritten})
	}
	return out.Bytes(), removed
}

// connectURL returns the URL git connects to that line n (with its '\n') of a kind file
// holds, as git reads it, and false when git reads none there.
func connectURL(kind LineKind, line string, n int) (string, bool) {
	line = strings.TrimRight(line, " \t\n\v\f\r") // strbuf_rtrim: isspace
	switch {
	case kind == Remotes:
		v, ok := strings.CutPrefix(line, "URL:")
		return strings.TrimLeft(v, " \t\n\v\f\r"), ok // skip_spaces
	case kind == Branches && n == 1:
		v := strings.TrimLeft(line, " \t\n\v\f\r") // strbuf_trim
		v, _, _ = strings.Cut(v, "#")              // "#<branch>" follows the URL
		return v, v != ""
	}
	return "", false
}

// lineList names lines ns in a Removal key: "line 3", "lines 1, 4, 9", "lines 1, 4, 9
// and 12 more".
func lineList(ns []int) string {
	if len(ns) == 1 {
		return fmt.Sprintf("line %d", ns[0])
	}
	const shown = 3
	var parts []string
	for _, n := range ns[:min(len(ns), shown)] {
		parts = append(parts, fmt.Sprint(n))
	}
	s := "lines " + strings.Join(parts, ", ")
	if len(ns) > shown {
		s += fmt.Sprintf(" and %d more", len(ns)-shown)
	}
	return s
}
