package hostexec

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// exempt are the package directories (relative to the module root) that may start
// processes without this package, each with why.
var exempt = map[string]string{
	// This package: the one place host programs are run.
	"internal/hostexec": "the host exec contract itself",
	// brood-guest's library: runs inside the VM as its init and SSH server, never on the host.
	"sandbox/guest": "runs inside the VM",
	// The package builder (a main package, so nothing links it): scripts/package.sh runs
	// it on a source checkout at build time for go build, git describe and the SELinux
	// policy Makefile; it is in no installed binary and never runs in a workspace.
	"packaging": "build-time package builder (package main)",
	// Test helpers, linked only by _test.go files: go build of the guest binary, tool
	// lookups for skipping.
	"sandbox/vmtest":   "test helper (builds brood-guest for VM tests)",
	"internal/testenv": "test helper (looks commands up to skip tests)",
}

// processStarters are the functions besides os/exec that start a program, by package
// import path.
var processStarters = map[string][]string{
	"os":                    {"StartProcess"},
	"syscall":               {"ForkExec", "Exec", "StartProcess"},
	"golang.org/x/sys/unix": {"Exec"},
}

// moduleRoot is the directory holding go.mod above the current one.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// processStarts returns "file: what" for every non-test Go file under root, outside the
// exempt directories, that imports os/exec or calls a processStarters function.
func processStarts(t *testing.T, root string, exempt map[string]string) []string {
	t.Helper()
	var found []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if _, ok := exempt[rel]; ok || (rel != "." && strings.HasPrefix(d.Name(), ".")) || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		names := map[string]string{} // local name -> import path
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == "os/exec" {
				found = append(found, rel+": imports os/exec")
			}
			local := filepath.Base(path)
			if imp.Name != nil {
				local = imp.Name.Name
			}
			names[local] = path
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && slices.Contains(processStarters[names[x.Name]], sel.Sel.Name) {
				found = append(found, rel+": calls "+names[x.Name]+"."+sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestOnlyHostexecStartsPrograms parses every non-test Go file of the module: outside the
// exempt packages nothing imports os/exec or calls os.StartProcess, syscall.ForkExec,
// syscall.Exec or unix.Exec, so every host program goes through this package's table.
func TestOnlyHostexecStartsPrograms(t *testing.T) {
	root := moduleRoot(t)
	if bad := processStarts(t, root, exempt); len(bad) > 0 {
		t.Errorf("programs started outside internal/hostexec:\n%s", strings.Join(bad, "\n"))
	}
	// The check can fail: without the exemptions it finds this package and the guest.
	all := strings.Join(processStarts(t, root, nil), "\n")
	for _, want := range []string{"internal/hostexec/hostexec.go: imports os/exec", "sandbox/guest/ssh.go: imports os/exec"} {
		if !strings.Contains(all, want) {
			t.Errorf("unexempted scan lacks %q:\n%s", want, all)
		}
	}
}
