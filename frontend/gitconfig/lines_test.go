package gitconfig

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// TestSanitizeLines: every kind of line file keeps its URLs minus their credentials, and
// a URL git connects to that urlProblem refuses goes (the line of a remotes file, the
// whole of a branches file); records keep such URLs, git never connects to them.
func TestSanitizeLines(t *testing.T) {
	const x = "S3cr3tVa1ue"
	rw := func(key, why string) Removal { return Removal{key, why, true} }
	rm := func(key, why string) Removal { return Removal{key, why, false} }
	for _, tc := range []struct {
		name string
		kind LineKind
		in   string
		want string
		rem  []Removal
	}{
		{"remotes userinfo", Remotes,
			"URL: https://u:" + x + "@gitlab.example.test/r.git\nPush: refs/heads/*:refs/heads/*\nPull: refs/heads/main:refs/remotes/old/main\n",
			"URL: https://gitlab.example.test/r.git\nPush: refs/heads/*:refs/heads/*\nPull: refs/heads/main:refs/remotes/old/main\n",
			[]Removal{rw("line 1", ReasonURLCredentials)}},
		{"remotes query and userinfo", Remotes,
			"URL:https://u:" + x + "@h.test/r.git?private_token=" + x + "&ref=main\r\n",
			"URL:https://h.test/r.git?ref=main\r\n",
			[]Removal{rw("line 1", ReasonURLCredentials), rw("line 1", ReasonURLQuery)}},
		{"remotes ssh password", Remotes, "URL: ssh://git:" + x + "@h.test/r.git\n", "URL: ssh://git@h.test/r.git\n",
			[]Removal{rw("line 1", ReasonURLCredentials)}},
		{"remotes second URL", Remotes, "URL: https://h.test/a\nURL: https://h.test/b?sig=" + x,
			"URL: https://h.test/a\nURL: https://h.test/b", []Removal{rw("line 2", ReasonURLQuery)}},
		{"remotes encoded LF", Remotes, "URL: https://h.test/r%0a" + x + "\nPull: a:b\n", "Pull: a:b\n",
			[]Removal{rm("line 1", ReasonURLControl)}},
		{"remotes raw control", Remotes, "Pull: a:b\nURL: https://h.test/\x01" + x + "\n", "Pull: a:b\n",
			[]Removal{rm("line 2", ReasonURLControl)}},
		{"remotes no host", Remotes, "URL:   https:///" + x + "  \n", "", []Removal{rm("line 1", ReasonURLNoHost)}},
		{"remotes scp no host", Remotes, "URL: git@:" + x + "\n", "", []Removal{rm("line 1", ReasonURLNoHost)}},
		{"remotes dash host", Remotes, "URL: ssh://-oProxyCommand=" + x + "/r\n", "",
			[]Removal{rm("line 1", ReasonURLDashHost)}},
		{"remotes other line", Remotes, "# was https://u:" + x + "@h.test/r\n", "# was https://h.test/r\n",
			[]Removal{rw("line 1", ReasonURLCredentials)}},
		{"remotes lower-case prefix is not read", Remotes, "url: https:///x\n", "url: https:///x\n", nil},
		{"branches userinfo", Branches, "https://u:" + x + "@gitlab.example.test/r.git#main\n",
			"https://gitlab.example.test/r.git#main\n", []Removal{rw("line 1", ReasonURLCredentials)}},
		{"branches query before branch", Branches, "https://h.test/r.git?private_token=" + x + "#dev\n",
			"https://h.test/r.git#dev\n", []Removal{rw("line 1", ReasonURLQuery)}},
		{"branches no host", Branches, "https:///" + x + "#main\nhttps://h.test/r\n", "",
			[]Removal{rm("line 1", ReasonURLNoHost)}},
		{"branches control", Branches, "  https://h.test/r%250d" + x + "\n", "", []Removal{rm("line 1", ReasonURLControl)}},
		{"branches later line never read", Branches, "https://h.test/r.git\nhttps:///x\n", "https://h.test/r.git\nhttps:///x\n", nil},
		{"FETCH_HEAD", Record,
			"1111111111111111111111111111111111111111\t\tbranch 'main' of https://h.test/r.git?private_token=" + x + "\n" +
				"2222222222222222222222222222222222222222\tnot-for-merge\tbranch 'dev' of https://h.test/r.git?private_token=" + x + "\n",
			"1111111111111111111111111111111111111111\t\tbranch 'main' of https://h.test/r.git\n" +
				"2222222222222222222222222222222222222222\tnot-for-merge\tbranch 'dev' of https://h.test/r.git\n",
			[]Removal{rw("lines 1, 2", ReasonURLQuery)}},
		// "pull <url>: Fast-forward": the ':' is a URL character, so it goes with the
		// parameter's value.
		{"reflog", Record,
			strings.Repeat("0 1 a <a@x> 1 +0000\tpull https://h.test/r?token="+x+": Fast-forward\n", 5) +
				"0 1 a <a@x> 1 +0000\tclone: from https://u:" + x + "@h.test/r\n",
			strings.Repeat("0 1 a <a@x> 1 +0000\tpull https://h.test/r Fast-forward\n", 5) +
				"0 1 a <a@x> 1 +0000\tclone: from https://h.test/r\n",
			[]Removal{rw("lines 1, 2, 3 and 2 more", ReasonURLQuery), rw("line 6", ReasonURLCredentials)}},
		{"record keeps what it never connects to", Record, "x\tbranch 'a' of https:///r%0a\n",
			"x\tbranch 'a' of https:///r%0a\n", nil},
		{"http-alternates", Record, "https://h.test/objects?X-Amz-Signature=" + x + "&a=1\n",
			"https://h.test/objects?a=1\n", []Removal{rw("line 1", ReasonURLQuery)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, rem := SanitizeLines(tc.kind, []byte(tc.in))
			if string(out) != tc.want {
				t.Errorf("out %q, want %q", out, tc.want)
			}
			if !reflect.DeepEqual(rem, tc.rem) {
				t.Errorf("removed %+v, want %+v", rem, tc.rem)
			}
			if again, rem2 := SanitizeLines(tc.kind, out); !bytes.Equal(again, out) || rem2 != nil {
				t.Errorf("not idempotent: %q, %+v", again, rem2)
			}
		})
	}
}

// BenchmarkSanitizeLines: SanitizeLines on 64 MiB reflogs (the snapshot's largest line
// file), one recording a clone URL with a token in every line, one of commits only, and
// on hostileValues as one line of a remotes file (run with -bench SanitizeLines
// -benchtime 1x).
func BenchmarkSanitizeLines(b *testing.B) {
	line := "0123456789abcdef0123456789abcdef01234567 89abcdef0123456789abcdef0123456789abcdef a <a@x> 1796126429 +0000\tclone: from https://gitlab.example.test/o/r.git?private_token=x\n"
	plain := "0123456789abcdef0123456789abcdef01234567 89abcdef0123456789abcdef0123456789abcdef a <a@x> 1796126429 +0000\tcommit: fix the parser\n"
	inputs := map[string][]byte{
		"64 MiB reflog of clones":  []byte(strings.Repeat(line, (64<<20)/len(line))),
		"64 MiB reflog of commits": []byte(strings.Repeat(plain, (64<<20)/len(plain))),
	}
	for name, v := range hostileValues() {
		inputs[name] = []byte("URL: " + v + "\n")
	}
	for name, in := range inputs {
		b.Run(strings.ReplaceAll(name, " ", "_"), func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for i := 0; i < b.N; i++ {
				SanitizeLines(Remotes, in)
			}
		})
	}
}
