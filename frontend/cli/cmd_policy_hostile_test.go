package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/hostilews"
)

// policyShowIn runs the real `brood policy show --egress standard` (the default
// --workspace ".") in a re-executed test binary whose current directory is ws, with the
// real discovery, HOME=home and a PATH that starts with the workspace's bin directories.
func policyShowIn(t *testing.T, ws, home string, extraEnv ...string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestPolicyShowChild$")
	cmd.Dir = ws
	path := strings.Join(append(hostilews.PathDirs(ws), os.Getenv("PATH")), ":")
	cmd.Env = append([]string{"BROOD_TEST_POLICY_CHILD=1", "HOME=" + home, "PATH=" + path,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "BROOD_TEST_SYSTEM_POLICY=" + filepath.Join(t.TempDir(), "none.toml"),
		api.SocketEnv + "=" + filepath.Join(t.TempDir(), "no-helper.sock")}, extraEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("policy show in %s: %v\n%s", ws, err, out)
	}
	return string(out)
}

// TestPolicyShowChild is the child of policyShowIn (skipped otherwise).
func TestPolicyShowChild(t *testing.T) {
	if os.Getenv("BROOD_TEST_POLICY_CHILD") != "1" {
		t.Skip("runs only as the child of policyShowIn")
	}
	var out bytes.Buffer
	root := NewRootCommand()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"policy", "show", "--egress", "standard", "--system-policy", os.Getenv("BROOD_TEST_SYSTEM_POLICY")})
	err := root.Execute()
	os.Stdout.Write(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
}

// TestPolicyShowHostileWorkspace: `brood policy show` run inside a workspace planted with
// every hostilews.Members entry runs none of it and allows no host the workspace names,
// while the user's own ~/.npmrc and environment (outside the workspace) still count.
func TestPolicyShowHostileWorkspace(t *testing.T) {
	ws, home, marks := t.TempDir(), t.TempDir(), t.TempDir()
	hostilews.Plant(t, ws, marks)
	writeFile(t, home, ".npmrc", "registry=https://npm.corp.test/\n")
	out := policyShowIn(t, ws, home, "GOPROXY=https://goproxy.corp.test", "VIRTUAL_ENV="+filepath.Join(ws, ".venv"))
	if m := hostilews.Markers(t, marks); len(m) != 0 {
		t.Errorf("planted code ran: %v", m)
	}
	if strings.Contains(out, hostilews.AttackerHost) {
		t.Errorf("policy show names the workspace's registry:\n%s", out)
	}
	for _, want := range []string{"npm.corp.test (443/tcp)\t(discovered (npm: " + filepath.Join(home, ".npmrc") + "))",
		"goproxy.corp.test (443/tcp)\t(discovered (go: $GOPROXY))"} {
		if !strings.Contains(out, want) {
			t.Errorf("policy show lacks %q:\n%s", want, out)
		}
	}
}

// TestPolicyShowHomeInWorkspace: when the workspace is the home directory, each of the
// user's configuration files there is either used and labelled workspace content (review
// holds every change to it: diff.PathRisk flags it) or listed as not read (a change to it
// could be applied unnamed); a file outside stays the plain user layer. Planted code still
// never runs.
func TestPolicyShowHomeInWorkspace(t *testing.T) {
	ws, marks := t.TempDir(), t.TempDir()
	hostilews.Plant(t, ws, marks)
	files := map[string]string{
		".npmrc":               "registry=https://npm.home.test/\n",
		".config/pip/pip.conf": "[global]\nindex-url = https://pip.home.test/simple\n",
		".yarnrc.yml":          "npmRegistryServer: https://yarn.home.test\n",
		".config/go/env":       "GOPROXY=https://go.home.test\n",
		".config/pnpm/rc":      "registry=https://pnpm.home.test/\n",
	}
	for rel, content := range files {
		p := filepath.Join(ws, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		writeFile(t, filepath.Dir(p), filepath.Base(p), content)
	}
	outside := t.TempDir()
	writeFile(t, outside, "pip.ini", "[global]\nextra-index-url = https://pip.outside.test/simple\n")
	out := policyShowIn(t, ws, ws, "PIP_CONFIG_FILE="+filepath.Join(outside, "pip.ini"))
	if m := hostilews.Markers(t, marks); len(m) != 0 {
		t.Errorf("planted code ran: %v", m)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "allow\t") && strings.Contains(line, ws+"/") && !strings.Contains(line, "(workspace content; review holds changes to it: ") {
			t.Errorf("a workspace file counts as the user layer unlabelled: %s", line)
		}
	}
	for rel := range files {
		p := filepath.Join(ws, rel)
		kept := strings.Contains(out, p+" (workspace content; review holds changes to it: ")
		notRead := strings.Contains(out, "not read\t") && strings.Contains(out, p+"\t(not read: it is workspace content")
		if risk := diff.PathRisk(rel); (risk != "") != kept || kept == notRead {
			t.Errorf("%s (PathRisk %q): kept %v, listed as not read %v:\n%s", rel, risk, kept, notRead, out)
		}
	}
	if !strings.Contains(out, "pip.outside.test (443/tcp)\t(discovered (pip: "+filepath.Join(outside, "pip.ini")+"))") {
		t.Errorf("a config file outside the workspace was not used:\n%s", out)
	}
}
