package tlsterm

import (
	"errors"
	"net"
	"slices"
	"testing"
)

// recordingConn records each Write it gets and fails them all once err is set.
type recordingConn struct {
	net.Conn
	writes []string
	err    error
}

func (c *recordingConn) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	c.writes = append(c.writes, string(p))
	return len(p), nil
}

// TestBatchConn: writes between begin and end reach the socket in one write at end;
// writes outside a batch reach it at once; a failed write of the batch is end's error.
func TestBatchConn(t *testing.T) {
	rc := &recordingConn{}
	c := &batchConn{Conn: rc}
	c.Write([]byte("alone"))
	if !slices.Equal(rc.writes, []string{"alone"}) {
		t.Fatalf("a write outside a batch: socket got %q", rc.writes)
	}
	c.begin()
	c.Write([]byte("hdr "))
	c.Write([]byte("data"))
	if len(rc.writes) != 1 {
		t.Fatalf("inside a batch the socket got %q", rc.writes)
	}
	if err := c.end(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rc.writes, []string{"alone", "hdr data"}) {
		t.Fatalf("after end the socket got %q", rc.writes)
	}
	if err := c.end(); err != nil || len(rc.writes) != 2 {
		t.Fatalf("an empty end wrote %q, %v", rc.writes, err)
	}
	boom := errors.New("boom")
	rc.err = boom
	c.begin()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("a gathered write failed: %v", err)
	}
	if err := c.end(); !errors.Is(err, boom) {
		t.Fatalf("end = %v, want the socket's error", err)
	}
}
