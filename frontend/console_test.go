package frontend

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func TestEscapeReaderDetaches(t *testing.T) {
	detached := 0
	r := &escapeReader{r: strings.NewReader("ls\r\x1dexit\r"), onDetach: func() { detached++ }}
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "ls\r" || detached != 1 {
		t.Errorf("read %q, %v, detached %d; want \"ls\\r\", nil, 1", b, err, detached)
	}
	r = &escapeReader{r: strings.NewReader("\x1d"), onDetach: func() { detached++ }}
	if b, _ := io.ReadAll(r); len(b) != 0 || detached != 2 {
		t.Errorf("key alone: %q, detached %d", b, detached)
	}
	r = &escapeReader{r: strings.NewReader("no key here"), onDetach: func() { detached++ }}
	if b, _ := io.ReadAll(r); string(b) != "no key here" || detached != 2 {
		t.Errorf("no key: %q, detached %d", b, detached)
	}
}

// TestInputCloseInterruptsRead checks that a read blocked on a pipe returns when the
// input is closed, and the original descriptor is blocking again afterwards.
func TestInputCloseInterruptsRead(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	in, err := openInput(pr)
	if err != nil {
		t.Fatal(err)
	}
	pw.Write([]byte("a"))
	buf := make([]byte, 8)
	if n, err := in.Read(buf); n != 1 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	done := make(chan error, 1)
	go func() { _, err := in.Read(buf); done <- err }()
	time.Sleep(50 * time.Millisecond)
	in.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("read after Close returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not interrupt the blocked read")
	}
	// The pipe itself still works for the next reader (the review), in blocking mode.
	pw.Write([]byte("b"))
	if n, err := pr.Read(buf); n != 1 || err != nil || buf[0] != 'b' {
		t.Errorf("original read %d %q %v", n, buf[:n], err)
	}
}
