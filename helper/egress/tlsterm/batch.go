package tlsterm

import (
	"net"
	"net/http"
	"sync"
)

// batchConn is the guest's socket under crypto/tls: between begin and end its writes are
// gathered and written at end in one write(2), so that the TLS records one HTTP/1.1
// response write makes (a chunk header, data in records of at most 16 KiB, RFC 8446
// section 5.1) leave together; other writes go out at once. Writes that end the batch
// or pass it report the socket's error; gathered ones report it at end.
type batchConn struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  []byte
}

func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// begin starts gathering writes.
func (c *batchConn) begin() {
	c.mu.Lock()
	c.hold = true
	c.mu.Unlock()
}

// end writes what was gathered since begin and stops gathering.
func (c *batchConn) end() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = false
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}

// batchWriter is the ResponseWriter of an HTTP/1.1 request: each body write and each
// flush is one batch of its connection's batchConn. HTTP/1.1 runs one request at a
// time per connection and its writes come from the handler's goroutine, so no other
// write waits on a batch.
type batchWriter struct {
	http.ResponseWriter
	c *batchConn
}

func (w batchWriter) Write(p []byte) (int, error) {
	w.c.begin()
	n, err := w.ResponseWriter.Write(p)
	if e := w.c.end(); err == nil {
		err = e
	}
	return n, err
}

// FlushError flushes the ResponseWriter in one batch (http.ResponseController finds it).
func (w batchWriter) FlushError() error {
	w.c.begin()
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if e := w.c.end(); err == nil {
		err = e
	}
	return err
}

// Unwrap lets http.ResponseController reach the ResponseWriter.
func (w batchWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
