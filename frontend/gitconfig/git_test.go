package gitconfig

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"
)

// flatten lists c's variables the way `git config --list -z` prints them:
// "section[.subsection].name\nvalue", or just the key for a variable without '='.
func flatten(c *Config) []string {
	var out []string
	for _, s := range c.Sections {
		prefix := s.Name
		if s.HasSub {
			prefix += "." + s.Sub
		}
		for _, v := range s.Vars {
			k := v.Name
			if prefix != "" {
				k = prefix + "." + v.Name
			}
			if !v.NoValue {
				k += "\n" + v.Value
			}
			out = append(out, k)
		}
	}
	return out
}

// gitList runs `git config --file p --list -z` and returns its records, or ok=false when
// git rejects the file.
func gitList(t *testing.T, git, p string) ([]string, bool) {
	t.Helper()
	cmd := exec.Command(git, "config", "--file", p, "--list", "-z")
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		return nil, false
	}
	recs := strings.Split(string(out), "\x00")
	return recs[:len(recs)-1], true
}

// TestParseMatchesGit compares Parse with git's own reader on inputs that exercise the
// syntax, including ones both must reject. (Raw tabs and CRs inside unquoted values are
// left out: git before 2.40 turns them into spaces, later versions keep them, as Parse
// does.)
func TestParseMatchesGit(t *testing.T) {
	git := testenv.RequireCommand(t, "git")
	inputs := []string{
		"[core]\n\tbare = false\n\tfilemode\n",
		"[Core]\n\tBare = TRUE ; comment\n# full line\n\tx = a # b\n",
		"[remote \"Origin \\\"q\\\\\"]\n\turl = https://h/r\n",
		"[Sec.Sub]\n\tk = v\n[sec.A.B]\nk = 1\n",
		"[a] b = c\n[d]e=f\n",
		"[a]\n\tv = \"  quoted  \"  tail  \n",
		"[a]\n\tv = one \\\n  two \\\\ \\\" \\n\\t\\b end\n",
		"[a]\n\tv = \"in \\\"q\\\" # ; x\" y\n",
		"[a]\r\n\tv = crlf\r\n\tw = \"x\ry\"\r\n",
		"[a]\n\tv =\n\tw = \"\"\n\tx = \"\" y\n",
		"[a]\n\tv = last line without newline",
		"[a]\n\tv = cont at end \\",
		"\xef\xbb\xbf[bom]\n\tk = v\n",
		"[a \"\"]\n\tk = empty subsection\n",
		"[a \"x\\ny\"]\n\tk = v\n",
		"[url \"https://u:p@h/\"]\n\tinsteadOf = https://h/\n",
		"[a]\n\tk-1 = dash\n\tK2 = digit\n",
		"; only comments\n# here\n",
		"",
		"k = before any section\n[a]\n\tb = c\n",
		// rejected by both
		"[a\n",
		"[a \"x]\n",
		"[a x]\n",
		"[a \"x\" ]\n",
		"[a]\n\t1k = v\n",
		"[a]\n\tk v\n",
		"[a]\n\tv = \"open\n",
		"[a]\n\tv = bad \\q\n",
		"[a/b]\n",
		"[a]\n\tk_x = v\n",
	}
	dir := t.TempDir()
	for i, in := range inputs {
		p := filepath.Join(dir, "cfg")
		if err := os.WriteFile(p, []byte(in), 0o600); err != nil {
			t.Fatal(err)
		}
		want, gitOK := gitList(t, git, p)
		c, err := Parse([]byte(in))
		if (err == nil) != gitOK {
			t.Errorf("input %d %q: Parse error %v, git accepts: %v", i, in, err, gitOK)
			continue
		}
		if err != nil {
			continue
		}
		if got := flatten(c); !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("input %d %q:\n Parse %q\n git   %q", i, in, got, want)
		}
		// git reads the canonical form the same way.
		os.WriteFile(p, c.Bytes(), 0o600)
		if again, ok := gitList(t, git, p); !ok || !reflect.DeepEqual(again, want) && !(len(again) == 0 && len(want) == 0) {
			t.Errorf("input %d: git reads Bytes() as %q, want %q\n%s", i, again, want, c.Bytes())
		}
	}
}
