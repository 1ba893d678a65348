package secrets

import (
	"os/exec"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"
)

// TestGitCredentialHelper: with the variables NewGitToken returns, git itself answers the
// placeholder for the allowed host, and nothing for another host, even when a global
// configuration names a helper of its own.
func TestGitCredentialHelper(t *testing.T) {
	git := testenv.RequireCommand(t, "git")
	token := "ghp_CANARY" + strings.Repeat("G", 30)
	g, err := NewGitToken(token, "test", []string{"github.com"}, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	writeFile(t, home+"/.gitconfig", "[credential]\n\thelper = \"!echo password=FROM-IMAGE-HELPER; :\"\n")
	env := []string{"HOME=" + home, "PATH=/usr/bin:/bin", "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false"}
	for _, kv := range g.Env {
		env = append(env, kv[0]+"="+kv[1])
	}
	fill := func(host string) string {
		cmd := exec.Command(git, "credential", "fill")
		cmd.Env, cmd.Dir = env, home
		cmd.Stdin = strings.NewReader("protocol=https\nhost=" + host + "\n\n")
		out, _ := cmd.Output()
		return string(out)
	}
	if out := fill("github.com"); !strings.Contains(out, "username=x-access-token\n") || !strings.Contains(out, "password="+g.Binding.Placeholder+"\n") || strings.Contains(out, "FROM-IMAGE") {
		t.Fatalf("git credential fill for github.com:\n%s", out)
	}
	if out := fill("gitlab.com"); strings.Contains(out, g.Binding.Placeholder) {
		t.Fatalf("the placeholder was answered for another host:\n%s", out)
	}
}
