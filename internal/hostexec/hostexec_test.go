package hostexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeSelf is the file name the Self row's fake runs as.
const fakeSelf = "broodd-helper-fake"

// fakePager is the file name the pager row's fake runs as.
const fakePager = "pager-fake"

// TestMain turns this test binary into the fake of every listed program when it is run
// under that program's name: it writes its working directory, standard input and
// environment to the file named by its last argument.
func TestMain(m *testing.M) {
	name := filepath.Base(os.Args[0])
	if _, err := lookup(name); err == nil || name == fakeSelf || name == fakePager {
		dump(os.Args[len(os.Args)-1])
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func dump(out string) {
	wd, _ := os.Getwd()
	stdin, _ := os.Readlink("/proc/self/fd/0")
	lines := append([]string{"cwd=" + wd, "stdin=" + stdin}, os.Environ()...)
	os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// TestProgramsDirEnv runs every row of programs (the fakes above on a temporary search
// path) from inside a directory standing for a workspace, with an environment full of
// variables that make tools read other configuration or load other code: each program
// starts in Dir with /dev/null as input and exactly PATH=Path, LC_ALL=C and the
// variables its row passes.
func TestProgramsDirEnv(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, ws, outDir := t.TempDir(), t.TempDir(), t.TempDir()
	for _, p := range programs {
		name := p.name
		switch name {
		case selfName:
			name = fakeSelf
		case pagerName:
			name = fakePager
		}
		if err := os.Symlink(exe, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	old := searchPath
	searchPath = bin
	t.Cleanup(func() { searchPath = old })
	t.Chdir(ws)
	hostile := map[string]string{
		"APT_CONFIG": ws + "/apt.conf", "GIT_DIR": ws, "GIT_CONFIG_GLOBAL": ws + "/gitconfig",
		"PYTHONPATH": ws, "PYTHONSTARTUP": ws + "/x.py", "NPM_CONFIG_REGISTRY": "https://registry.attacker.example/",
		"npm_config_registry": "https://registry.attacker.example/", "GOFLAGS": "-modfile=" + ws + "/go.mod",
		"LD_LIBRARY_PATH": ws, "BASH_ENV": ws + "/rc", "ENV": ws + "/rc", "HOME": ws, "PATH": ws + "/bin:" + os.Getenv("PATH"),
		"TMPDIR": t.TempDir(), "http_proxy": "http://proxy.corp.test:3128", "HTTPS_PROXY": "http://proxy.corp.test:3128",
	}
	for k, v := range hostile {
		t.Setenv(k, v)
	}
	for _, p := range programs {
		out := filepath.Join(outDir, strings.Trim(p.name, "()"))
		var cmd *Cmd
		switch {
		case p.name == selfName:
			cmd = Self(filepath.Join(bin, fakeSelf), "vm-spawn", out)
		case p.name == pagerName:
			// The developer's $PAGER, run by /bin/sh -c; LESS is unset, so LESS=FRX.
			cmd = Pager("exec " + filepath.Join(bin, fakePager) + " " + out)
		default:
			cmd, err = Command(context.Background(), p.name, out)
		}
		if err != nil {
			t.Fatalf("Command(%s): %v", p.name, err)
		}
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("run %s: %v\n%s", p.name, err, b)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatalf("%s did not run: %v", p.name, err)
		}
		got := strings.Split(strings.TrimSpace(string(data)), "\n")
		want := []string{"cwd=" + Dir, "stdin=/dev/null", "PATH=" + Path, "LC_ALL=C"}
		if p.name == pagerName {
			want = append(want, "LESS=FRX", "PWD="+Dir) // sh exports PWD
		}
		for _, k := range p.pass {
			if v, ok := os.LookupEnv(k); ok {
				want = append(want, k+"="+v)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s ran with\n%s\nwant\n%s", p.name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// TestUnlisted: a program that is not a row is refused, and so is a relative path;
// LookPath ignores the caller's PATH.
func TestUnlisted(t *testing.T) {
	for _, name := range []string{"git", "sh", "python3", "npm", selfName, "./xz"} {
		if _, err := Command(context.Background(), name); !errors.Is(err, ErrUnlisted) {
			t.Errorf("Command(%q) = %v, want ErrUnlisted", name, err)
		}
	}
	if _, err := CommandPath(context.Background(), "xz", "bin/xz"); err == nil {
		t.Error("CommandPath accepted a relative path")
	}
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "xz"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	if p, err := LookPath("xz"); err == nil && filepath.Dir(p) == bin {
		t.Errorf("LookPath found xz on the caller's PATH: %s", p)
	}
}
