package gitconfig

import (
	"errors"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

func TestParse(t *testing.T) {
	in := "\xef\xbb\xbf# comment\n" +
		"[Core]\n\trepositoryFormatVersion = 0\r\n" +
		"\tbare = false ; trailing comment\n" +
		"\tIgnoreCase\n" +
		"[remote \"Origin \\\"x\\\\\"] url = git@host:r.git\n" +
		"\tfetch = +refs/heads/*:refs/remotes/origin/*   \n" +
		"[alias]\n\tlg = \"log  --graph # not a comment\" --oneline\n" +
		"\tmulti = one \\\n  two\\tthree\\n\n" +
		"\tempty =\n" +
		"; another\n[Branch.Main]\n\tremote = origin\n"
	got, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{Sections: []Section{
		{Name: "core", Vars: []Var{{Name: "repositoryformatversion", Value: "0"}, {Name: "bare", Value: "false"}, {Name: "ignorecase", NoValue: true}}},
		{Name: "remote", Sub: `Origin "x\`, HasSub: true, Vars: []Var{{Name: "url", Value: "git@host:r.git"}, {Name: "fetch", Value: "+refs/heads/*:refs/remotes/origin/*"}}},
		{Name: "alias", Vars: []Var{{Name: "lg", Value: "log  --graph # not a comment --oneline"}, {Name: "multi", Value: "one   two\tthree\n"}, {Name: "empty", Value: ""}}},
		{Name: "branch.main", Vars: []Var{{Name: "remote", Value: "origin"}}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse:\n got %#v\nwant %#v", got, want)
	}
	again, err := Parse(got.Bytes())
	if err != nil {
		t.Fatalf("reparse canonical form: %v\n%s", err, got.Bytes())
	}
	if !reflect.DeepEqual(again, got) {
		t.Fatalf("canonical form does not round-trip:\n%s\n got %#v", got.Bytes(), again)
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{
		"[core\n",                        // unterminated header
		"[core \"x]\n",                   // unterminated subsection
		"[core x]\n",                     // unquoted subsection
		"[core \"x\" ]\n",                // junk after subsection
		"[]\n",                           // empty name
		"[co/re]\n",                      // bad char
		"[core]\n\t1abc = x\n",           // name must start with a letter
		"[core]\n\tabc x\n",              // missing '='
		"[core]\n\ta = \"open\n",         // unterminated quote
		"[core]\n\ta = bad \\q escape\n", // bad escape
	} {
		if _, err := Parse([]byte(in)); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %v, want ErrSyntax", in, err)
		}
	}
}

const tok = "CANARYtok3n9f8e7d"

// TestSanitizeKeys checks each credential position on its own: the token is gone, the
// removal is reported under the right key, and unrelated content survives.
func TestSanitizeKeys(t *testing.T) {
	keep := "[core]\n\tbare = false\n"
	for _, tc := range []struct {
		name, in, key, reason, want string // want: a string that must remain in the output
	}{
		{"remote url user:token", `[remote "origin"]` + "\n\turl = https://user:" + tok + "@github.com/o/r.git\n", "remote.origin.url", ReasonURLCredentials, "url = https://github.com/o/r.git"},
		{"remote url token as user", `[remote "origin"]` + "\n\turl = https://" + tok + "@github.com/o/r.git\n", "remote.origin.url", ReasonURLCredentials, "https://github.com/o/r.git"},
		{"pushurl", `[remote "o"]` + "\n\tpushurl = https://x-access-token:" + tok + "@h/r\n", "remote.o.pushurl", ReasonURLCredentials, "pushurl = https://h/r"},
		{"submodule url", `[submodule "s"]` + "\n\turl = https://u:" + tok + "@h/s\n", "submodule.s.url", ReasonURLCredentials, "url = https://h/s"},
		{"ssh password", `[remote "o"]` + "\n\turl = ssh://git:" + tok + "@h/r\n", "remote.o.url", ReasonURLCredentials, "ssh://git@h/r"},
		{"http extraheader", "[http]\n\textraHeader = Authorization: Bearer " + tok + "\n", "http.extraheader", ReasonExtraHeader, ""},
		{"http url extraheader", `[http "https://github.com/"]` + "\n\textraheader = AUTHORIZATION: basic " + tok + "\n\tsslVerify = true\n", "http.https://github.com/.extraheader", ReasonExtraHeader, "sslverify = true"},
		{"credential helper", "[credential]\n\thelper = store --file=/tmp/" + tok + "\n", "credential", ReasonCredential, ""},
		{"credential url section", `[credential "https://h"]` + "\n\tusername = " + tok + "\n", "credential.https://h", ReasonCredential, ""},
		{"include", "[include]\n\tpath = ~/" + tok + ".inc\n", "include", ReasonInclude, ""},
		{"includeIf", `[includeIf "gitdir:~/w/"]` + "\n\tpath = " + tok + "\n", "includeif.gitdir:~/w/", ReasonInclude, ""},
		{"core.fsmonitor", "[core]\n\tfsmonitor = /bin/" + tok + "\n", "core.fsmonitor", ReasonCommand, ""},
		{"core.hooksPath", "[core]\n\thooksPath = /" + tok + "\n", "core.hookspath", ReasonCommand, ""},
		{"core.sshCommand", "[core]\n\tsshCommand = ssh -i /" + tok + "\n", "core.sshcommand", ReasonCommand, ""},
		{"core.askPass", "[core]\n\taskpass = " + tok + "\n", "core.askpass", ReasonCommand, ""},
		{"insteadOf value with creds", `[url "https://github.com/"]` + "\n\tinsteadOf = https://u:" + tok + "@github.com/\n", "url.https://github.com/", ReasonInsteadOf, ""},
		{"insteadOf base with creds", `[url "https://u:` + tok + `@github.com/"]` + "\n\tinsteadOf = https://github.com/\n", "url.https://github.com/", ReasonURLCredentials, ""},
		{"smtp pass", "[sendemail]\n\tsmtpPass = " + tok + "\n", "sendemail.smtppass", ReasonSecretName, ""},
		{"token name", "[github]\n\toauthToken = " + tok + "\n", "github.oauthtoken", ReasonSecretName, ""},
		{"proxy url", "[http]\n\tproxy = http://u:" + tok + "@proxy:3128\n", "http.proxy", ReasonURLCredentials, "proxy = http://proxy:3128"},
		{"dotted credential", "[credential.https://h]\n", "", "", ""}, // bad syntax: ':' in name
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, removed, err := Sanitize([]byte(keep + tc.in))
			if tc.key == "" {
				if !errors.Is(err, ErrSyntax) {
					t.Fatalf("want ErrSyntax, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(out), tok) {
				t.Fatalf("token survived:\n%s", out)
			}
			if !strings.Contains(string(out), "bare = false") {
				t.Fatalf("unrelated content lost:\n%s", out)
			}
			if tc.want != "" && !strings.Contains(string(out), tc.want) {
				t.Fatalf("output lacks %q:\n%s", tc.want, out)
			}
			if len(removed) != 1 || removed[0].Key != tc.key || removed[0].Reason != tc.reason {
				t.Fatalf("removed = %+v, want [{%s %s}]", removed, tc.key, tc.reason)
			}
			// A variable kept with only its URL's credentials removed says so.
			if kept := strings.Contains(string(out), tc.key[strings.LastIndexByte(tc.key, '.')+1:]+" = "); removed[0].Rewritten && !kept {
				t.Fatalf("Rewritten set but %s was removed:\n%s", tc.key, out)
			}
			for _, r := range removed {
				if strings.Contains(r.Key, tok) {
					t.Fatalf("removal key leaks token: %q", r.Key)
				}
			}
			again, rem2, err := Sanitize(out)
			if err != nil || string(again) != string(out) || len(rem2) != 0 {
				t.Fatalf("not idempotent: err=%v removed=%v\n%s\n---\n%s", err, rem2, out, again)
			}
		})
	}
}

// TestSanitizeDropsEmptiedSections: a section whose every variable was removed leaves no
// bare header behind; a section that was empty in the input stays.
func TestSanitizeDropsEmptiedSections(t *testing.T) {
	in := "[core]\n\tbare = false\n[http]\n\textraHeader = Authorization: Bearer " + tok + "\n[gc]\n[user]\n\tname = A\n"
	out, removed, err := Sanitize([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := "[core]\n\tbare = false\n[gc]\n[user]\n\tname = A\n"
	if string(out) != want || len(removed) != 1 {
		t.Fatalf("Sanitize = %q, removed %v; want %q and one removal", out, removed, want)
	}
}

func TestSanitizeKeepsOrdinary(t *testing.T) {
	in := "[core]\n\tbare = false\n[remote \"origin\"]\n\turl = git@github.com:o/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n" +
		"[remote \"u\"]\n\turl = ssh://git@github.com/o/r\n[url \"git@github.com:\"]\n\tinsteadof = https://github.com/\n" +
		"[filter \"lfs\"]\n\tprocess = git-lfs filter-process\n"
	out, removed, err := Sanitize([]byte(in))
	if err != nil || len(removed) != 0 {
		t.Fatalf("err=%v removed=%v", err, removed)
	}
	if string(out) != in {
		t.Fatalf("ordinary config changed:\n%s", out)
	}
}

func TestStripURLCredentials(t *testing.T) {
	for in, want := range map[string]string{
		"https://u:p@h/x":             "https://h/x",
		"https://a@b@h":               "https://h",
		"HTTPS://tok@h":               "HTTPS://h",
		"ssh://git@h/r":               "ssh://git@h/r",
		"ssh://git:pw@h/r":            "ssh://git@h/r",
		"git@github.com:o/r":          "git@github.com:o/r",
		"x https://u:p@a y ftp://q@b": "x https://a y ftp://b",
		"https://h/path@x":            "https://h/path@x",
	} {
		if got := StripURLCredentials(in); got != want {
			t.Errorf("StripURLCredentials(%q) = %q, want %q", in, got, want)
		}
	}
}

// credentialTemplates put %s (the token) in each credential position Sanitize handles.
var credentialTemplates = []string{
	"[remote \"o\"]\n\turl = https://user:%s@example.net/r\n",
	"[remote \"o\"]\n\tpushurl = https://%s@example.net/r\n",
	"[submodule \"s\"]\n\turl = ssh://git:%s@example.net/s\n",
	"[http]\n\textraHeader = Authorization: Bearer %s\n",
	"[http \"https://example.net\"]\n\textraheader = X: %s\n",
	"[credential]\n\thelper = store %s\n",
	"[credential \"https://example.net\"]\n\tusername = %s\n",
	"[include]\n\tpath = %s\n",
	"[includeIf \"gitdir:/w/\"]\n\tpath = %s\n",
	"[core]\n\tfsmonitor = %s\n",
	"[core]\n\thooksPath = %s\n",
	"[core]\n\tsshCommand = ssh -i %s\n",
	"[url \"https://example.net/\"]\n\tinsteadOf = https://u:%s@example.net/\n",
	"[url \"https://u:%s@example.net/\"]\n\tinsteadOf = https://example.net/\n",
	"[sendemail]\n\tsmtpPass = %s\n",
	"[remote \"o\"]\n\turl = https://example.net/r?private_token=%s&ref=main\n",
	"[lfs]\n\turl = https://example.net/r?ref=1&X-Amz-Signature=%s\n",
	"[remote \"o\"]\n\tpushurl = https://example.net/r#access_token=%s\n",
	"[alias]\n\tget = !curl https://example.net/x?sig=%s\n",
	"[http \"https://example.net/?sig=%s\"]\n\tsslVerify = false\n",
	"[url \"https://example.net/?access_token=%s\"]\n\tinsteadOf = ex:\n",
	"[url \"https://example.net/\"]\n\tinsteadOf = https://example.net/?token=%s\n",
	"[remote \"o\"]\n\turl = https://example.net/r%0a%s\n",
	"[submodule \"s\"]\n\turl = https://example.net/%250d%s\n",
	"[remote \"o\"]\n\turl = \"https://example.net/\\n%s\"\n",
	"[submodule \"s\"]\n\turl = https:///%s\n",
	"[branch \"main\"]\n\tremote = ssh://-o%s/x\n",
	"[remote \"o\"]\n\turl = git@:%s\n",
}

// FuzzSanitize: Sanitize never panics; a token placed in a credential position (between
// arbitrary config text) never appears in the output; the output re-sanitizes to itself.
func FuzzSanitize(f *testing.F) {
	f.Add("[core]\n\tbare = false\n", "ghp1234567890abc", uint8(0), "[user]\n\tname = x\n")
	f.Add("[a \"b\"] c = \"d\\\\\" ; e\n", "tokentoken", uint8(5), "[x.y]\nz\n")
	f.Add("[a]\nb = c\\", "secretvalue1", uint8(13), "")
	f.Add("", "AbCdEfGh12", uint8(3), "[http]\n\textraHeader = a\n")
	f.Fuzz(func(t *testing.T, before, token string, which uint8, after string) {
		// Plain Sanitize on arbitrary input: no panic, idempotent output.
		for _, in := range []string{before, after} {
			out, _, err := Sanitize([]byte(in))
			if err != nil {
				continue
			}
			again, rem, err := Sanitize(out)
			if err != nil || string(again) != string(out) || len(rem) != 0 {
				t.Fatalf("not idempotent for %q: err=%v removed=%v\nout:  %q\nagain:%q", in, err, rem, out, again)
			}
			checkURLs(t, out)
		}
		// A token in a credential position must disappear.
		token = strings.Map(func(r rune) rune {
			if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
				return r
			}
			return -1
		}, token)
		if len(token) < 8 {
			return
		}
		tmpl := credentialTemplates[int(which)%len(credentialTemplates)]
		in := before + "\n\n" + strings.Replace(tmpl, "%s", token, 1) + after
		if strings.Count(strings.ToLower(in), strings.ToLower(token)) != 1 {
			return // the token also occurs outside the credential position
		}
		// The surrounding text may spell the token only after git's unquoting (a = 0000000""0
		// is the value 00000000): then the token in the output is not from the credential.
		if rest, _, err := Sanitize([]byte(before + "\n\n" + after)); err == nil &&
			strings.Contains(strings.ToLower(string(rest)), strings.ToLower(token)) {
			return
		}
		out, removed, err := Sanitize([]byte(in))
		if err != nil {
			return
		}
		if strings.Contains(strings.ToLower(string(out)), strings.ToLower(token)) {
			t.Fatalf("token %q survived in\n%s\nfrom\n%s", token, out, in)
		}
		for _, r := range removed {
			if strings.Contains(strings.ToLower(r.Key), strings.ToLower(token)) {
				t.Fatalf("removal key %q leaks the token", r.Key)
			}
		}
		again, rem, err := Sanitize(out)
		if err != nil || string(again) != string(out) || len(rem) != 0 {
			t.Fatalf("not idempotent: err=%v removed=%v", err, rem)
		}
		checkURLs(t, out)
	})
}

// encodedControl matches a percent-encoded C0 control or DEL, also double-encoded.
var encodedControl = regexp.MustCompile(`(?i)%(25)*([01][0-9a-f]|7f)`)

// oracleParam reports whether a parameter name (decoded once, as net/url does) is one the
// ecosystem uses for secrets; written apart from credentialParams.
func oracleParam(name string) bool {
	n := strings.NewReplacer("-", "", "_", "", ".", "", " ", "").Replace(strings.ToLower(name))
	for _, w := range []string{"token", "secret", "passw", "signature", "credential", "apikey", "accesskey"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	switch n {
	case "pass", "pwd", "auth", "authorization", "key", "sig", "jwt", "bearer", "googleaccessid":
		return true
	}
	return false
}

// checkURLs is the fuzz oracle for sanitized output out: no URL in any value or
// subsection (as net/url parses it) has a credential parameter in its query or fragment,
// and no URL-valued key holds a raw or percent-encoded control character.
func checkURLs(t *testing.T, out []byte) {
	t.Helper()
	cfg, err := Parse(out)
	if err != nil {
		t.Fatalf("output does not parse: %v", err)
	}
	for _, s := range cfg.Sections {
		sec, sub, hasSub := s.split()
		texts := []string{sub}
		if _, ok := urlKeyForm(sec, hasSub, ""); ok && (encodedControl.MatchString(sub) || strings.ContainsAny(sub, "\x00\r\n\x7f")) {
			t.Fatalf("URL section name %q with a control character survived", sub)
		}
		for _, v := range s.Vars {
			texts = append(texts, v.Value)
			if _, ok := urlKeyForm(sec, hasSub, v.Name); ok && (encodedControl.MatchString(v.Value) || strings.IndexFunc(v.Value, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0) {
				t.Fatalf("%s.%s = %q with a control character survived", sec, v.Name, v.Value)
			}
		}
		for _, text := range texts {
			for i := strings.Index(text, "://"); i >= 0; i = strings.Index(text, "://") {
				span := text[i+3:]
				text = span
				if j := strings.IndexFunc(span, func(r rune) bool { return r <= ' ' || strings.ContainsRune("\"'<>`\\", r) }); j >= 0 {
					span = span[:j]
				}
				u, err := url.Parse("x://" + span)
				if err != nil {
					continue
				}
				q, _ := url.ParseQuery(u.RawQuery)
				f, _ := url.ParseQuery(u.EscapedFragment())
				for _, vals := range []url.Values{q, f} {
					for name := range vals {
						if oracleParam(name) {
							t.Fatalf("credential parameter %q survived in %q", name, span)
						}
					}
				}
			}
		}
	}
}

// TestRewrittenFlag: a URL whose credentials were stripped is reported as rewritten
// (the variable stays); a removed variable is not.
func TestRewrittenFlag(t *testing.T) {
	in := "[remote \"origin\"]\n\turl = https://user:tok3n@example.com/r.git\n[core]\n\tfsmonitor = x\n"
	out, removed, err := Sanitize([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range removed {
		got[r.Key] = r.Rewritten
	}
	if len(removed) != 2 || !got["remote.origin.url"] || got["core.fsmonitor"] {
		t.Errorf("removed %+v, want remote.origin.url rewritten and core.fsmonitor removed", removed)
	}
	if !strings.Contains(string(out), "url = https://example.com/r.git") {
		t.Errorf("url not kept:\n%s", out)
	}
}
