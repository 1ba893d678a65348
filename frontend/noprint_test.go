package frontend

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestWorkflowPrintsNothing: the workflow's own code never writes to the process's
// stdout or stderr (fmt.Print*, os.Stdout, os.Stderr, package log): everything it says
// goes through the caller's Progress or Stdio. The check reads the package's non-test
// sources; it fails on a file that does print (see the self-check below).
func TestWorkflowPrintsNothing(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, bad := range printing(f) {
			t.Errorf("%s prints: %s", name, bad)
		}
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", `package x
import ("fmt"; "os"; "log")
func f() { fmt.Println("x"); fmt.Fprintf(os.Stderr, "y"); log.Print("z") }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := printing(f); len(got) != 4 {
		t.Errorf("self-check: found %q, want fmt.Println, os.Stderr, log.Print and the log import", got)
	}
}

// printing lists the selectors of f that print to the process's own streams.
func printing(f *ast.File) []string {
	var out []string
	for _, imp := range f.Imports {
		if imp.Path.Value == `"log"` {
			out = append(out, "import log")
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		pkg, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		switch {
		case pkg.Name == "fmt" && strings.HasPrefix(sel.Sel.Name, "Print"),
			pkg.Name == "os" && (sel.Sel.Name == "Stdout" || sel.Sel.Name == "Stderr"),
			pkg.Name == "log":
			out = append(out, pkg.Name+"."+sel.Sel.Name)
		}
		return true
	})
	return out
}
