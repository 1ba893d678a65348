package gitconfig

import (
	"strings"
)

// Removal is one thing Sanitize removed or rewrote. Key is the variable ("remote.origin.url")
// or section ("credential", "include") with any credentials inside a subsection name
// replaced; it never holds a removed value.
type Removal struct {
	Key    string `json:"key"`
	Reason string `json:"reason"`
	// Rewritten is true when the variable was kept and only the credentials in its URL
	// were removed ("https://user:token@host" became "https://host", "https://host/r?
	// private_token=x&ref=main" became "https://host/r?ref=main"). One variable can be
	// reported twice, once per Reason.
	Rewritten bool `json:"rewritten,omitempty"`
}

// Reasons reported in Removal.Reason.
const (
	ReasonURLCredentials = "credentials in URL"
	ReasonCredential     = "credential section"
	ReasonInclude        = "include of another config file"
	ReasonExtraHeader    = "extra HTTP header (may carry a token)"
	ReasonCommand        = "host command hook"
	ReasonSecretName     = "variable named like a secret"
	ReasonInsteadOf      = "url rewrite carrying credentials"
	ReasonURLQuery       = "credential query parameter in URL"
)

// coreCommands are core.* variables naming a program or directory of programs on the host
// (git-config(1)): they never make sense inside the VM and can leak host paths or run
// arbitrary programs if a host-side git reads S.
var coreCommands = map[string]bool{
	"fsmonitor":  true,
	"hookspath":  true,
	"sshcommand": true,
	"askpass":    true,
	"gitproxy":   true,
}

// Sanitize parses a git config file and returns it in canonical form (see Config.Bytes)
// with these removed or neutralised:
//
//   - user info in URLs ("https://user:token@host" → "https://host"; for non-HTTP schemes
//     such as ssh only a password is removed, "ssh://git@host" stays) in every value;
//   - every section whose subsection name carries URL credentials, and every url.<base>
//     section whose insteadOf/pushInsteadOf carries them;
//   - credential and credential.<url> sections (helpers, usernames);
//   - include and includeIf sections;
//   - http.extraHeader and http.<url>.extraHeader;
//   - core.fsmonitor, core.hooksPath, core.sshCommand, core.askPass, core.gitProxy;
//   - any variable whose name contains "token", "password", "passwd" or "secret" or ends
//     in "pass" (e.g. sendemail.smtpPass);
//   - credential query and fragment parameters (credentialParams: "?private_token=",
//     "&X-Amz-Signature=", "&sig=", ...) from URLs in every value, the URL and its other
//     parameters kept; a section whose subsection name carries one is removed;
//   - every URL-valued key (urlKeys: remote.<name>.url, url.<base>.insteadOf,
//     submodule.<name>.url, lfs.url, http.<url>, ...) holding a control character, raw
//     or percent-encoded to any depth (urlControls), and every such full URL with an
//     empty host ("https:///x", "ssh://:22/x", scp-like ":path") or a host starting
//     with '-'. The variable is removed (a url.<base>, http.<url> or lfs.<url> section
//     whose name is such a URL is removed whole); the rest of its section stays.
//
// It returns ErrSyntax (wrapped) for input git would reject. Sanitize(out) returns out
// and no removals.
func Sanitize(in []byte) ([]byte, []Removal, error) {
	cfg, err := Parse(in)
	if err != nil {
		return nil, nil, err
	}
	removed := cfg.sanitize()
	return cfg.Bytes(), removed, nil
}

func (c *Config) sanitize() []Removal {
	var removed []Removal
	kept := c.Sections[:0]
	for _, s := range c.Sections {
		sec, sub, hasSub := s.split()
		key := sec
		if hasSub {
			key += "." + StripURLCredentials(sub)
		}
		if why := sectionProblem(&s, sec, sub, hasSub); why != "" {
			removed = append(removed, Removal{Key: key, Reason: why})
			continue
		}
		vars := s.Vars[:0]
		for _, v := range s.Vars {
			vkey := key + "." + v.Name
			why, keep := varProblem(v, sec, hasSub)
			if !keep {
				removed = append(removed, Removal{Key: vkey, Reason: why})
				continue
			}
			if !v.NoValue && HasURLCredentials(v.Value) {
				if hasUserinfoCredentials(v.Value) {
					removed = append(removed, Removal{vkey, ReasonURLCredentials, true})
				}
				if hasQueryCredentials(v.Value) {
					removed = append(removed, Removal{vkey, ReasonURLQuery, true})
				}
				v.Value = StripURLCredentials(v.Value)
			}
			vars = append(vars, v)
		}
		if len(vars) == 0 && len(s.Vars) > 0 {
			continue // every variable removed: no empty "[http]" header left behind
		}
		s.Vars = vars
		kept = append(kept, s)
	}
	c.Sections = kept
	return removed
}

// sectionProblem returns why the whole section s (split into sec, sub) is removed, or "".
func sectionProblem(s *Section, sec, sub string, hasSub bool) string {
	switch {
	case sec == "credential":
		return ReasonCredential
	case sec == "include" || sec == "includeif":
		return ReasonInclude
	case hasSub && HasURLCredentials(sub):
		return ReasonURLCredentials
	case sec == "url" && s.anyValueHasCredentials():
		return ReasonInsteadOf
	}
	if form, ok := urlKeyForm(sec, hasSub, ""); ok {
		return urlProblem(sub, form)
	}
	return ""
}

// varProblem returns why variable v of section sec is removed, and keep=false, or
// keep=true when it stays (its URL credentials are stripped by the caller).
func varProblem(v Var, sec string, hasSub bool) (why string, keep bool) {
	switch {
	case sec == "core" && !hasSub && coreCommands[v.Name]:
		return ReasonCommand, false
	case sec == "http" && v.Name == "extraheader":
		return ReasonExtraHeader, false
	case secretName(v.Name):
		return ReasonSecretName, false
	}
	if form, ok := urlKeyForm(sec, hasSub, v.Name); ok && !v.NoValue {
		if why := urlProblem(v.Value, form); why != "" {
			return why, false
		}
	}
	return "", true
}

// split returns the section name and subsection as git keys see them: "[a.b]" is section
// "a", subsection "b".
func (s *Section) split() (sec, sub string, hasSub bool) {
	if s.HasSub {
		return s.Name, s.Sub, true
	}
	if i := strings.IndexByte(s.Name, '.'); i >= 0 {
		return s.Name[:i], s.Name[i+1:], true
	}
	return s.Name, "", false
}

func (s *Section) anyValueHasCredentials() bool {
	for _, v := range s.Vars {
		if HasURLCredentials(v.Value) {
			return true
		}
	}
	return false
}

func secretName(name string) bool {
	for _, w := range []string{"token", "password", "passwd", "secret"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return strings.HasSuffix(name, "pass")
}

// HasURLCredentials reports whether s contains a URL ("scheme://...") that carries
// credentials: any user info for HTTP(S)/FTP(S) (a lone user name is often a token
// there), a password for other schemes, or a credentialParams parameter in its query or
// fragment ("?private_token=...", "&X-Amz-Signature=...").
func HasURLCredentials(s string) bool {
	return hasUserinfoCredentials(s) || hasQueryCredentials(s)
}

// StripURLCredentials returns s with the credentials HasURLCredentials finds removed:
// the whole user info for HTTP(S)/FTP(S), the ":password" part otherwise, and every
// credential parameter (the URL's other parameters stay, in order).
func StripURLCredentials(s string) string {
	for {
		t := stripQueryCredentials(stripUserinfo(s))
		if t == s {
			return s
		}
		s = t
	}
}

func hasUserinfoCredentials(s string) bool {
	found := false
	eachURLUserinfo(s, func(scheme, userinfo string, _, _ int) {
		if credentialUserinfo(scheme, userinfo) {
			found = true
		}
	})
	return found
}

func stripUserinfo(s string) string {
	var b strings.Builder
	last := 0
	eachURLUserinfo(s, func(scheme, userinfo string, start, end int) {
		if !credentialUserinfo(scheme, userinfo) {
			return
		}
		b.WriteString(s[last:start])
		if !userOnlyScheme(scheme) {
			user, _, _ := strings.Cut(userinfo, ":")
			b.WriteString(user)
			b.WriteByte('@')
		}
		last = end
	})
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func userOnlyScheme(scheme string) bool {
	switch strings.ToLower(scheme) {
	case "http", "https", "ftp", "ftps":
		return true
	}
	return false
}

func credentialUserinfo(scheme, userinfo string) bool {
	if userOnlyScheme(scheme) {
		return true
	}
	return strings.Contains(userinfo, ":")
}

// eachURLUserinfo calls fn for every "scheme://userinfo@" in s, with s[start:end] being
// "userinfo@" (user info ends at the last '@' of the authority, as curl reads it).
func eachURLUserinfo(s string, fn func(scheme, userinfo string, start, end int)) {
	off := 0
	for {
		i := strings.Index(s[off:], "://")
		if i < 0 {
			return
		}
		i += off
		j := i
		for j > 0 && isSchemeChar(s[j-1]) {
			j--
		}
		scheme := s[j:i]
		start := i + 3
		end := start
		at := -1
		for end < len(s) && !strings.ContainsRune("/?#", rune(s[end])) && !isSpace(s[end]) {
			if s[end] == '@' {
				at = end
			}
			end++
		}
		if at >= 0 {
			fn(scheme, s[start:at], start, at+1)
		}
		// Without an '@' up to end, no later "://" before end has user info either:
		// resuming at end keeps the scan linear ("a://a://a://...").
		off = end
		if at >= 0 {
			off = at + 1
		}
	}
}

func isSchemeChar(c byte) bool {
	return isAlpha(c) || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'
}
