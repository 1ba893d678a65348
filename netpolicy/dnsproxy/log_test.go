package dnsproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestJSONLog(t *testing.T) {
	var buf bytes.Buffer
	log, errf := JSONLog(&buf)
	log(Decision{Time: time.Unix(0, 0).UTC(), Name: "github.com.", Type: "A", Verdict: Allowed,
		Pinned: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, Timeout: Seconds(90 * time.Second)})
	log(Decision{Name: "evil.test.", Type: "TXT", Verdict: Refused, Reason: "not allowed"})
	if err := errf(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log = %q", buf.String())
	}
	var d map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &d); err != nil {
		t.Fatal(err)
	}
	if d["timeout_s"] != float64(90) || d["verdict"] != "allowed" || d["pinned"].([]any)[0] != "192.0.2.1" {
		t.Errorf("entry = %v", d)
	}
	if strings.Contains(lines[1], "timeout_s") || strings.Contains(lines[1], "pinned") {
		t.Errorf("refused entry carries pin fields: %s", lines[1])
	}
}

func TestSummarize(t *testing.T) {
	h := newHarness(t)
	var buf bytes.Buffer
	log, errf := JSONLog(&buf)
	h.proxy.cfg.Log = log
	for _, q := range []string{"GitHub.com.", "github.com.", "evil.test.", "bad1.allowed.test.", "mixed.allowed.test."} {
		h.ask(t, q, 1) // A
	}
	if err := errf(); err != nil {
		t.Fatal(err)
	}
	// A TLS terminator's event (written by the helper daemon) is counted elsewhere.
	buf.WriteString(`{"secret":"block","host":"api.test","binding":"$K","reason":"bound elsewhere"}` + "\n")
	s, err := Summarize(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if s.Queries[Allowed] != 4 || s.Queries[Refused] != 1 || s.Queries[""] != 0 || s.AllowedNames["github.com."] != 2 || s.RefusedNames["evil.test."] != 1 {
		t.Errorf("summary = %+v", s)
	}
	if len(s.Pinned) != 2 || s.Pinned[0].String() != "192.0.2.10" || s.Pinned[1].String() != "192.0.2.15" || s.Stripped != 2 {
		t.Errorf("pinned %v, stripped %d", s.Pinned, s.Stripped)
	}
	if _, err := Summarize(strings.NewReader("{\"name\":1}\n")); err == nil {
		t.Error("malformed log accepted")
	}
}

func TestUpstreamFromResolvConf(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "resolv.conf")
	os.WriteFile(p, []byte("# comment\nsearch corp.example\nnameserver 2001:db8::53\nnameserver 192.0.2.53\n"), 0o644)
	if got, err := UpstreamFromResolvConf(p); err != nil || got != "[2001:db8::53]:53" {
		t.Errorf("UpstreamFromResolvConf = %q, %v", got, err)
	}
	os.WriteFile(p, []byte("search corp.example\n"), 0o644)
	if _, err := UpstreamFromResolvConf(p); !errors.Is(err, ErrConfig) {
		t.Errorf("no nameserver: %v", err)
	}
	if _, err := UpstreamFromResolvConf(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}
