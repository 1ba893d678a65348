package gitconfig

import (
	"fmt"
	"strings"
	"testing"
)

// credentialParamMembers are parameter names from the ecosystem that carry a secret; each
// must be removed, and every credentialParams row must be the only one matching at least
// one of them (so no row is untested or redundant).
var credentialParamMembers = []string{
	"private_token", "access_token", "token", "oauth_token", "id_token", "refresh_token",
	"job_token", "X-Amz-Security-Token", "PRIVATE-TOKEN", "client_secret", "secret",
	"app_secret", "password", "db_password", "passwd", "X-Amz-Signature", "Signature",
	"X-Goog-Signature", "oauth_signature", "X-Amz-Credential", "X-Goog-Credential",
	"api_key", "apikey", "api-key", "x-api-key", "AWSAccessKeyId", "OSSAccessKeyId",
	"access_key", "pass", "pwd", "auth", "authorization", "key", "sig", "jwt", "bearer",
	"GoogleAccessId",
}

// ordinaryParams are parameter names that must stay (Azure SAS's public fields among
// them).
var ordinaryParams = []string{"ref", "branch", "sv", "se", "sp", "sr", "st", "spr", "page",
	"author", "monkey", "bypass", "sigma", "keyboard", "x-amz-date", "x-amz-expires", "Expires"}

// percentAll encodes every byte of s as %XX.
func percentAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

func TestCredentialParams(t *testing.T) {
	const secret = "S3cr3tVa1ue"
	for _, name := range credentialParamMembers {
		for _, form := range []string{name, strings.ToUpper(name), percentAll(name),
			strings.ReplaceAll(percentAll(name), "%", "%25")} {
			in := "https://git.example.test/o/r.git?ref=main&" + form + "=" + secret + "&page=2#L1"
			got := StripURLCredentials(in)
			if got != "https://git.example.test/o/r.git?ref=main&page=2#L1" {
				t.Errorf("%s: StripURLCredentials(%q) = %q", name, in, got)
			}
			if !HasURLCredentials(in) || HasURLCredentials(got) {
				t.Errorf("%s: HasURLCredentials before/after wrong for %q", name, in)
			}
		}
	}
	for _, name := range ordinaryParams {
		in := "https://h.example.test/r?" + name + "=v"
		if HasURLCredentials(in) || StripURLCredentials(in) != in {
			t.Errorf("ordinary parameter %q removed from %q", name, in)
		}
	}
	for i, row := range credentialParams {
		only := false
		for _, name := range credentialParamMembers {
			n, _ := normParam(name)
			hits := 0
			for _, r := range credentialParams {
				if n == r.name || r.contains && strings.Contains(n, r.name) {
					hits++
				}
			}
			if hits == 1 && (n == row.name || row.contains && strings.Contains(n, row.name)) {
				only = true
			}
		}
		if !only {
			t.Errorf("credentialParams[%d] %q is the only match of no member: untested or redundant", i, row.name)
		}
	}
}

func TestStripQueryShapes(t *testing.T) {
	for in, want := range map[string]string{
		"https://h/r?private_token=x":                   "https://h/r",
		"https://h/r?a=1&token=x&b=2":                   "https://h/r?a=1&b=2",
		"https://h/r?token=x&b=2":                       "https://h/r?b=2",
		"https://h/r?a=1;sig=x;b=2":                     "https://h/r?a=1;b=2",
		"https://h/r?a=1#access_token=x&state=s":        "https://h/r?a=1#state=s",
		"https://h/r#access_token=x":                    "https://h/r",
		"https://h/r?private%5Ftoken=x&ok=1":            "https://h/r?ok=1",
		"https://h/r?%2570rivate_token=x":               "https://h/r",
		"https://h/r?k+ey=x":                            "https://h/r",
		"https://h/r?TOKEN":                             "https://h/r",
		"https://h/?next=https://e/?token=x":            "https://h/?next=https://e/",
		"git clone https://h/r?token=x && echo":         "git clone https://h/r && echo",
		`"https://h/r?token=x" y`:                       `"https://h/r" y`,
		"https://u:p@h/r?token=x&a":                     "https://h/r?a",
		"/local/path?token=x":                           "/local/path?token=x",
		"git@h:r?token=x":                               "git@h:r?token=x",
		"https://h/r?":                                  "https://h/r?",
		"https://h/r?&":                                 "https://h/r?&",
		"https://h/r?a=%26token%3Dx":                    "https://h/r?a=%26token%3Dx",
		"s3://bucket/k?X-Amz-Credential=c&X-Amz-Date=d": "s3://bucket/k?X-Amz-Date=d",
	} {
		got := StripURLCredentials(in)
		if got != want {
			t.Errorf("StripURLCredentials(%q) = %q, want %q", in, got, want)
		}
		if StripURLCredentials(got) != got {
			t.Errorf("StripURLCredentials not idempotent on %q", got)
		}
	}
}

// TestURLProblem: every urlControls row raw, percent-encoded (both cases) and
// double-encoded; every empty-host form; what is kept.
func TestURLProblem(t *testing.T) {
	type tc struct {
		v    string
		form urlForm
		want string
	}
	// Members of urlControls' rows, listed here independently of the table.
	controls := []string{"\x00", "\x01", "\t", "\n", "\r", "\x1b", "\x1f", "\x7f", "\xc0\x80", "\xc0\x8a",
		"\xc0\xbf", "\xc1\x80", "\xc1\xbf", "\xc2\x80", "\xc2\x85", "\xc2\x9f", "\xe2\x80\xa8", "\xe2\x80\xa9"}
	cases := []tc{}
	for _, seq := range controls {
		enc := percentAll(seq)
		for _, s := range []string{seq, enc, strings.ToLower(enc), strings.ReplaceAll(enc, "%", "%25"), strings.ReplaceAll(enc, "%", "%2525")} {
			cases = append(cases, tc{"https://h.example/r" + s + "x", fullURL, ReasonURLControl},
				tc{"git@h.example:r" + s, fullURL, ReasonURLControl},
				tc{"https://h.example/" + s, urlPrefix, ReasonURLControl})
		}
	}
	for _, ok := range []string{" ", "~", "\xc2\xa0", "\xe2\x80\xa7", "\xe2\x80\xaa", "%c3%a9", "%2"} {
		cases = append(cases, tc{"https://h.example/r" + strings.TrimSpace(ok), fullURL, ""})
	}
	cases = append(cases,
		tc{"https:///x", fullURL, ReasonURLNoHost},
		tc{"ssh:///x", fullURL, ReasonURLNoHost},
		tc{"ssh://:22/x", fullURL, ReasonURLNoHost},
		tc{"https://u@/x", fullURL, ReasonURLNoHost},
		tc{"https://", fullURL, ReasonURLNoHost},
		tc{"https://[]/x", fullURL, ReasonURLNoHost},
		tc{"git://?x", fullURL, ReasonURLNoHost},
		tc{":path", fullURL, ReasonURLNoHost},
		tc{"git@:path", fullURL, ReasonURLNoHost},
		tc{"[]:path", fullURL, ReasonURLNoHost},
		tc{"[git@]:path", fullURL, ReasonURLNoHost},
		tc{"persistent-https::https:///x", fullURL, ReasonURLNoHost},
		tc{"ssh://-oProxyCommand=x/r", fullURL, ReasonURLDashHost},
		tc{"ssh://git@-oProxyCommand=x/r", fullURL, ReasonURLDashHost},
		tc{"-oProxyCommand=x:r", fullURL, ReasonURLDashHost},
		tc{"https://h.example/a%20b%7e%41", fullURL, ""},
		tc{"https://h.example/r%3f", fullURL, ""},
		tc{"file:///srv/r.git", fullURL, ""},
		tc{"/srv/r.git", fullURL, ""},
		tc{"../r.git", fullURL, ""},
		tc{"./a:b", fullURL, ""},
		tc{"origin", fullURL, ""},
		tc{"", fullURL, ""},
		tc{"git@github.com:o/r.git", fullURL, ""},
		tc{"[::1]:r.git", fullURL, ""},
		tc{"[git@h.example:2222]:r.git", fullURL, ""},
		tc{"https://[::1]:8443/r", fullURL, ""},
		tc{"proxy.example:3128", fullURL, ""},
		tc{"https://h.example/r/caf\xc3\xa9", fullURL, ""},
		tc{"https://", urlPrefix, ""},
		tc{"git://", urlPrefix, ""},
		tc{"gh:", urlPrefix, ""},
	)
	for _, c := range cases {
		if got := urlProblem(c.v, c.form); got != c.want {
			t.Errorf("urlProblem(%q, %d) = %q, want %q", c.v, c.form, got, c.want)
		}
	}
}

// urlKeyConfig returns a config with value v at key k (a urlKeys row): a variable, or
// the subsection name of a section with one ordinary variable.
func urlKeyConfig(k urlKey, v string) (cfg, key string) {
	header := "[" + k.section + "]\n"
	key = k.section
	if k.sub {
		header = "[" + k.section + ` "n"]` + "\n"
		key += ".n"
	}
	if k.name == "" {
		return "[" + k.section + ` "` + v + `"]` + "\n\tsslverify = false\n", k.section + "." + StripURLCredentials(v)
	}
	return header + "\t" + k.name + " = " + v + "\n", key + "." + k.name
}

// urlKeyMembers are the URL-valued keys, listed independently of urlKeys (which must
// hold exactly these): section, has a subsection, variable ("" for the subsection name),
// and whether the value is a prefix.
var urlKeyMembers = []urlKey{
	{"remote", true, "url", fullURL}, {"remote", true, "pushurl", fullURL}, {"remote", true, "proxy", fullURL},
	{"remote", true, "lfsurl", fullURL}, {"remote", true, "lfspushurl", fullURL}, {"remote", false, "pushdefault", fullURL},
	{"branch", true, "remote", fullURL}, {"branch", true, "pushremote", fullURL},
	{"url", true, "", urlPrefix}, {"url", true, "insteadof", urlPrefix}, {"url", true, "pushinsteadof", urlPrefix},
	{"submodule", true, "url", fullURL}, {"lfs", false, "url", fullURL}, {"lfs", false, "pushurl", fullURL},
	{"lfs", true, "", urlPrefix}, {"http", false, "proxy", fullURL}, {"http", true, "proxy", fullURL},
	{"http", true, "", urlPrefix}, {"imap", false, "host", fullURL}, {"svn-remote", true, "url", fullURL},
	{"svn-remote", true, "pushurl", fullURL}, {"fetch", false, "bundleuri", fullURL}, {"bundle", true, "uri", fullURL},
}

// TestSanitizeURLKeys: every URL-valued key with a credential parameter, a control
// character, no host; the URL otherwise kept.
func TestSanitizeURLKeys(t *testing.T) {
	if len(urlKeys) != len(urlKeyMembers) {
		t.Errorf("urlKeys has %d rows, the test lists %d", len(urlKeys), len(urlKeyMembers))
	}
	for _, k := range urlKeyMembers {
		testURLKey(t, k)
	}
}

func testURLKey(t *testing.T, k urlKey) {
	const keep = "[core]\n\tbare = false\n"
	name := k.section + "." + k.name
	check := func(v, wantReason, wantOut string, rewritten bool) {
		t.Helper()
		cfg, key := urlKeyConfig(k, v)
		out, removed, err := Sanitize([]byte(keep + cfg))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if strings.Contains(string(out), tok) || !strings.Contains(string(out), "bare = false") {
			t.Errorf("%s = %q: output\n%s", name, v, out)
		}
		if wantOut != "" && !strings.Contains(string(out), wantOut) {
			t.Errorf("%s = %q: output lacks %q:\n%s", name, v, wantOut, out)
		}
		want := Removal{Key: key, Reason: wantReason, Rewritten: rewritten}
		if len(removed) != 1 || removed[0] != want {
			t.Errorf("%s = %q: removed %+v, want %+v", name, v, removed, want)
		}
	}
	q := "https://h.example/r?ref=main&private_token=" + tok
	switch {
	case k.name == "": // the section name itself: removed whole
		check(q, ReasonURLCredentials, "", false)
	case k.section == "url": // a rewrite carrying a token is removed whole
		cfg, _ := urlKeyConfig(k, q)
		out, removed, _ := Sanitize([]byte(keep + cfg))
		if strings.Contains(string(out), tok) || len(removed) != 1 || removed[0].Reason != ReasonInsteadOf {
			t.Errorf("%s: removed %+v\n%s", name, removed, out)
		}
	default:
		check(q, ReasonURLQuery, k.name+" = https://h.example/r?ref=main\n", true)
	}
	check("https://h.example/r%0a"+tok, ReasonURLControl, "", false)
	if k.form == fullURL {
		check("https:///"+tok, ReasonURLNoHost, "", false)
		check("ssh://-o"+tok+"/r", ReasonURLDashHost, "", false)
		return
	}
	cfg, _ := urlKeyConfig(k, "https://")
	if _, removed, _ := Sanitize([]byte(keep + cfg)); len(removed) != 0 {
		t.Errorf("%s: prefix \"https://\" removed: %+v", name, removed)
	}
}

// hostileValues are 4 MiB values (the snapshot's git config limit) built to make a
// non-linear sanitizer slow.
func hostileValues() map[string]string {
	const n = 4 << 20
	rep := func(s string) string { return strings.Repeat(s, n/len(s)) }
	return map[string]string{
		"many URLs with tokens": rep("a://h/?token=x "),
		"one query of tokens":   "https://h/?" + rep("token=x&"),
		"nested URLs":           "https://h/" + rep("?n=a://"),
		"scheme separators":     rep("://"),
		"deep encoding":         "https://h/?" + rep("%25") + "70rivate_token=x",
		"userinfo runs":         rep("a://u:p@"),
	}
}

// BenchmarkSanitizeHostile: Sanitize stays linear on hostileValues (run with
// -bench SanitizeHostile; each op is one 4 MiB value).
func BenchmarkSanitizeHostile(b *testing.B) {
	for name, v := range hostileValues() {
		cfg := []byte("[remote \"o\"]\n\turl = \"" + v + "\"\n")
		b.Run(strings.ReplaceAll(name, " ", "_"), func(b *testing.B) {
			b.SetBytes(int64(len(cfg)))
			for i := 0; i < b.N; i++ {
				if _, _, err := Sanitize(cfg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
