package snapshot

import (
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"brood.dev/brood/frontend/gitconfig"
	"brood.dev/brood/internal/testenv"
)

// TestGitFileOf: every gitDirFiles row names its files in every git directory (.git at
// any depth, submodules, worktrees) and nothing outside one; config files keep
// isGitConfig's rules.
func TestGitFileOf(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want gitFileKind
	}{
		{".git/config", configFile},
		{".git/refs/heads/config", notGitFile}, // isGitConfig: a ref
		{".git/svn/.metadata", configFile},
		{".git/modules/sub/svn/.metadata", configFile},
		{".git/remotes/old", remotesFile},
		{".git/modules/sub/remotes/o", remotesFile},
		{"a/b/.git/remotes/x", remotesFile},
		{".git/branches/old", branchesFile},
		{".git/worktrees/wt/branches/x", branchesFile},
		{".git/FETCH_HEAD", recordFile},
		{".git/worktrees/wt/FETCH_HEAD", recordFile},
		{".git/modules/a/b/FETCH_HEAD", recordFile},
		{".git/logs/HEAD", recordFile},
		{".git/logs/refs/remotes/origin/HEAD", recordFile},
		{".git/logs/refs/heads/remotes/x", recordFile}, // a reflog, not a legacy remote
		{".git/worktrees/wt/logs/HEAD", recordFile},
		{".git/modules/sub/logs/refs/heads/main", recordFile},
		{".git/objects/info/http-alternates", recordFile},
		{".git/modules/sub/objects/info/http-alternates", recordFile},
		{".git/modules/logs/remotes/o", remotesFile}, // a submodule named "logs"
		{".git/modules/logs/logs/HEAD", recordFile},
		{".git/MERGE_MSG", recordFile},
		{".git/worktrees/wt/SQUASH_MSG", recordFile},
		{".git/modules/sub/COMMIT_EDITMSG", recordFile},
		// Any ASCII case: the names git opens on a case-insensitive W.
		{".GIT/Remotes/old", remotesFile},
		{".git/BRANCHES/x", branchesFile},
		{".Git/fetch_head", recordFile},
		{".git/LOGS/HEAD", recordFile},
		{".git/Modules/Logs/Remotes/o", remotesFile},
		{".git/CONFIG", configFile},
		{".git/SVN/.METADATA", configFile},
		// Not git-dir files holding URLs.
		{".git/modules/logs/HEAD", notGitFile},
		{".git/logs", notGitFile},
		{".git/remotes", notGitFile},
		{".git/HEAD", notGitFile},
		{".git/objects/info/alternates", notGitFile},
		{".git/info/exclude", notGitFile},
		{".git/packed-refs", notGitFile},
		{"remotes/old", notGitFile},
		{"logs/HEAD", notGitFile},
		{"FETCH_HEAD", notGitFile},
		{"src/.gitx/FETCH_HEAD", notGitFile},
		{".git/FETCH_HEAD.lock", notGitFile},
		{".git/REFS/heads/config", notGitFile},
	} {
		if got := gitFileOf(tc.in); got != tc.want {
			t.Errorf("gitFileOf(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestRealGitLegacyRemotes: a repository cloned and fetched by git from a URL with a
// token in its query (so git itself writes FETCH_HEAD and reflogs with it), with legacy
// remotes/ and branches/ files, their submodule and worktree copies, git-svn metadata
// and http-alternates: S holds no secret in any file, keeps every URL minus its
// secret, git in S still fetches from the legacy remotes, and the report names exactly
// each sanitized file, line and reason.
func TestRealGitLegacyRemotes(t *testing.T) {
	git := gitRunner(t)
	tmp := t.TempDir()
	// The source repository's directory name holds the token, so git's file transport
	// reaches it with the token in the URL's query, as it would a forge.
	src := filepath.Join(tmp, "src?private_token="+canary)
	git(true, tmp, "init", "-q", "-b", "main", src)
	git(true, src, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "one")
	srcURL := "file://" + src
	w := filepath.Join(tmp, "w")
	git(true, tmp, "clone", "-q", srcURL, w)
	git(true, w, "fetch", "-q", srcURL, "main")
	git(true, w, "worktree", "add", "-q", filepath.Join(tmp, "wt"))
	git(true, filepath.Join(tmp, "wt"), "fetch", "-q", srcURL, "main")
	plain := filepath.Join(tmp, "plain.git") // where git in S fetches the legacy remotes from
	git(true, tmp, "init", "-q", "--bare", plain)
	git(true, w, "push", "-q", plain, "main")

	const gl = "https://gitlab.example.test/r.git"
	u := "https://u:" + canary + "@gitlab.example.test/r.git"
	files := map[string]string{
		".git/remotes/old":                      "URL: " + u + "?private_token=" + canary + "&ref=main\nPull: refs/heads/main:refs/remotes/old/main\n",
		".git/remotes/bad":                      "URL: " + gl + "%0a" + canary + "\nPull: refs/heads/main:refs/remotes/bad/main\n",
		".git/branches/br":                      u + "#main\n",
		".git/branches/nohost":                  "https:///" + canary + "\n",
		".git/modules/sub/remotes/o":            "URL: ssh://git:" + canary + "@gitlab.example.test/r.git\n",
		".git/worktrees/wt/branches/x":          gl + "?sig=" + canary + "\n",
		".git/svn/.metadata":                    "[svn-remote \"svn\"]\n\treposRoot = " + u + "\n\tuuid = 1\n",
		".git/objects/info/http-alternates":     "https://gitlab.example.test/o?X-Amz-Signature=" + canary + "\n",
		".git/modules/sub/logs/refs/heads/main": "0 1 a <a@x> 1 +0000\tpull " + u + " main: Fast-forward\n",
		".git/MERGE_MSG":                        "Merge branch 'main' of " + gl + "?private_token=" + canary + "\n\n# Conflicts:\n",
		".git/worktrees/wt/SQUASH_MSG":          "Squashed commit of the following: " + gl + "?job_token=" + canary + "\n",
		".git/COMMIT_EDITMSG":                   "Merge branch 'dev' of " + u + "\n",
	}
	for p, c := range files {
		write(t, filepath.Join(w, p), c, 0o644)
	}

	s, m, rep := take(t, w, Options{})
	grepTree(t, s, canary)
	for _, r := range []struct{ remote, url string }{{"old", gl + "?ref=main"}, {"br", gl}} {
		if got, _ := git(false, s, "ls-remote", "--get-url", r.remote); got != r.url {
			t.Errorf("URL of legacy remote %s in S = %q, want %q", r.remote, got, r.url)
		}
		got, ok := git(false, s, "-c", "url."+plain+".insteadOf="+r.url, "ls-remote", r.remote, "main")
		if !ok || !strings.HasSuffix(got, "\trefs/heads/main") {
			t.Errorf("git ls-remote %s in S: %q", r.remote, got)
		}
	}
	for p, want := range map[string]string{
		".git/remotes/bad":   "Pull: refs/heads/main:refs/remotes/bad/main\n",
		".git/branches/br":   gl + "#main\n",
		".git/FETCH_HEAD":    "\tbranch 'main' of file://" + filepath.Join(tmp, "src") + "\n",
		".git/logs/HEAD":     "\tclone: from file://" + filepath.Join(tmp, "src") + "\n",
		".git/svn/.metadata": "reposroot = " + gl + "\n", // canonical form: git config names ignore case
		".git/MERGE_MSG":     "Merge branch 'main' of " + gl + "\n\n# Conflicts:\n",
	} {
		if b, _ := os.ReadFile(filepath.Join(s, p)); !strings.Contains(string(b), want) {
			t.Errorf("S/%s = %q, want it to hold %q", p, b, want)
		}
	}
	if e := m.Lookup(".git/remotes/old"); e == nil || !e.Sanitized {
		t.Errorf(".git/remotes/old entry: %+v", e)
	}
	checkLegacyReport(t, rep)
}

// checkLegacyReport checks the report of TestRealGitLegacyRemotes: exactly these files,
// lines and reasons.
func checkLegacyReport(t *testing.T, rep *Report) {
	t.Helper()
	rw := func(key, why string) gitconfig.Removal {
		return gitconfig.Removal{Key: key, Reason: why, Rewritten: true}
	}
	q, ui := gitconfig.ReasonURLQuery, gitconfig.ReasonURLCredentials
	want := map[string][]gitconfig.Removal{
		".git/config":                           {rw("remote.origin.url", q)},
		".git/FETCH_HEAD":                       {rw("line 1", q)},
		".git/worktrees/wt/FETCH_HEAD":          {rw("line 1", q)},
		".git/logs/HEAD":                        {rw("line 1", q)},
		".git/logs/refs/heads/main":             {rw("line 1", q)},
		".git/logs/refs/remotes/origin/HEAD":    {rw("line 1", q)},
		".git/remotes/old":                      {rw("line 1", ui), rw("line 1", q)},
		".git/remotes/bad":                      {{Key: "line 1", Reason: gitconfig.ReasonURLControl}},
		".git/branches/br":                      {rw("line 1", ui)},
		".git/branches/nohost":                  {{Key: "line 1", Reason: gitconfig.ReasonURLNoHost}},
		".git/modules/sub/remotes/o":            {rw("line 1", ui)},
		".git/worktrees/wt/branches/x":          {rw("line 1", q)},
		".git/svn/.metadata":                    {rw("svn-remote.svn.reposroot", ui)},
		".git/objects/info/http-alternates":     {rw("line 1", q)},
		".git/modules/sub/logs/refs/heads/main": {rw("line 1", ui)},
		".git/MERGE_MSG":                        {rw("line 1", q)},
		".git/worktrees/wt/SQUASH_MSG":          {rw("line 1", q)},
		".git/COMMIT_EDITMSG":                   {rw("line 1", ui)},
	}
	got := map[string][]gitconfig.Removal{}
	for _, sf := range rep.Sanitized {
		if sf.Note != "" {
			t.Errorf("%s: note %q", sf.Path, sf.Note)
		}
		got[sf.Path] = sf.Removed
	}
	if !reflect.DeepEqual(got, want) {
		for p := range want {
			if !reflect.DeepEqual(got[p], want[p]) {
				t.Errorf("report for %s: %+v, want %+v", p, got[p], want[p])
			}
		}
		for p := range got {
			if _, ok := want[p]; !ok {
				t.Errorf("report for %s: %+v, want none", p, got[p])
			}
		}
	}
}

// TestRealGitHTTPRecords: git fetching over smart HTTP (git http-backend on loopback)
// from a URL with user info stores that URL in .git/config but records it without the
// user info in FETCH_HEAD and the reflogs (transport_anonymize_url); S holds the secret
// in none of them.
func TestRealGitHTTPRecords(t *testing.T) {
	git := gitRunner(t)
	execPath, _ := git(true, t.TempDir(), "--exec-path")
	backend := filepath.Join(execPath, "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		testenv.RequireCommand(t, backend) // skips, or fails in CI, with the reason
	}
	root := t.TempDir()
	git(true, root, "init", "-q", "--bare", "-b", "main", filepath.Join(root, "plain.git"))
	seed := filepath.Join(root, "seed")
	git(true, root, "init", "-q", "-b", "main", seed)
	git(true, seed, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "one")
	git(true, seed, "push", "-q", filepath.Join(root, "plain.git"), "main")
	t.Setenv("no_proxy", "127.0.0.1") // loopback only, whatever proxy the environment names
	t.Setenv("NO_PROXY", "127.0.0.1")
	srv := httptest.NewServer(&cgi.Handler{Path: backend,
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}})
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://") // 127.0.0.1:port
	secretURL := "http://u:" + canary + "@" + host + "/plain.git"
	w := filepath.Join(t.TempDir(), "w")
	git(true, root, "clone", "-q", secretURL, w)
	git(true, w, "fetch", "-q", secretURL, "main")
	for _, p := range []string{".git/FETCH_HEAD", ".git/logs/HEAD"} {
		b, err := os.ReadFile(filepath.Join(w, p))
		if err != nil || strings.Contains(string(b), canary) || !strings.Contains(string(b), "http://"+host+"/plain") {
			t.Errorf("git wrote W/%s = %q (%v), want the URL without user info", p, b, err)
		}
	}
	s, _, rep := take(t, w, Options{})
	grepTree(t, s, canary)
	if got, _ := git(false, s, "remote", "get-url", "origin"); got != "http://"+host+"/plain.git" {
		t.Errorf("origin in S = %q", got)
	}
	if len(rep.Sanitized) != 1 || rep.Sanitized[0].Path != ".git/config" {
		t.Errorf("sanitized %+v, want only .git/config", rep.Sanitized)
	}
}
