package spawner

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"
)

// allowedImports are exactly the packages spawner's non-test files import. The spawner is
// root outside Landlock: a new import is a change of its contract and of this list.
var allowedImports = []string{
	"encoding/json", "errors", "fmt", "log/slog", "os", "os/user", "path/filepath", "regexp", "slices", "strconv", "strings", "sync", "syscall",
	"golang.org/x/sys/unix",
	"brood.dev/brood/helper/api",        // ParseRights, brood's one SCM_RIGHTS parser
	"brood.dev/brood/internal/hostexec", // Self: the scrubbed re-exec
	"brood.dev/brood/sandbox/store",     // ValidImageName: a build request's name
}

// allowedLinked are the non-standard packages spawner may link at all (go list -deps):
// its own non-standard imports and what they import (api's types name sandbox's enums and
// store's errors).
var allowedLinked = []string{
	"brood.dev/brood/helper/api", "brood.dev/brood/helper/spawner", "brood.dev/brood/internal/hostexec",
	"brood.dev/brood/sandbox", "brood.dev/brood/sandbox/store", "golang.org/x/sys/unix",
}

// goList runs `go list` with args and returns its output's fields.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	goBin := testenv.RequireCommand(t, "go")
	out, err := exec.Command(goBin, append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Fields(string(out))
}

// importProblems compares pkg's direct imports and non-standard linked packages with the
// allow-lists: imports or links not allowed, and allowed imports that are not used (so the
// list stays exact).
func importProblems(t *testing.T, pkg string) []string {
	imports := goList(t, "-f", `{{join .Imports " "}}`, pkg)
	linked := goList(t, "-deps", "-f", `{{if not .Standard}}{{.ImportPath}}{{end}}`, pkg)
	var bad []string
	for _, p := range imports {
		if !slices.Contains(allowedImports, p) {
			bad = append(bad, "imports "+p)
		}
	}
	for _, p := range linked {
		if !slices.Contains(allowedLinked, p) {
			bad = append(bad, "links "+p)
		}
	}
	for _, p := range allowedImports {
		if !slices.Contains(imports, p) {
			bad = append(bad, "allowed but not imported "+p)
		}
	}
	return bad
}

// TestImportAllowList: the spawner imports exactly allowedImports and links nothing
// beyond allowedLinked.
func TestImportAllowList(t *testing.T) {
	if bad := importProblems(t, "brood.dev/brood/helper/spawner"); len(bad) > 0 {
		t.Errorf("package spawner breaks its import allow-list:\n%s", strings.Join(bad, "\n"))
	}
}

// TestImportAllowListCanFail runs the same check on the helper daemon, which imports Landlock
// and the VMM backend: it must report them, or the check above proves nothing.
func TestImportAllowListCanFail(t *testing.T) {
	bad := importProblems(t, "brood.dev/brood/helper")
	joined := strings.Join(bad, "\n")
	for _, want := range []string{"imports github.com/landlock-lsm/go-landlock/landlock", "links brood.dev/brood/sandbox/qemu"} {
		if !strings.Contains(joined, want) {
			t.Errorf("allow-list check on package helper does not report %q; got:\n%s", want, joined)
		}
	}
}
