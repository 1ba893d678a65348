package api

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"

	"golang.org/x/sys/unix"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 100, MaxFrame} {
		body := bytes.Repeat([]byte{'a'}, n)
		fr, err := AppendFrame(nil, body)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadFrame(bytes.NewReader(fr))
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("%d bytes: got %d bytes, %v", n, len(got), err)
		}
	}
	if _, err := AppendFrame(nil, make([]byte, MaxFrame+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("AppendFrame over max: %v", err)
	}
}

func TestReadFrameErrors(t *testing.T) {
	hdr := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty stream", nil, io.EOF},
		{"partial header", []byte{0, 0}, ErrTruncated},
		{"short body", append(hdr(10), "abc"...), ErrTruncated},
		{"too large", hdr(MaxFrame + 1), ErrTooLarge},
		{"huge", hdr(0xffffffff), ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadFrame(bytes.NewReader(tc.in))
			if !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestDecodeRequestStrict(t *testing.T) {
	good := `{"call":"destroy_session","args":{"id":"0123abcd"}}`
	req, err := DecodeRequest([]byte(good))
	if err != nil || req.Call != CallDestroySession {
		t.Fatalf("good request: %+v, %v", req, err)
	}
	var a SessionArgs
	if err := DecodeArgs(req.Args, &a); err != nil || a.ID != "0123abcd" {
		t.Errorf("args = %+v, %v", a, err)
	}
	for _, bad := range []string{
		``, `null`, `{}`, `{"call":""}`, `{"call":"x","unknown":1}`, `{"call":"x"}{}`,
		`{"call":"x","fds":-1}`, `{"call":"x","fds":5}`, `{"call":1}`, `[]`,
	} {
		if _, err := DecodeRequest([]byte(bad)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("DecodeRequest(%q) = %v, want bad request", bad, err)
		}
	}
	for _, bad := range []string{`{"id":"x","path":"/etc"}`, `{"ID":"x","tap":"../../x"}`, `"x"`, `{"id":1}`, `{} x`} {
		var a SessionArgs
		if err := DecodeArgs([]byte(bad), &a); !errors.Is(err, ErrBadRequest) {
			t.Errorf("DecodeArgs(%q) = %v, want bad request", bad, err)
		}
	}
	var e CreateSessionArgs
	if err := DecodeArgs(nil, &e); err != nil {
		t.Errorf("missing args: %v", err)
	}
}

func TestErrorIs(t *testing.T) {
	wire := &Error{Code: CodePermissionDenied, Message: "session of another user"}
	if !errors.Is(wire, ErrPermissionDenied) || errors.Is(wire, ErrNotFound) {
		t.Error("Error.Is does not match by code")
	}
	e := AsError(errors.Join(errors.New("ctx"), ErrNotFound))
	if e.Code != CodeNotFound {
		t.Errorf("AsError = %+v", e)
	}
	if AsError(errors.New("boom")).Code != CodeInternal {
		t.Error("untyped error is not internal")
	}
}

// TestConnPassesDescriptors sends a frame with an fd over a socketpair and reads the file
// through the received descriptor; a frame with too many descriptors is refused.
func TestConnPassesDescriptors(t *testing.T) {
	a, b := socketPair(t)
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte("through scm_rights"), 0o600)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := a.WriteFrame([]byte(`{"call":"x","fds":1}`), f); err != nil {
		t.Fatal(err)
	}
	body, files, err := b.ReadFrame()
	if err != nil || len(files) != 1 || !strings.Contains(string(body), `"fds":1`) {
		t.Fatalf("ReadFrame = %q, %d files, %v", body, len(files), err)
	}
	got, _ := io.ReadAll(files[0])
	files[0].Close()
	if string(got) != "through scm_rights" {
		t.Errorf("read through passed fd: %q", got)
	}
	if err := a.WriteFrame([]byte("x"), f, f, f, f, f); !errors.Is(err, ErrFDCount) {
		t.Errorf("5 descriptors: %v", err)
	}
	// A frame without descriptors after one with them.
	a.WriteFrame([]byte("plain"))
	body, files, err = b.ReadFrame()
	if err != nil || len(files) != 0 || string(body) != "plain" {
		t.Errorf("plain frame: %q %d %v", body, len(files), err)
	}
	a.Close()
	if _, _, err := b.ReadFrame(); !errors.Is(err, io.EOF) {
		t.Errorf("after close: %v, want EOF", err)
	}
}

func socketPair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	a, b := testenv.UnixPair(t, unix.SOCK_STREAM)
	return NewConn(a), NewConn(b)
}

func TestValidSessionID(t *testing.T) {
	for id, want := range map[string]bool{"0123abcd": true, "0123ABCD": false, "../../x": false, "": false, "0123abcde": false, "brd01234": false} {
		if ValidSessionID(id) != want {
			t.Errorf("ValidSessionID(%q) != %v", id, want)
		}
	}
}

// FuzzReadFrame: arbitrary streams never panic, never yield a body over MaxFrame, and a
// decoded body re-encodes to the bytes consumed.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 9, 'x'})
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		body, err := ReadFrame(bytes.NewReader(in))
		if err != nil {
			return
		}
		if len(body) > MaxFrame {
			t.Fatalf("body of %d bytes", len(body))
		}
		fr, err := AppendFrame(nil, body)
		if err != nil || !bytes.Equal(fr, in[:len(fr)]) {
			t.Fatalf("re-encode mismatch")
		}
	})
}

// FuzzDecodeRequest: arbitrary bodies never panic; an accepted request has a call name and
// an in-range descriptor count, and its arguments decode strictly or fail typed.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"call":"hello","args":{"version":1}}`))
	f.Add([]byte(`{"call":"create_session","fds":1,"args":{}}`))
	f.Add([]byte(`{"call":"destroy_session","args":{"id":"0123abcd","path":"/"}}`))
	f.Add([]byte(`{"call":"x","fds":99}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeRequest(body)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if req.Call == "" || req.FDs < 0 || req.FDs > MaxFDs {
			t.Fatalf("accepted %+v", req)
		}
		var a SessionArgs
		if err := DecodeArgs(req.Args, &a); err != nil && !errors.Is(err, ErrBadRequest) {
			t.Fatalf("untyped args error %v", err)
		}
	})
}
