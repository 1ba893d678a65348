package helper

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"brood.dev/brood/helper/api"
)

func TestAuthorize(t *testing.T) {
	peer := func(uid, gid uint32, groups ...uint32) Cred {
		return Cred{Peer: api.Peer{UID: uid, GID: gid}, Groups: groups}
	}
	for _, tc := range []struct {
		name       string
		c          Cred
		uids, gids []uint32
		want       bool
	}{
		{"root always", peer(0, 0), nil, nil, true},
		{"empty lists admit nobody else", peer(1000, 1000, 1000), nil, nil, false},
		{"listed uid", peer(1000, 1000), []uint32{1000}, nil, true},
		{"other uid listed", peer(1001, 1001), []uint32{1000}, nil, false},
		{"primary group", peer(1000, 4300), nil, []uint32{4300}, true},
		{"supplementary group", peer(1000, 1000, 27, 4300), nil, []uint32{4300}, true},
		{"wrong group", peer(1000, 1000, 27), nil, []uint32{4300}, false},
		{"gid 0 peer is not root", peer(1000, 0, 0), nil, []uint32{4300}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Authorize(tc.c, tc.uids, tc.gids)
			if d.Allowed != tc.want || d.Reason == "" {
				t.Errorf("Authorize = %+v, want allowed=%v with a reason", d, tc.want)
			}
		})
	}
}

// TestOtherUIDs runs clients under other uids (re-executed test binary with
// SysProcAttr.Credential): outsiders are rejected, group members admitted, and one uid
// can neither see nor destroy another's session; the audit log records real uids.
func TestOtherUIDs(t *testing.T) {
	requireRoot(t)
	const allowedGID = 4300
	ts := startServer(t, func(c *Config) {
		c.AllowUIDs = nil
		c.AllowGIDs = []uint32{allowedGID}
	})
	work := publicTempDir(t)
	dirA := ownedDir(t, work, "a", 4242, 4242)
	dirB := ownedDir(t, work, "b", 4243, 4243)

	// An outsider (no allowed group) is refused with a typed error.
	out := runChildClient(t, &syscall.Credential{Uid: 4242, Gid: 4242, Groups: []uint32{}},
		childSpec{Sock: ts.sock, Ops: []childOp{{Op: "hello"}, {Op: "list"}}})
	if out[0].Code != string(api.CodePermissionDenied) {
		t.Fatalf("outsider hello = %+v, want permission_denied", out[0])
	}
	if !strings.HasPrefix(out[1].Code, "io:") {
		t.Errorf("connection stayed usable after refusal: %+v", out[1])
	}

	// A member of the allowed group (supplementary) is admitted and creates a session.
	out = runChildClient(t, &syscall.Credential{Uid: 4242, Gid: 4242, Groups: []uint32{allowedGID}},
		childSpec{Sock: ts.sock, Ops: []childOp{{Op: "hello"}, {Op: "create", Dir: dirA}, {Op: "list"}}})
	if out[0].Code != "" || out[0].Caps.Peer.UID != 4242 {
		t.Fatalf("member hello = %+v", out[0])
	}
	if out[1].Code != "" || out[1].Session.Owner != 4242 {
		t.Fatalf("member create = %+v", out[1])
	}
	idA := out[1].Session.ID
	if len(out[2].Sessions) != 1 || out[2].Sessions[0].ID != idA {
		t.Fatalf("member list = %+v", out[2])
	}

	// Another member cannot use A's directory, see A's session or destroy it.
	out = runChildClient(t, &syscall.Credential{Uid: 4243, Gid: 4243, Groups: []uint32{allowedGID}},
		childSpec{Sock: ts.sock, Ops: []childOp{{Op: "hello"}, {Op: "create", Dir: dirB}, {Op: "list"}, {Op: "destroy", ID: idA}}})
	if out[1].Code != "" {
		t.Fatalf("B create = %+v", out[1])
	}
	for _, s := range out[2].Sessions {
		if s.ID == idA {
			t.Errorf("uid 4243 sees uid 4242's session %s", idA)
		}
	}
	if len(out[2].Sessions) != 1 {
		t.Errorf("B list = %+v, want only its own session", out[2].Sessions)
	}
	if out[3].Code != string(api.CodePermissionDenied) {
		t.Errorf("B destroying A's session = %+v, want permission_denied", out[3])
	}
	if _, err := ts.srv.Sessions().Get(idA, 4242); err != nil {
		t.Errorf("A's session is gone after B's attempt: %v", err)
	}
	if !strings.Contains(ts.log.String(), `"uid":4243,"pid"`) || !strings.Contains(ts.log.String(), `"result":"permission_denied"`) {
		t.Errorf("audit log lacks uid 4243's refused call:\n%s", ts.log.String())
	}

	// A listed uid with no group is admitted; a share it does not own is refused.
	ts2 := startServer(t, func(c *Config) { c.AllowUIDs = []uint32{4244} })
	out = runChildClient(t, &syscall.Credential{Uid: 4244, Gid: 4244, Groups: []uint32{}},
		childSpec{Sock: ts2.sock, Ops: []childOp{{Op: "hello"}, {Op: "create", Dir: dirA}}})
	if out[0].Code != "" || out[0].Caps.Peer.UID != 4244 {
		t.Fatalf("listed uid hello = %+v", out[0])
	}
	// dirA is 0700 owned by 4242: 4244 cannot even open it; use a world-readable one.
	if out[1].Code == "" {
		t.Errorf("uid 4244 created a session on uid 4242's directory")
	}
	pub := ownedDir(t, work, "pub", 4242, 4242)
	chmod(t, pub, 0o755)
	out = runChildClient(t, &syscall.Credential{Uid: 4244, Gid: 4244, Groups: []uint32{}},
		childSpec{Sock: ts2.sock, Ops: []childOp{{Op: "hello"}, {Op: "create", Dir: pub}}})
	if out[1].Code != string(api.CodeBadFD) {
		t.Errorf("create on another uid's directory = %+v, want bad_fd", out[1])
	}
	if n := ts2.srv.Sessions().Len(); n != 0 {
		t.Errorf("%d sessions after refused creates", n)
	}
}

// TestSpoofedIdentity: a client that binds its socket to a path like "/tmp/x;uid=0;" and
// puts "uid":0 into its requests is still its real uid, and the forged fields are refused.
func TestSpoofedIdentity(t *testing.T) {
	requireRoot(t)
	ts := startServer(t, func(c *Config) { c.AllowUIDs = []uint32{4242} })
	bind := filepath.Join(publicTempDir(t), "x;uid=0;")
	chmod(t, filepath.Dir(bind), 0o777)
	out := runChildClient(t, &syscall.Credential{Uid: 4242, Gid: 4242, Groups: []uint32{}}, childSpec{
		Sock: ts.sock, Bind: bind,
		Ops: []childOp{
			{Op: "raw", Body: `{"call":"hello","args":{"version":1,"uid":0}}`},
			{Op: "raw", Body: `{"call":"hello","uid":0,"args":{"version":1}}`},
			{Op: "hello"},
			{Op: "list"},
		},
	})
	if out[0].Code != string(api.CodeBadRequest) || out[1].Code != string(api.CodeBadRequest) {
		t.Errorf("requests with uid fields = %+v %+v, want bad_request", out[0], out[1])
	}
	if out[2].Code != "" || out[2].Caps.Peer.UID != 4242 || out[2].Caps.Peer.GID != 4242 {
		t.Errorf("hello = %+v, want peer uid 4242", out[2])
	}
	if out[3].Code != "" {
		t.Errorf("list = %+v", out[3])
	}
	if strings.Contains(ts.log.String(), `"uid":0`) {
		t.Errorf("audit log recorded uid 0:\n%s", ts.log.String())
	}
}
