package gitconfig

import "strings"

// paramRule is one row of credentialParams. A query or fragment parameter name is
// compared after normalising it (see normParam): percent-decoded until stable, lower
// case, without '-', '_', '.', ' ' and '+'.
type paramRule struct {
	name     string // normalised form
	contains bool   // also match any name that contains name
}

// credentialParams are the query (and fragment) parameter names that carry a secret in
// URLs found in git configs, token URLs pasted from forges and presigned object-store
// URLs. A matching parameter is removed from the URL; the rest of the URL is kept.
var credentialParams = []paramRule{
	// private_token (GitLab API), access_token (OAuth 2.0 bearer token in a URI, RFC 6750
	// §2.3; GitLab, Bitbucket, Gitea), oauth_token (OAuth 1.0a, RFC 5849 §3.5.3; GitHub's
	// old API), token (Gitea, GitHub raw links), id_token and refresh_token (OpenID
	// Connect), job_token (GitLab CI), X-Amz-Security-Token (AWS STS session token in an
	// S3 presigned URL), PRIVATE-TOKEN (GitLab header name used as a parameter).
	{"token", true},
	// client_secret (OAuth 2.0 client password, RFC 6749 §2.3.1), secret, app_secret.
	{"secret", true},
	// password, db_password, Password.
	{"password", true},
	// passwd.
	{"passwd", true},
	// X-Amz-Signature (S3 SigV4 presigned), Signature (S3 SigV2, Alibaba OSS, GCS V2
	// signed URLs), X-Goog-Signature (GCS V4 signed URLs), oauth_signature (OAuth 1.0a).
	{"signature", true},
	// X-Amz-Credential (SigV4: access key id and scope), X-Goog-Credential (GCS V4).
	{"credential", true},
	// api_key, apikey, api-key, x-api-key (many HTTP APIs).
	{"apikey", true},
	// AWSAccessKeyId (S3 SigV2 presigned), OSSAccessKeyId (Alibaba OSS), access_key.
	{"accesskey", true},
	// pass (generic short form).
	{"pass", false},
	// pwd (generic short form).
	{"pwd", false},
	// auth (Firebase Realtime Database REST "?auth=").
	{"auth", false},
	// authorization (a header value moved into the URL).
	{"authorization", false},
	// key (Google APIs "?key=").
	{"key", false},
	// sig: the signature of an Azure Storage shared access signature; its other fields
	// (sv version, se expiry, sp permissions, sr resource, st start, spr protocol) are not
	// secret and stay, useless without sig.
	{"sig", false},
	// jwt (JSON Web Token passed as a parameter).
	{"jwt", false},
	// bearer (a bearer token passed as a parameter).
	{"bearer", false},
	// GoogleAccessId (GCS V2 signed URLs: the service account).
	{"googleaccessid", false},
}

// maxDecode bounds how often a name or URL is percent-decoded ("%2525250a" needs four
// rounds); what still decodes further is treated as hostile. It keeps the work linear in
// the input for configs built to be slow ("%252525...").
const maxDecode = 8

// decodeAll percent-decodes s until nothing changes ("%2570" → "%70" → "p"), at most
// maxDecode times; ok is false when s would still change. Invalid escapes stay.
func decodeAll(s string) (string, bool) {
	for i := 0; i < maxDecode; i++ {
		d := decodeOnce(s)
		if d == s {
			return s, true
		}
		s = d
	}
	return s, decodeOnce(s) == s
}

// normParam returns a parameter name in the form credentialParams uses, and false when
// it cannot be decoded within maxDecode rounds.
func normParam(name string) (string, bool) {
	name, ok := decodeAll(name)
	return strings.Map(func(r rune) rune {
		switch r {
		case '-', '_', '.', ' ', '+': // '+' is a space in form encoding
			return -1
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, name), ok
}

// credentialParam reports whether a query parameter name matches credentialParams (or
// is too deeply encoded to tell).
func credentialParam(name string) bool {
	n, ok := normParam(name)
	if !ok {
		return true
	}
	for _, r := range credentialParams {
		if n == r.name || r.contains && strings.Contains(n, r.name) {
			return true
		}
	}
	return false
}

// urlStop reports whether c ends a URL inside a config value: blanks, control bytes and
// the characters RFC 3986 never allows in a URL that commonly delimit one in text.
func urlStop(c byte) bool { return urlStops[c] }

// urlStops is urlStop as a table (the scan runs once per byte of every value).
var urlStops = func() (t [256]bool) {
	for c := 0; c <= ' '; c++ {
		t[c] = true
	}
	for _, c := range []byte("\x7f\"'<>`\\") {
		t[c] = true
	}
	return t
}()

// hasQueryCredentials reports whether s contains a URL ("scheme://...") with a
// credentialParams parameter in its query or fragment.
func hasQueryCredentials(s string) bool { return stripQueryCredentials(s) != s }

// stripQueryCredentials returns s without the credentialParams parameters of every URL in
// it, in one pass. A URL is a run of characters up to urlStop that holds "://"; its
// parameters are the parts after the first '?' or '#' that follows, split at '&', ';',
// '?' and '#' (so a URL nested in another's query, "?next=https://e/?token=x", is
// cleaned too). A parameter is removed with the separator before it; '?' and '#' move to
// the next parameter kept, or go when none is.
func stripQueryCredentials(s string) string {
	var b strings.Builder
	changed := false
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && !urlStop(s[j]) {
			j++
		}
		run := s[i:j]
		if t, ch := stripRun(run); ch {
			run, changed = t, true
		}
		b.WriteString(run)
		if j < len(s) {
			b.WriteByte(s[j])
		}
		i = j + 1
	}
	if !changed {
		return s
	}
	return b.String()
}

// stripRun removes credential parameters from one run of URL characters.
func stripRun(run string) (string, bool) {
	i := strings.Index(run, "://")
	if i < 0 {
		return run, false
	}
	q := strings.IndexAny(run[i+3:], "?#")
	if q < 0 {
		return run, false
	}
	q += i + 3
	var b strings.Builder
	b.WriteString(run[:q])
	changed := false
	var pending byte // a '?' or '#' whose parameter was removed
	for start := q; start < len(run); {
		sep := run[start]
		end := start + 1 + strings.IndexAny(run[start+1:], "&;?#")
		if end <= start {
			end = len(run)
		}
		part := run[start+1 : end]
		name, _, _ := strings.Cut(part, "=")
		switch {
		case credentialParam(name):
			changed = true
			if sep == '?' || sep == '#' {
				pending = sep
			}
		case pending != 0 && (sep == '&' || sep == ';'):
			b.WriteByte(pending)
			b.WriteString(part)
			pending = 0
		default:
			b.WriteByte(sep)
			b.WriteString(part)
			pending = 0
		}
		start = end
	}
	if !changed {
		return run, false
	}
	return b.String(), true
}

func decodeOnce(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// controlRange is one row of urlControls: lead followed by one byte in [lo, hi].
type controlRange struct {
	lead   string
	lo, hi byte
}

// urlControls are the byte sequences a URL-valued key must not hold, raw or
// percent-encoded to any depth ("%0a", "%0A", "%250a", "%c0%8a"): git, curl, ssh and
// credential helpers read them as line or string ends, which lets one URL speak for
// another host.
var urlControls = []controlRange{
	// C0 controls: NUL ends a C string (curl, libssh); CR and LF split a line of the
	// credential-helper protocol (git-credential(1); CVE-2020-5260), TAB and ESC reach
	// terminals in messages.
	{"", 0x00, 0x1f},
	// DEL.
	{"", 0x7f, 0x7f},
	// Overlong two-byte forms of U+0000..U+003F ("\xc0\x8a" is '\n' to lenient UTF-8
	// decoders; RFC 3629 §3 forbids them).
	{"\xc0", 0x80, 0xbf},
	// Overlong two-byte forms of U+0040..U+007F, DEL among them.
	{"\xc1", 0x80, 0xbf},
	// C1 controls U+0080..U+009F, NEL (U+0085) a line break to Unicode-aware readers.
	{"\xc2", 0x80, 0x9f},
	// U+2028 LINE SEPARATOR and U+2029 PARAGRAPH SEPARATOR.
	{"\xe2\x80", 0xa8, 0xa9},
}

// hasControl reports whether s holds a urlControls sequence, raw or after any number of
// percent-decodings (or is encoded more than maxDecode times deep).
func hasControl(s string) bool {
	for round := 0; ; round++ {
		for i := 0; i < len(s); i++ {
			for _, r := range urlControls {
				if j := i + len(r.lead); strings.HasPrefix(s[i:], r.lead) && j < len(s) && s[j] >= r.lo && s[j] <= r.hi {
					return true
				}
			}
		}
		d := decodeOnce(s)
		if d == s {
			return false
		}
		if round == maxDecode {
			return true
		}
		s = d
	}
}

// urlForm says how a URL-valued key is read.
type urlForm int

const (
	// fullURL: a URL, an scp-like "[user@]host:path" or a local path, as git, git-lfs or
	// curl connect to it: control characters, an empty host and a host starting with '-'
	// are refused.
	fullURL urlForm = iota
	// urlPrefix: a prefix matched against or substituted into other URLs (insteadOf,
	// url.<base>, http.<url>): control characters are refused; "https://" alone is an
	// ordinary value (url."https://".insteadOf = git://).
	urlPrefix
)

// urlKey is one row of urlKeys: variable name of section (with any subsection when sub
// is set), or the subsection name itself when name is "".
type urlKey struct {
	section string
	sub     bool
	name    string
	form    urlForm
}

// urlKeys are the config keys whose value (or subsection name) is a URL that git or a
// tool it runs connects to or rewrites with (git-config(1) unless noted). Credential
// query parameters are removed from URLs in every value; these keys are also checked
// with urlProblem and removed when it finds one.
var urlKeys = []urlKey{
	{"remote", true, "url", fullURL},          // remote.<name>.url: fetch and push URL
	{"remote", true, "pushurl", fullURL},      // remote.<name>.pushurl
	{"remote", true, "proxy", fullURL},        // remote.<name>.proxy: curl proxy for the remote
	{"remote", true, "lfsurl", fullURL},       // remote.<name>.lfsurl (git-lfs-config(5))
	{"remote", true, "lfspushurl", fullURL},   // remote.<name>.lfspushurl (git-lfs-config(5))
	{"remote", false, "pushdefault", fullURL}, // remote.pushDefault: a remote name or a URL
	{"branch", true, "remote", fullURL},       // branch.<name>.remote: a remote name or a URL
	{"branch", true, "pushremote", fullURL},   // branch.<name>.pushRemote: likewise
	{"url", true, "", urlPrefix},              // url.<base>: the replacement prefix
	{"url", true, "insteadof", urlPrefix},     // url.<base>.insteadOf: the prefix replaced
	{"url", true, "pushinsteadof", urlPrefix}, // url.<base>.pushInsteadOf
	{"submodule", true, "url", fullURL},       // submodule.<name>.url (.git/config copy)
	{"lfs", false, "url", fullURL},            // lfs.url: LFS endpoint (git-lfs-config(5))
	{"lfs", false, "pushurl", fullURL},        // lfs.pushurl (git-lfs-config(5))
	{"lfs", true, "", urlPrefix},              // lfs.<url>.access and others (git-lfs-config(5))
	{"http", false, "proxy", fullURL},         // http.proxy
	{"http", true, "proxy", fullURL},          // http.<url>.proxy
	{"http", true, "", urlPrefix},             // http.<url>.*: a URL pattern ("https://*.example.com/")
	{"imap", false, "host", fullURL},          // imap.host: "imap://host" or "imaps://host" (git-imap-send(1))
	{"svn-remote", true, "url", fullURL},      // svn-remote.<name>.url (git-svn(1))
	{"svn-remote", true, "pushurl", fullURL},  // svn-remote.<name>.pushurl (git-svn(1))
	{"fetch", false, "bundleuri", fullURL},    // fetch.bundleURI: bundle list fetched before a clone
	{"bundle", true, "uri", fullURL},          // bundle.<id>.uri: one bundle of a bundle list
}

// urlKeyForm returns how the variable name (or the subsection itself when name is "")
// of section sec is read, and false when it is not URL-valued.
func urlKeyForm(sec string, hasSub bool, name string) (urlForm, bool) {
	for _, k := range urlKeys {
		if k.section == sec && k.sub == hasSub && k.name == name {
			return k.form, true
		}
	}
	return 0, false
}

// Reasons for URL-valued keys removed by urlProblem.
const (
	ReasonURLControl  = "URL with a control character"
	ReasonURLNoHost   = "URL without a host"
	ReasonURLDashHost = "URL host starting with '-'"
)

// urlProblem returns why v, read as form, must not reach S, or "". An empty value (for a
// proxy: no proxy) and a local path are kept; "file://" URLs have no host by design.
func urlProblem(v string, form urlForm) string {
	if hasControl(v) {
		return ReasonURLControl
	}
	if form == urlPrefix || v == "" {
		return ""
	}
	// "<transport>::<address>" runs git-remote-<transport> with the address
	// (gitremote-helpers(7)).
	if i := strings.Index(v, "::"); i > 0 && isScheme(v[:i]) {
		v = v[i+2:]
	}
	host, remote := urlHost(v)
	switch {
	case !remote:
		return ""
	case host == "":
		return ReasonURLNoHost
	case host[0] == '-':
		// ssh would read it as an option; git refuses it since CVE-2017-1000117.
		return ReasonURLDashHost
	}
	return ""
}

func isScheme(s string) bool {
	if s == "" || !isAlpha(s[0]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isSchemeChar(s[i]) {
			return false
		}
	}
	return true
}

// urlHost returns the host of a "scheme://" URL or an scp-like address, read as git does
// (connect.c url_is_local_not_ssh: a ':' before any '/' makes "[user@]host:path"), and
// remote=false for a local path or a "file://" URL.
func urlHost(v string) (host string, remote bool) {
	if i := strings.Index(v, "://"); i >= 0 && isScheme(v[:i]) {
		if strings.EqualFold(v[:i], "file") {
			return "", false
		}
		auth := v[i+3:]
		if j := strings.IndexAny(auth, "/?#"); j >= 0 {
			auth = auth[:j]
		}
		auth = auth[strings.LastIndexByte(auth, '@')+1:]
		if strings.HasPrefix(auth, "[") { // "[v6]:port"
			host, _, _ = strings.Cut(auth[1:], "]")
			return host, true
		}
		host, _, _ = strings.Cut(auth, ":")
		return host, true
	}
	colon, slash := strings.IndexByte(v, ':'), strings.IndexByte(v, '/')
	if colon < 0 || slash >= 0 && slash < colon {
		return "", false
	}
	auth := v[:colon]
	if end := strings.IndexByte(v, ']'); strings.HasPrefix(v, "[") && end > 0 {
		auth = v[1:end] // "[user@host:port]:path" or "[v6]:path"
		if strings.Count(auth, ":") == 1 {
			auth, _, _ = strings.Cut(auth, ":")
		}
	}
	return auth[strings.LastIndexByte(auth, '@')+1:], true
}
