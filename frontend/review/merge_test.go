package review

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"
)

func TestMerge3(t *testing.T) {
	base := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"
	cases := []struct {
		name, mine, theirs, want string
		conflicts                int
	}{
		{"only theirs", base, strings.Replace(base, "3\n", "three\n", 1), strings.Replace(base, "3\n", "three\n", 1), 0},
		{"only mine", strings.Replace(base, "3\n", "three\n", 1), base, strings.Replace(base, "3\n", "three\n", 1), 0},
		{"both same", strings.Replace(base, "3\n", "III\n", 1), strings.Replace(base, "3\n", "III\n", 1), strings.Replace(base, "3\n", "III\n", 1), 0},
		{"disjoint",
			strings.Replace(base, "2\n", "two\n", 1),
			strings.Replace(base, "9\n", "nine\n", 1),
			strings.Replace(strings.Replace(base, "2\n", "two\n", 1), "9\n", "nine\n", 1), 0},
		{"disjoint insert and delete",
			strings.Replace(base, "1\n", "0\n1\n", 1),
			strings.Replace(base, "8\n", "", 1),
			"0\n" + strings.Replace(base, "8\n", "", 1), 0},
		{"same line differently",
			strings.Replace(base, "5\n", "five\n", 1),
			strings.Replace(base, "5\n", "FIVE\n", 1),
			"1\n2\n3\n4\n" + MarkerMine + "\nfive\n" + MarkerBase + "\n5\n" + MarkerSep + "\nFIVE\n" + MarkerTheirs + "\n6\n7\n8\n9\n10\n", 1},
		{"adjacent lines conflict",
			strings.Replace(base, "5\n", "five\n", 1),
			strings.Replace(base, "6\n", "six\n", 1),
			"", 1},
		{"no final newline", "a\nb\nc", "a\nB\nc", "a\nB\nc", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := base
			if c.name == "no final newline" {
				b = "a\nb\nc"
			}
			got, n := Merge3(b, c.mine, c.theirs)
			if n != c.conflicts {
				t.Fatalf("conflicts = %d, want %d; merged:\n%s", n, c.conflicts, got)
			}
			if c.want != "" && got != c.want {
				t.Fatalf("merged:\n%q\nwant\n%q", got, c.want)
			}
			if n > 0 && (!strings.Contains(got, MarkerMine) || !strings.Contains(got, MarkerTheirs)) {
				t.Fatalf("conflict without markers:\n%s", got)
			}
		})
	}
}

// TestMerge3AgreesWithGit cross-checks clean merges against git merge-file (Debian's git,
// installed by scripts/deps.sh): where git merges cleanly and Merge3 does too, the results
// are identical; where git reports a conflict, Merge3 does as well.
func TestMerge3AgreesWithGit(t *testing.T) {
	git := testenv.RequireCommand(t, "git")
	base := "package main\n\nimport \"fmt\"\n\nfunc a() {\n\tfmt.Println(1)\n}\n\nfunc b() {\n\tfmt.Println(2)\n}\n\nfunc c() {\n\tfmt.Println(3)\n}\n"
	cases := [][2]string{
		{strings.Replace(base, "(1)", "(11)", 1), strings.Replace(base, "(3)", "(33)", 1)},
		{strings.Replace(base, "(2)", "(22)", 1), strings.Replace(base, "(2)", "(23)", 1)},
		{strings.Replace(base, "func a", "// a does 1\nfunc a", 1), strings.Replace(base, "func c() {\n\tfmt.Println(3)\n}\n", "", 1)},
		{base + "// end\n", "// start\n" + base},
		{strings.ReplaceAll(base, "\n", "\r\n"), strings.ReplaceAll(base, "\n", "\r\n")},
	}
	dir := t.TempDir()
	for i, c := range cases {
		paths := [3]string{}
		for j, s := range []string{c[0], base, c[1]} {
			paths[j] = filepath.Join(dir, []string{"mine", "base", "theirs"}[j])
			if err := os.WriteFile(paths[j], []byte(s), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		out, err := exec.Command(git, "merge-file", "-p", paths[0], paths[1], paths[2]).Output()
		gitConflicts := 0
		if ee, ok := err.(*exec.ExitError); ok {
			gitConflicts = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		got, n := Merge3(base, c[0], c[1])
		if (n > 0) != (gitConflicts > 0) {
			t.Errorf("case %d: Merge3 conflicts %d, git merge-file %d:\n%s", i, n, gitConflicts, got)
			continue
		}
		if n == 0 && got != string(out) {
			t.Errorf("case %d: Merge3\n%q\ngit merge-file\n%q", i, got, out)
		}
	}
}

func FuzzMerge3(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nB\nc\n", "a\nb\nC\n")
	f.Add("a\nb", "x\na\nb", "a\nb\ny")
	f.Fuzz(func(t *testing.T, base, mine, theirs string) {
		if len(base)+len(mine)+len(theirs) > 6000 {
			return
		}
		if got, n := Merge3(base, base, theirs); n != 0 || got != theirs {
			t.Fatalf("Merge3(b, b, t) = %q, %d; want t", got, n)
		}
		if got, n := Merge3(base, mine, base); n != 0 || got != mine {
			t.Fatalf("Merge3(b, m, b) = %q, %d; want m", got, n)
		}
		if got, n := Merge3(base, mine, mine); n != 0 || got != mine {
			t.Fatalf("Merge3(b, m, m) = %q, %d; want m", got, n)
		}
		got, n := Merge3(base, mine, theirs)
		if n == 0 && mine != base && theirs != base && got == base && mine != theirs {
			t.Fatalf("clean merge lost both sides: %q", got)
		}
		if n > 0 && !strings.Contains(got, MarkerSep) {
			t.Fatalf("%d conflicts but no markers: %q", n, got)
		}
	})
}
