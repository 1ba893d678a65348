package sshclient

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/sandbox/guestcfg"
)

// TestPutHomeFiles sends home files to the fake guest: each arrives whole and in order;
// a refusal is ErrHomeFileRefused; a file failing Check is not sent; a cancelled context
// ends the call.
func TestPutHomeFiles(t *testing.T) {
	var g *fakeGuest
	c, err := connect(t, func(fg *fakeGuest) ssh.PublicKey { g = fg; return fg.hostSigner.PublicKey() })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	files := []guestcfg.HomeFile{
		{Path: ".codex/auth.json", Mode: 0o600, Data: []byte(`{"OPENAI_API_KEY":"sk-test"}`)},
		{Path: ".codex/config.toml", Mode: 0o600, Data: bytes.Repeat([]byte("x"), guestcfg.MaxHomeFile)},
	}
	if err := PutHomeFiles(ctx, c, files); err != nil {
		t.Fatal(err)
	}
	for _, want := range files {
		got := <-g.homeFiles
		if got.Path != want.Path || got.Mode != want.Mode || !bytes.Equal(got.Data, want.Data) {
			t.Errorf("guest got %s %#o (%d bytes), want %s %#o (%d bytes)", got.Path, got.Mode, len(got.Data), want.Path, want.Mode, len(want.Data))
		}
	}
	if err := PutHomeFiles(ctx, c, []guestcfg.HomeFile{{Path: "refused", Mode: 0o600}}); !errors.Is(err, ErrHomeFileRefused) {
		t.Errorf("refused: %v", err)
	}
	if err := PutHomeFiles(ctx, c, []guestcfg.HomeFile{{Path: "../x", Mode: 0o600}}); !errors.Is(err, guestcfg.ErrHomeFile) {
		t.Errorf("bad path: %v", err)
	}
	select {
	case f := <-g.homeFiles:
		t.Errorf("guest got %s, which should not have been sent", f.Path)
	default:
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := PutHomeFiles(cancelled, c, files[:1]); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
