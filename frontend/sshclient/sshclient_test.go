package sshclient

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/internal/testenv"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/sandbox/guestcfg"
)

// fakeGuest is a minimal SSH server speaking the requests brood-guest serves (env,
// pty-req, window-change, exec, shell) with scripted commands.
type fakeGuest struct {
	hostSigner ssh.Signer
	clientKey  ssh.PublicKey
	homeFiles  chan guestcfg.HomeFile // home-file requests accepted (homefile_test.go)
	trusted    chan []byte            // trust-CA requests accepted (trust_test.go)
}

func newFakeGuest(t *testing.T, client ssh.Signer) *fakeGuest {
	hs, _ := testenv.SSHSigner(t)
	return &fakeGuest{hostSigner: hs, clientKey: client.PublicKey(), homeFiles: make(chan guestcfg.HomeFile, 8), trusted: make(chan []byte, 4)}
}

// serve runs the server side on c until the connection ends.
func (g *fakeGuest) serve(c net.Conn) {
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(md ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
			if md.User() != "agent" || !bytes.Equal(k.Marshal(), g.clientKey.Marshal()) {
				return nil, errors.New("not authorized")
			}
			return nil, nil
		},
	}
	cfg.AddHostKey(g.hostSigner)
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		c.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go g.session(sc, ch, creqs)
	}
}

func (g *fakeGuest) session(sc *ssh.ServerConn, ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	var env []string
	var size string
	winch := make(chan string, 8)
	status := func(code uint32) {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], code)
		ch.SendRequest("exit-status", false, b[:])
	}
	for req := range reqs {
		switch req.Type {
		case "env":
			var e struct{ Name, Value string }
			ssh.Unmarshal(req.Payload, &e)
			env = append(env, e.Name+"="+e.Value)
			req.Reply(true, nil)
		case "pty-req":
			var p struct {
				Term             string
				Cols, Rows, W, H uint32
				Modes            string
			}
			ssh.Unmarshal(req.Payload, &p)
			size = fmt.Sprintf("%s %dx%d", p.Term, p.Rows, p.Cols)
			req.Reply(true, nil)
		case "window-change":
			var w struct{ Cols, Rows, W, H uint32 }
			ssh.Unmarshal(req.Payload, &w)
			winch <- fmt.Sprintf("%dx%d", w.Rows, w.Cols)
		case "shell":
			req.Reply(true, nil)
			fmt.Fprintf(ch, "login shell pty=%q\n", size)
			status(0)
			return
		case "exec":
			var e struct{ Command string }
			ssh.Unmarshal(req.Payload, &e)
			req.Reply(true, nil)
			switch e.Command {
			case "env":
				fmt.Fprintf(ch, "%s\n", strings.Join(env, ","))
				status(0)
				return
			case "exit 3":
				fmt.Fprintf(ch.Stderr(), "failing\n")
				status(3)
				return
			case "winch":
				go func() {
					for s := range winch {
						fmt.Fprintf(ch, "size %s\n", s)
						if s == "40x120" {
							status(0)
							ch.Close()
							return
						}
					}
				}()
			case "hang":
			case "drop":
				sc.Close()
				return
			case "stdin":
				go func() {
					var b bytes.Buffer
					b.ReadFrom(ch)
					fmt.Fprintf(ch, "got %q\n", b.String())
					status(0)
					ch.Close()
				}()
			}
		case guestcfg.HomeFileRequest: // refuses the path "refused"
			var f guestcfg.HomeFile
			ok := ssh.Unmarshal(req.Payload, &f) == nil && f.Path != "refused"
			if ok {
				g.homeFiles <- f
			}
			req.Reply(ok, nil)
		case guestcfg.TrustCARequest:
			var tc guestcfg.TrustCA
			ok := ssh.Unmarshal(req.Payload, &tc) == nil
			if ok {
				g.trusted <- tc.PEM
			}
			req.Reply(ok, nil)
		default:
			if req.WantReply {
				req.Reply(false, nil)
			}
		}
	}
}

// connect starts a fake guest on one end of a unix socket pair and handshakes on the
// other, pinning pin.
func connect(t *testing.T, pin func(g *fakeGuest) ssh.PublicKey) (*ssh.Client, error) {
	t.Helper()
	signer, pub, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pub, "ssh-ed25519 ") {
		t.Fatalf("NewKey public half %q", pub)
	}
	g := newFakeGuest(t, signer)
	dir := t.TempDir()
	ln, err := net.Listen("unix", dir+"/s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err == nil {
			g.serve(c)
		}
	}()
	nc, err := net.Dial("unix", dir+"/s")
	if err != nil {
		t.Fatal(err)
	}
	key := pin(g)
	return Handshake(context.Background(), nc, "agent", signer, key, 10*time.Second)
}

func TestHandshakeRefusesOtherHostKey(t *testing.T) {
	other := newFakeGuest(t, mustSigner(t))
	_, err := connect(t, func(*fakeGuest) ssh.PublicKey { return other.hostSigner.PublicKey() })
	if !errors.Is(err, ErrHostKey) {
		t.Fatalf("handshake with a different pinned key: %v, want ErrHostKey", err)
	}
}

func mustSigner(t *testing.T) ssh.Signer {
	s, _, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParseHostKey(t *testing.T) {
	s := mustSigner(t)
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey())))
	k, err := ParseHostKey(line)
	if err != nil || !bytes.Equal(k.Marshal(), s.PublicKey().Marshal()) {
		t.Fatalf("ParseHostKey: %v", err)
	}
	if _, err := ParseHostKey(line + "\n" + line); !errors.Is(err, ErrTrailingKeys) {
		t.Errorf("two keys: %v", err)
	}
	if _, err := ParseHostKey("garbage"); err == nil {
		t.Error("garbage parsed")
	}
}

func pinGuest(g *fakeGuest) ssh.PublicKey { return g.hostSigner.PublicKey() }

func TestRunEnvExitStatusStdin(t *testing.T) {
	c, err := connect(t, pinGuest)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var out, errb bytes.Buffer
	code, err := Run(ctx, c, Options{Command: "env", Env: [][2]string{{"A", "1"}, {"B_C", "x y"}}, Stdout: &out, Stderr: &errb})
	if err != nil || code != 0 || out.String() != "A=1,B_C=x y\n" {
		t.Errorf("env: code %d err %v out %q", code, err, out.String())
	}
	out.Reset()
	code, err = Run(ctx, c, Options{Command: "exit 3", Stdout: &out, Stderr: &errb})
	if err != nil || code != 3 || errb.String() != "failing\n" {
		t.Errorf("exit 3: code %d err %v stderr %q", code, err, errb.String())
	}
	out.Reset()
	code, err = Run(ctx, c, Options{Command: "stdin", Stdin: strings.NewReader("abc"), Stdout: &out})
	if err != nil || code != 0 || out.String() != "got \"abc\"\n" {
		t.Errorf("stdin: code %d err %v out %q", code, err, out.String())
	}
	out.Reset()
	code, err = Run(ctx, c, Options{PTY: true, Term: "xterm", Size: WindowSize{Rows: 30, Cols: 100}, Stdout: &out})
	if err != nil || code != 0 || out.String() != "login shell pty=\"xterm 30x100\"\n" {
		t.Errorf("shell: code %d err %v out %q", code, err, out.String())
	}
}

func TestRunForwardsWindowChanges(t *testing.T) {
	c, err := connect(t, pinGuest)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resize := make(chan WindowSize, 2)
	resize <- WindowSize{Rows: 25, Cols: 81}
	resize <- WindowSize{Rows: 40, Cols: 120}
	var out bytes.Buffer
	code, err := Run(context.Background(), c, Options{Command: "winch", PTY: true, Resize: resize, Stdout: &out})
	if err != nil || code != 0 || out.String() != "size 25x81\nsize 40x120\n" {
		t.Errorf("winch: code %d err %v out %q", code, err, out.String())
	}
}

func TestRunCancelAndLostConnection(t *testing.T) {
	c, err := connect(t, pinGuest)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := Run(ctx, c, Options{Command: "hang"}); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("hang: %v after %v", err, time.Since(start))
	}
	if _, err := Run(context.Background(), c, Options{Command: "drop"}); !errors.Is(err, ErrNoExitStatus) {
		t.Errorf("dropped connection: %v, want ErrNoExitStatus", err)
	}
}

func TestHandshakeTimesOutOnSilentGuest(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	start := time.Now()
	_, err := Handshake(context.Background(), a, "agent", mustSigner(t), mustSigner(t).PublicKey(), 300*time.Millisecond)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("silent guest: %v after %v", err, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, b = net.Pipe()
	defer b.Close()
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	if _, err := Handshake(ctx, a, "agent", mustSigner(t), mustSigner(t).PublicKey(), time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled handshake: %v", err)
	}
}
