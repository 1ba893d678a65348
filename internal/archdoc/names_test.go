package archdoc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goName is a backticked token of docs/ARCHITECTURE.md that names Go code: identifiers
// joined by dots (`runVM`, `api.MaxFrame`, `Server.Serve`, `helper.Table.Create`),
// optionally called (`api.SocketPath()`) or a prefix (`api.Call*`).
var goName = regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)*)(\\(\\)|\\*)?`")

// declIndex holds the names the module's non-test files declare: per package (by last
// path element) and over all packages, each top-level func, type, const and var as
// "Name" and each method as "Type.Method".
type declIndex struct {
	byPkg map[string]map[string]bool
	all   map[string]bool
}

func (ix *declIndex) add(pkg, name string) {
	if ix.byPkg[pkg] == nil {
		ix.byPkg[pkg] = map[string]bool{}
	}
	ix.byPkg[pkg][name], ix.all[name] = true, true
}

// has reports whether names (a name split at its dots) resolve: "x" anywhere; "a.b" as b
// in package a or as method a.b; "a.b.c" as method b.c in package a. With prefix set,
// the last part only has to begin a declared name.
func (ix *declIndex) has(parts []string, prefix bool) bool {
	match := func(set map[string]bool, name string) bool {
		if !prefix {
			return set[name]
		}
		for n := range set {
			if strings.HasPrefix(n, name) {
				return true
			}
		}
		return false
	}
	switch len(parts) {
	case 1:
		return match(ix.all, parts[0])
	case 2:
		return match(ix.byPkg[parts[0]], parts[1]) || match(ix.all, parts[0]+"."+parts[1])
	case 3:
		return match(ix.byPkg[parts[0]], parts[1]+"."+parts[2])
	}
	return false
}

func indexDecls(t *testing.T, root string) *declIndex {
	t.Helper()
	ix := &declIndex{byPkg: map[string]map[string]bool{}, all: map[string]bool{}}
	for _, p := range loadPackages(t, root) {
		pkg := filepath.Base(p.rel)
		dir := filepath.Join(root, filepath.FromSlash(p.rel))
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parse %s: %v", f, err)
			}
			for _, d := range af.Decls {
				addDecl(ix, pkg, d)
			}
		}
	}
	return ix
}

func addDecl(ix *declIndex, pkg string, d ast.Decl) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Recv == nil || len(d.Recv.List) == 0 {
			ix.add(pkg, d.Name.Name)
			return
		}
		typ := d.Recv.List[0].Type
		if s, ok := typ.(*ast.StarExpr); ok {
			typ = s.X
		}
		switch x := typ.(type) {
		case *ast.IndexExpr:
			typ = x.X
		case *ast.IndexListExpr:
			typ = x.X
		}
		if id, ok := typ.(*ast.Ident); ok {
			ix.add(pkg, id.Name+"."+d.Name.Name)
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				ix.add(pkg, s.Name.Name)
			case *ast.ValueSpec:
				for _, n := range s.Names {
					ix.add(pkg, n.Name)
				}
			}
		}
	}
}

// TestArchitectureNamesExist fails when docs/ARCHITECTURE.md names Go code that no
// longer exists: every backticked identifier with an upper-case letter (lower-case words
// such as `brood` or `hello` are commands and calls, and all-caps ones such as
// `O_NOFOLLOW` are the kernel's) must be declared in a non-test file of the module.
func TestArchitectureNamesExist(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, archDoc))
	if err != nil {
		t.Fatal(err)
	}
	ix := indexDecls(t, root)
	checked := 0
	for i, line := range strings.Split(string(doc), "\n") {
		for _, m := range goName.FindAllStringSubmatch(line, -1) {
			name := m[1]
			if strings.ToLower(name) == name || strings.ToUpper(name) == name {
				continue
			}
			checked++
			if !ix.has(strings.Split(name, "."), m[2] == "*") {
				t.Errorf("%s:%d: `%s` names no declaration in the module (renamed or removed?)", archDoc, i+1, name)
			}
		}
	}
	if checked == 0 {
		t.Fatalf("%s: no Go names found; the pattern no longer matches the document", archDoc)
	}
}

// TestDeclIndexResolves keeps the resolver honest on names that exist and names that
// do not.
func TestDeclIndexResolves(t *testing.T) {
	ix := indexDecls(t, repoRoot(t))
	for _, name := range []string{"runVM", "api.MaxFrame", "Server.Serve", "helper.Table.Create", "api.Call"} {
		if !ix.has(strings.Split(name, "."), name == "api.Call") {
			t.Errorf("%s: not found, but it is declared", name)
		}
	}
	for _, name := range []string{"runVMX", "api.NoSuchThing", "Server.NoSuchMethod", "helper.Table.NoSuch", "nosuchpkg.Run"} {
		if ix.has(strings.Split(name, "."), false) {
			t.Errorf("%s: found, but nothing declares it", name)
		}
	}
}
