package fuzz

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"
)

// fakeGo is a stand-in for go: call n (1-based) behaves as the n-th word of FAKE_PLAN
// and appends its arguments to $FAKE_DIR/args. Outputs follow go test's own.
const fakeGo = `#!/usr/bin/env bash
set -eu
n=$(( $(cat "$FAKE_DIR/calls" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$FAKE_DIR/calls"
echo "$*" >> "$FAKE_DIR/args"
read -r -a plan <<< "$FAKE_PLAN"
mode=${plan[$((n-1))]:-pass}
race='fuzz: elapsed: 5s, execs: 40304 (0/sec), new interesting: 3 (total: 9)
--- FAIL: FuzzA (5.01s)
    context deadline exceeded
FAIL
exit status 1
FAIL	./p	5.020s'
case $mode in
pass) printf 'fuzz: elapsed: 5s, execs: 9000 (1800/sec)\nPASS\nok  \t./p\t5.1s\n'; exit 0 ;;
race) echo "$race"; exit 1 ;;
crash)
  mkdir -p p/testdata/fuzz/FuzzA && echo 'go test fuzz v1' > p/testdata/fuzz/FuzzA/4e2a
  printf -- '--- FAIL: FuzzA (0.31s)\n    --- FAIL: FuzzA (0.00s)\n        x_test.go:9: boom\n    \n    Failing input written to testdata/fuzz/FuzzA/4e2a\n    To re-run:\n    go test -run=FuzzA/4e2a\nFAIL\nexit status 1\nFAIL\t./p\t0.4s\n'
  exit 1 ;;
racefile) mkdir -p p/testdata/fuzz/FuzzA && echo 'go test fuzz v1' > p/testdata/fuzz/FuzzA/77aa; echo "$race"; exit 1 ;;
racechanged) echo 'go test fuzz v1' > p/testdata/fuzz/FuzzA/seed0; echo "$race"; exit 1 ;;
racepanic) echo 'panic: runtime error: index out of range [3] with length 3'; echo "$race"; exit 1 ;;
racefatal) echo 'fatal error: concurrent map writes'; echo "$race"; exit 1 ;;
raceseed) printf -- '--- FAIL: FuzzA/seed#1 (0.00s)\n    x_test.go:9: bad seed\n'; echo "$race"; exit 1 ;;
racemsg) echo "$race" | sed 's/^    context deadline exceeded$/    context deadline exceeded\n    x_test.go:12: also this/'; exit 1 ;;
racetarget) echo "$race" | sed 's/    context deadline exceeded/    x_test.go:3: dial: context deadline exceeded (took 5s)/'; exit 1 ;;
fail) printf -- '--- FAIL: FuzzA (0.10s)\n    x_test.go:5: bad\nFAIL\nexit status 1\nFAIL\t./p\t0.1s\n'; exit 1 ;;
build) printf '# ./p\np/x_test.go:3:1: syntax error\nFAIL\t./p [build failed]\n'; exit 1 ;;
esac
`

// fakeRepo makes a git repository with fuzz/run.sh (this package's) and a package p with
// one target FuzzA and one committed corpus file (seed0), and a directory holding fakeGo
// as "go". It returns both.
func fakeRepo(t *testing.T) (repo, bin string) {
	git := testenv.RequireCommand(t, "git")
	testenv.RequireCommand(t, "bash")
	repo, bin = t.TempDir(), t.TempDir()
	script, err := os.ReadFile("run.sh")
	if err != nil {
		t.Fatal(err)
	}
	for p, b := range map[string]string{
		"fuzz/run.sh":                 string(script),
		"p/x_test.go":                 "package p\n\nimport \"testing\"\n\nfunc FuzzA(f *testing.F) {}\n",
		"go.mod":                      "module example.test/fake\n\ngo 1.22\n",
		"docs/note.md":                "not a test\n",
		"p/testdata/fuzz/FuzzA/seed0": "go test fuzz v1\nstring(\"a\")\n",
	} {
		os.MkdirAll(filepath.Join(repo, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(repo, p), []byte(b), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}} {
		cmd := exec.Command(git, append([]string{"-C", repo}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return repo, bin
}

// runScript runs repo's fuzz/run.sh with bin first on PATH and env added; it returns the
// combined output and whether the script succeeded.
func runScript(t *testing.T, repo, bin string, env ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(repo, "fuzz/run.sh"))
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// TestRunDecisions: the coordinator race alone is run again once and then passes; a
// second race, and every real failure (a written or rewritten input, a panic, a runtime
// fatal error, another failed test, another message, a build failure), fails the stage
// at once.
func TestRunDecisions(t *testing.T) {
	for _, tc := range []struct {
		plan  string // fake go behaviour per call
		ok    bool   // run.sh succeeds
		calls int    // go invocations
	}{
		{"pass", true, 1},
		{"race pass", true, 2},
		{"race race", false, 2},
		{"race crash", false, 2},
		{"crash pass", false, 1},
		{"racefile pass", false, 1},
		{"racechanged pass", false, 1},
		{"racepanic pass", false, 1},
		{"racefatal pass", false, 1},
		{"raceseed pass", false, 1},
		{"racemsg pass", false, 1},
		{"racetarget pass", false, 1},
		{"fail pass", false, 1},
		{"build pass", false, 1},
	} {
		t.Run(strings.ReplaceAll(tc.plan, " ", "_"), func(t *testing.T) {
			repo, bin := fakeRepo(t)
			state := t.TempDir()
			out, ok := runScript(t, repo, bin, "FUZZTIME=5s", "FAKE_DIR="+state, "FAKE_PLAN="+tc.plan)
			calls, _ := os.ReadFile(filepath.Join(state, "calls"))
			if ok != tc.ok || strings.TrimSpace(string(calls)) != strconv.Itoa(tc.calls) {
				t.Fatalf("plan %q: ok=%v calls=%q, want ok=%v calls=%d\n%s", tc.plan, ok, calls, tc.ok, tc.calls, out)
			}
			if retried := strings.Contains(out, "running it once more"); retried != (tc.calls == 2) {
				t.Errorf("plan %q: retry message %v\n%s", tc.plan, retried, out)
			}
			if tc.ok && !strings.Contains(out, "fuzz: 1 targets run") {
				t.Errorf("plan %q: no summary\n%s", tc.plan, out)
			}
		})
	}
}

// TestRunFuzztime: without FUZZTIME a target runs for the default execution count (no
// deadline, so no coordinator race); FUZZTIME reaches go test as -fuzztime, a duration or
// an execution count as given.
func TestRunFuzztime(t *testing.T) {
	for env, want := range map[string]string{"": "-fuzztime 10000x", "FUZZTIME=7m": "-fuzztime 7m", "FUZZTIME=200000x": "-fuzztime 200000x"} {
		repo, bin := fakeRepo(t)
		state := t.TempDir()
		vars := []string{"FAKE_DIR=" + state, "FAKE_PLAN=pass"}
		if env != "" {
			vars = append(vars, env)
		}
		out, ok := runScript(t, repo, bin, vars...)
		args, _ := os.ReadFile(filepath.Join(state, "args"))
		if !ok || !strings.Contains(string(args), "test -run ^$ -fuzz ^FuzzA$ "+want+" ./p") {
			t.Errorf("%q: ok=%v args %q, want %q\n%s", env, ok, args, want, out)
		}
	}
}

// TestRunRealCrash runs run.sh with the real go on a target that fails for most inputs:
// go writes the input under testdata/fuzz and the stage fails, once.
func TestRunRealCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and fuzzes a package with the real go")
	}
	repo, _ := fakeRepo(t)
	target := "package p\n\nimport \"testing\"\n\n" +
		"func FuzzA(f *testing.F) {\n\tf.Add(\"a\")\n\tf.Fuzz(func(t *testing.T, s string) {\n\t\tif len(s) > 1 {\n\t\t\tt.Fatal(\"boom\")\n\t\t}\n\t})\n}\n"
	if err := os.WriteFile(filepath.Join(repo, "p/x_test.go"), []byte(target), 0o644); err != nil {
		t.Fatal(err)
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin")
	out, ok := runScript(t, repo, goBin, "FUZZTIME=5m", "GOFLAGS=", "GOWORK=off")
	written, _ := filepath.Glob(filepath.Join(repo, "p/testdata/fuzz/FuzzA/*"))
	if ok || len(written) != 2 || strings.Contains(out, "running it once more") || !strings.Contains(out, "Failing input written to") {
		t.Fatalf("ok=%v written=%v\n%s", ok, written, out)
	}
}
