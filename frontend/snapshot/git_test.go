package snapshot

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/frontend/gitconfig"
	"brood.dev/brood/internal/testenv"
)

// TestRealGitRepository snapshots a repository made by git itself, with a token in the
// remote URL, a credential helper and an fsmonitor hook, and checks that git works in S,
// sees a clean tree, and gets the remote without the token.
func TestRealGitRepository(t *testing.T) {
	gitBin := testenv.RequireCommand(t, "git")
	home := t.TempDir()
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(gitBin, append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@x", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@x")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	w := t.TempDir()
	git(w, "init", "-q", "-b", "main")
	write(t, filepath.Join(w, "main.go"), "package main\n", 0o644)
	git(w, "add", "main.go")
	git(w, "commit", "-q", "-m", "first")
	git(w, "remote", "add", "origin", "https://dev:"+canary+"@github.com/o/r.git")
	git(w, "config", "credential.helper", "store --file /tmp/"+canary)
	git(w, "config", "core.fsmonitor", "/tmp/"+canary+"-hook")
	git(w, "config", "http.https://github.com/.extraHeader", "Authorization: Bearer "+canary)

	s, m, rep := take(t, w, Options{})
	grepTree(t, s, canary)
	if got := git(s, "remote", "get-url", "origin"); got != "https://github.com/o/r.git" {
		t.Errorf("remote in S: %q", got)
	}
	if got := git(s, "status", "--porcelain"); got != "" {
		t.Errorf("git status in S: %q", got)
	}
	if got := git(s, "log", "--format=%s"); got != "first" {
		t.Errorf("git log in S: %q", got)
	}
	if len(rep.Sanitized) != 1 || len(rep.Sanitized[0].Removed) != 4 {
		t.Errorf("sanitized: %+v", rep.Sanitized)
	}
	if e := m.Lookup(".git/config"); e == nil || !e.Sanitized {
		t.Errorf(".git/config entry: %+v", e)
	}
}

// gitRunner runs git with an isolated HOME and no system config; fail=false returns the
// output and whether git succeeded instead of failing t.
func gitRunner(t *testing.T) func(fail bool, dir string, args ...string) (string, bool) {
	gitBin := testenv.RequireCommand(t, "git")
	home := t.TempDir()
	return func(fail bool, dir string, args ...string) (string, bool) {
		t.Helper()
		cmd := exec.Command(gitBin, append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		if err != nil && fail {
			t.Fatalf("git %q: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out)), err == nil
	}
}

// remoteParamNames are credential query parameters from the ecosystem (GitLab, OAuth 2.0
// and 1.0a, OpenID Connect, Azure SAS, S3 and GCS presigned URLs, API keys).
var remoteParamNames = []string{
	"private_token", "access_token", "token", "oauth_token", "id_token", "refresh_token",
	"job_token", "X-Amz-Security-Token", "PRIVATE-TOKEN", "client_secret", "secret",
	"password", "passwd", "X-Amz-Signature", "Signature", "X-Goog-Signature",
	"oauth_signature", "X-Amz-Credential", "X-Goog-Credential", "api_key", "apikey",
	"x-api-key", "AWSAccessKeyId", "OSSAccessKeyId", "pass", "pwd", "auth", "authorization",
	"key", "sig", "jwt", "bearer", "GoogleAccessId", "private%5Ftoken", "%2570rivate_token",
}

// TestRealGitRemoteURLs: a repository configured by git itself with a credential
// parameter in every URL-valued key and for every parameter name, and remotes with
// control characters, no host or a '-' host: S's config parses for git, holds no
// secret, keeps each URL minus its secret, and the report names each key.
func TestRealGitRemoteURLs(t *testing.T) {
	git := gitRunner(t)
	w := t.TempDir()
	git(true, w, "init", "-q", "-b", "main")
	const base = "https://git.example.test/o/r.git?ref=main"
	secret := "&%s=" + canary
	for i, name := range remoteParamNames {
		git(true, w, "config", fmt.Sprintf("remote.p%d.url", i), base+fmt.Sprintf(secret, name))
	}
	// Every URL-valued variable (a subsection name or an insteadOf carrying a secret
	// removes its whole section instead: see gitconfig).
	keys := []string{"remote.o.pushurl", "remote.o.proxy", "remote.o.lfsurl", "remote.o.lfspushurl",
		"remote.pushDefault", "branch.main.remote", "branch.main.pushRemote", "submodule.s.url",
		"lfs.url", "lfs.pushurl", "http.proxy", "http.https://git.example.test/.proxy", "imap.host",
		"svn-remote.s.url", "svn-remote.s.pushurl", "fetch.bundleURI", "bundle.b.uri"}
	for _, k := range keys {
		git(true, w, "config", k, base+fmt.Sprintf(secret, "private_token"))
	}
	sections := []string{"url.https://git.example.test/?token=" + canary + ".insteadOf",
		"http.https://git.example.test/?sig=" + canary + ".sslVerify", "lfs.https://git.example.test/?key=" + canary + ".access"}
	for _, k := range sections {
		git(true, w, "config", k, "true")
	}
	dropped := map[string]string{
		"https://git.example.test/r%0a" + canary:       gitconfig.ReasonURLControl,
		"https://git.example.test/r%0D" + canary:       gitconfig.ReasonURLControl,
		"https://git.example.test/r%00" + canary:       gitconfig.ReasonURLControl,
		"https://git.example.test/r%250a" + canary:     gitconfig.ReasonURLControl,
		"https://git.example.test/r\n" + canary:        gitconfig.ReasonURLControl,
		"https://git.example.test/r\t" + canary:        gitconfig.ReasonURLControl,
		"https:///" + canary:                           gitconfig.ReasonURLNoHost,
		"ssh:///" + canary:                             gitconfig.ReasonURLNoHost,
		"git@:" + canary:                               gitconfig.ReasonURLNoHost,
		"ssh://-oProxyCommand=" + canary + "/r":        gitconfig.ReasonURLDashHost,
		"persistent-https::https://:443/r?x=" + canary: gitconfig.ReasonURLNoHost,
	}
	droppedWhy := map[string]string{} // remote name: reason
	for u, why := range dropped {
		n := fmt.Sprintf("d%d", len(droppedWhy))
		droppedWhy[n] = why
		git(true, w, "config", "remote."+n+".url", u)
		git(true, w, "config", "remote."+n+".fetch", "+refs/heads/*:refs/remotes/"+n+"/*")
	}
	kept := map[string]string{"remote.k1.url": "git@github.com:o/r.git", "remote.k2.url": "file:///srv/r.git",
		"remote.k3.url": "../other.git", "remote.k4.url": "ssh://git@[::1]:2222/r.git"}
	for k, v := range kept {
		git(true, w, "config", k, v)
	}

	s, _, rep := take(t, w, Options{})
	grepTree(t, s, canary)
	cfg := filepath.Join(s, ".git/config")
	if out, ok := git(false, s, "config", "--file", cfg, "--list"); !ok {
		t.Fatalf("git cannot read S/.git/config: %s", out)
	}
	get := func(k string) (string, bool) { return git(false, s, "config", "--file", cfg, "--get", k) }
	for i := range remoteParamNames {
		if got, _ := get(fmt.Sprintf("remote.p%d.url", i)); got != base {
			t.Errorf("remote.p%d.url (%s) in S = %q, want %q", i, remoteParamNames[i], got, base)
		}
	}
	for _, k := range keys {
		if got, _ := get(k); got != base {
			t.Errorf("%s in S = %q, want %q", k, got, base)
		}
	}
	for n := range droppedWhy {
		if got, ok := get("remote." + n + ".url"); ok {
			t.Errorf("remote.%s.url kept in S: %q", n, got)
		}
		if _, ok := get("remote." + n + ".fetch"); !ok {
			t.Errorf("remote.%s.fetch lost: only the URL is removed", n)
		}
	}
	for k, v := range kept {
		if got, _ := get(k); got != v {
			t.Errorf("%s in S = %q, want %q", k, got, v)
		}
	}
	checkURLReport(t, rep, len(remoteParamNames), keys, sections, droppedWhy)
}

// checkURLReport checks the snapshot report of TestRealGitRemoteURLs: one rewritten
// entry per parameter remote and key, one removal per section and dropped remote
// (dropped: remote name to reason), no secret anywhere.
func checkURLReport(t *testing.T, rep *Report, params int, keys, sections []string, dropped map[string]string) {
	t.Helper()
	if len(rep.Sanitized) != 1 {
		t.Fatalf("sanitized %+v", rep.Sanitized)
	}
	got := map[string]gitconfig.Removal{}
	for _, r := range rep.Sanitized[0].Removed {
		if strings.Contains(r.Key, canary) || strings.Contains(r.Reason, canary) {
			t.Errorf("report leaks the secret: %+v", r)
		}
		got[r.Key] = r
	}
	want := map[string]gitconfig.Removal{}
	for i := 0; i < params; i++ {
		k := fmt.Sprintf("remote.p%d.url", i)
		want[k] = gitconfig.Removal{Key: k, Reason: gitconfig.ReasonURLQuery, Rewritten: true}
	}
	for _, k := range keys {
		k = strings.ToLower(k[:strings.IndexByte(k, '.')]) + k[strings.IndexByte(k, '.'):strings.LastIndexByte(k, '.')] + strings.ToLower(k[strings.LastIndexByte(k, '.'):])
		want[k] = gitconfig.Removal{Key: k, Reason: gitconfig.ReasonURLQuery, Rewritten: true}
	}
	for _, k := range sections {
		k = k[:strings.Index(k, "?")+1]
		k = k[:len(k)-1] // the section key, its URL without the secret parameter
		want[k] = gitconfig.Removal{Key: k, Reason: gitconfig.ReasonURLCredentials}
	}
	for n, why := range dropped {
		k := "remote." + n + ".url"
		want[k] = gitconfig.Removal{Key: k, Reason: why}
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("report for %s: %+v, want %+v", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("report has %d keys, want %d: %+v", len(got), len(want), rep.Sanitized[0].Removed)
	}
}
