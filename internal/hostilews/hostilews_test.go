package hostilews

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"
)

// TestMembersFire: the planted workspace really is hostile: python3 -c run in it imports
// its pip package, and a tool looked up on a PATH holding its bin directory is its own, so
// a test that finds no marker after running brood's code proves something.
func TestMembersFire(t *testing.T) {
	testenv.RequireCommand(t, "python3")
	ws, marks := t.TempDir(), t.TempDir()
	Plant(t, ws, marks)
	py := exec.Command("python3", "-c", "import pip")
	py.Dir = ws
	if out, err := py.CombinedOutput(); err != nil {
		t.Fatalf("python3 -c 'import pip' in the workspace: %v\n%s", err, out)
	}
	sh := exec.Command("sh", "-c", "npm config get registry; go env GOPROXY; pip3 config list")
	sh.Dir = ws
	sh.Env = []string{"PATH=" + strings.Join(PathDirs(ws), ":") + ":/usr/bin:/bin"}
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("tools on the hostile PATH: %v\n%s", err, out)
	}
	got := strings.Join(Markers(t, marks), "\n")
	for _, want := range []string{"pip ran", "bin/npm config get registry", "bin/go env GOPROXY", "bin/pip3 config list"} {
		if !strings.Contains(got, want) {
			t.Errorf("marker %q missing; markers:\n%s", want, got)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, ".npmrc")); err != nil {
		t.Error(err)
	}
}
