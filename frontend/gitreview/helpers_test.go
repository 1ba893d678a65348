package gitreview

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"
)

// git runs the git binary in dir (building fixtures and checking results only) with a
// fixed identity and date, and returns its trimmed stdout.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	testenv.RequireCommand(t, "git")
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Dev", "GIT_AUTHOR_EMAIL=dev@example.com",
		"GIT_COMMITTER_NAME=Dev", "GIT_COMMITTER_EMAIL=dev@example.com",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// writeFile writes content to dir/rel, creating directories.
func writeFile(t testing.TB, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newRepo makes a workspace W with a repository holding one commit on master (a.txt),
// and a snapshot S copied from it (cp -a, as the snapshot copies .git), and returns both.
func newRepo(t testing.TB) (w, s string) {
	t.Helper()
	base := t.TempDir()
	w, s = filepath.Join(base, "w"), filepath.Join(base, "s")
	os.Mkdir(w, 0o755)
	git(t, w, "init", "-q", "-b", "master")
	writeFile(t, w, "a.txt", "a\n")
	git(t, w, "add", "-A")
	git(t, w, "commit", "-q", "-m", "init")
	if out, err := exec.Command("cp", "-a", w, s).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	return w, s
}

// agentCommit makes the acceptance scenario's commit in S: a.txt changed, b.txt added.
func agentCommit(t testing.TB, s string) string {
	t.Helper()
	writeFile(t, s, "a.txt", "A\n")
	writeFile(t, s, "b.txt", "b\n")
	git(t, s, "add", "-A")
	git(t, s, "commit", "-q", "-m", "agent work")
	return git(t, s, "rev-parse", "HEAD")
}

// looseObject writes a loose object of type typ holding body into the repository at
// dir and returns its id; forged names the id instead of the real hash.
func looseObject(t testing.TB, dir, typ string, body []byte, forged string) string {
	t.Helper()
	raw := append([]byte(fmt.Sprintf("%s %d\x00", typ, len(body))), body...)
	sum := sha1.Sum(raw)
	id := hex.EncodeToString(sum[:])
	if forged != "" {
		id = forged
	}
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(raw)
	zw.Close()
	writeFile(t, filepath.Join(dir, ".git", "objects", id[:2]), id[2:], z.String())
	return id
}

// treeEntry is one raw tree entry: mode (octal text), name, and object id (hex).
func treeBody(entries ...[3]string) []byte {
	var b bytes.Buffer
	for _, e := range entries {
		raw, _ := hex.DecodeString(e[2])
		b.WriteString(e[0] + " " + e[1] + "\x00")
		b.Write(raw)
	}
	return b.Bytes()
}

// commitOnTree writes a commit of tree (with parent) into S and points master at it.
func commitOnTree(t testing.TB, s, tree, parent string) string {
	t.Helper()
	body := "tree " + tree + "\nparent " + parent + "\nauthor A <a@x> 1767225600 +0000\ncommitter A <a@x> 1767225600 +0000\n\nhostile\n"
	id := looseObject(t, s, "commit", []byte(body), "")
	writeFile(t, s, ".git/refs/heads/master", id+"\n")
	return id
}

// snapshotFiles returns the bytes of W's files that an apply must never change.
func snapshotFiles(t testing.TB, w string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, f := range []string{".git/HEAD", ".git/refs/heads/master", ".git/index", ".git/config"} {
		b, err := os.ReadFile(filepath.Join(w, f))
		if err != nil {
			t.Fatal(err)
		}
		m[f] = string(b)
	}
	return m
}
