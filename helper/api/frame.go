package api

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// headerLen is the size of the big-endian body length that starts every frame.
const headerLen = 4

// bodyLen validates a frame header and returns the body length in bytes.
func bodyLen(h []byte) (int, error) {
	n := binary.BigEndian.Uint32(h)
	if n > MaxFrame {
		return 0, fmt.Errorf("frame of %d bytes (max %d): %w", n, MaxFrame, ErrTooLarge)
	}
	return int(n), nil
}

// AppendFrame appends the frame for body (header + body) to dst. It fails with
// ErrTooLarge when body is over MaxFrame.
func AppendFrame(dst, body []byte) ([]byte, error) {
	if len(body) > MaxFrame {
		return dst, fmt.Errorf("frame of %d bytes (max %d): %w", len(body), MaxFrame, ErrTooLarge)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	return append(dst, body...), nil
}

// ReadFrame reads one frame from r and returns its body. It returns io.EOF when r ends
// before the first byte, ErrTruncated (wrapped) when it ends inside a frame, and
// ErrTooLarge (wrapped) when the header announces more than MaxFrame bytes, without
// reading the body.
func ReadFrame(r io.Reader) ([]byte, error) {
	var h [headerLen]byte
	if n, err := io.ReadFull(r, h[:]); err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("read frame header: %w: %w", ErrTruncated, err)
	}
	n, err := bodyLen(h[:])
	if err != nil {
		return nil, err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("read frame body (%d bytes): %w: %w", n, ErrTruncated, err)
	}
	return body, nil
}

// strictUnmarshal decodes exactly one JSON value from data into v, rejecting unknown
// fields and trailing data.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after JSON value")
	}
	return nil
}

// DecodeRequest decodes a request frame body strictly. Every failure wraps ErrBadRequest.
func DecodeRequest(body []byte) (*Request, error) {
	var req Request
	if err := strictUnmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("decode request: %w: %w", ErrBadRequest, err)
	}
	if req.Call == "" {
		return nil, fmt.Errorf("decode request: %w: missing call", ErrBadRequest)
	}
	if req.FDs < 0 || req.FDs > MaxFDs {
		return nil, fmt.Errorf("decode request %q: %w: fds %d out of range [0, %d]", req.Call, ErrBadRequest, req.FDs, MaxFDs)
	}
	return &req, nil
}

// DecodeArgs decodes a call's arguments strictly into v (a pointer to the call's *Args
// type). Missing or null arguments decode as an empty object. Failures wrap ErrBadRequest.
func DecodeArgs(raw json.RawMessage, v any) error {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = []byte("{}")
	}
	if err := strictUnmarshal(raw, v); err != nil {
		return fmt.Errorf("decode arguments: %w: %w", ErrBadRequest, err)
	}
	return nil
}

// DecodeResponse decodes a response frame body strictly.
func DecodeResponse(body []byte) (*Response, error) {
	var resp Response
	if err := strictUnmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("decode response: %w", err)
	}
	if (resp.Error == nil) == (resp.Result == nil) {
		return nil, errors.New("decode response: exactly one of result and error must be set")
	}
	return &resp, nil
}

// Conn is a framed connection on a Unix stream socket that can carry descriptors. It is
// not safe for concurrent use.
type Conn struct {
	uc  *net.UnixConn
	oob []byte
}

// NewConn wraps uc.
func NewConn(uc *net.UnixConn) *Conn {
	return &Conn{uc: uc, oob: make([]byte, unix.CmsgSpace(4*MaxFDs))}
}

// UnixConn returns the underlying socket (for deadlines and credentials).
func (c *Conn) UnixConn() *net.UnixConn { return c.uc }

// Close closes the socket.
func (c *Conn) Close() error { return c.uc.Close() }

// WriteFrame sends body as one frame with files attached by SCM_RIGHTS (to the first
// byte of the frame). The caller keeps ownership of files.
func (c *Conn) WriteFrame(body []byte, files ...*os.File) error {
	if len(files) > MaxFDs {
		return fmt.Errorf("write frame: %d descriptors (max %d): %w", len(files), MaxFDs, ErrFDCount)
	}
	buf, err := AppendFrame(make([]byte, 0, headerLen+len(body)), body)
	if err != nil {
		return err
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.uc.WriteMsgUnix(buf, oob, nil)
	if err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	if n < len(buf) {
		if _, err := c.uc.Write(buf[n:]); err != nil {
			return fmt.Errorf("write frame: %w", err)
		}
	}
	return nil
}

// ReadFrame reads one frame and the descriptors that arrived with it. Errors are those of
// the package-level ReadFrame; a truncated control message is an error too. On error any
// received descriptors are closed. The caller owns the returned files.
func (c *Conn) ReadFrame() (body []byte, files []*os.File, err error) {
	defer func() {
		if err != nil {
			closeAll(files)
			files = nil
		}
	}()
	var h [headerLen]byte
	got, err := c.read(h[:], &files)
	if err != nil {
		if got == 0 && errors.Is(err, io.EOF) {
			return nil, files, io.EOF
		}
		return nil, files, fmt.Errorf("read frame header: %w: %w", ErrTruncated, err)
	}
	n, err := bodyLen(h[:])
	if err != nil {
		return nil, files, err
	}
	body = make([]byte, n)
	if _, err := c.read(body, &files); err != nil {
		return nil, files, fmt.Errorf("read frame body (%d bytes): %w: %w", n, ErrTruncated, err)
	}
	return body, files, nil
}

// read fills p from the socket, collecting SCM_RIGHTS descriptors into files.
func (c *Conn) read(p []byte, files *[]*os.File) (int, error) {
	got := 0
	for got < len(p) {
		n, oobn, flags, _, err := c.uc.ReadMsgUnix(p[got:], c.oob)
		got += n
		if oobn > 0 {
			fs, perr := ParseRights(c.oob[:oobn], "scm-rights")
			*files = append(*files, fs...)
			if perr != nil {
				return got, perr
			}
		}
		if flags&unix.MSG_CTRUNC != 0 {
			return got, fmt.Errorf("control message truncated (more than %d descriptors): %w", MaxFDs, ErrFDCount)
		}
		if len(*files) > MaxFDs {
			return got, fmt.Errorf("%d descriptors (max %d): %w", len(*files), MaxFDs, ErrFDCount)
		}
		if err != nil {
			return got, err
		}
		if n == 0 {
			return got, io.EOF
		}
	}
	return got, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
