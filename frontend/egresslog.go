package frontend

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/helper/api"
)

// MaxEgressLogBytes is the byte quota of a session directory's copy of its egress
// decision log (EgressLogFile): the helper's own log quota (4 MiB, some 10,000 decisions),
// so a complete helper log fits.
const MaxEgressLogBytes = 4 << 20

// maxEgressLine is the longest decision line copied (one DNS decision is a few hundred
// bytes plus its addresses); a longer one is dropped.
const maxEgressLine = 64 << 10

// EgressLog is where a session's whole egress decision log was kept, as vm.json records
// it: Path (EgressLogFile in the session directory; empty when nothing was kept), the
// decisions kept (Lines) and not kept (Dropped: those the helper did not log past its own
// quota, EgressSummary.LogDropped, plus those the copy left out past MaxEgressLogBytes or
// as malformed), and Error, why the log could not be fetched or written.
type EgressLog struct {
	Path    string `json:"path,omitempty"`
	Lines   int    `json:"lines"`
	Dropped int    `json:"dropped"`
	Error   string `json:"error,omitempty"`
}

// keepEgressLog fetches the ended session's decision log from the helper (egress_log)
// and copies it into the session directory under MaxEgressLogBytes.
func (v *runningVM) keepEgressLog(sum *api.EgressSummary) *EgressLog {
	rec := &EgressLog{Dropped: sum.LogDropped}
	ctx, cancel := context.WithTimeout(context.Background(), stopWait)
	defer cancel()
	f, err := v.hc.EgressLog(ctx, v.id)
	if err != nil {
		rec.Error = fmt.Sprintf("fetch egress log of session %s: %v", v.sess.ID, err)
		return rec
	}
	defer f.Close()
	p := filepath.Join(v.sess.Dir, EgressLogFile)
	lines, dropped, err := CopyEgressLog(p, io.NewSectionReader(f, 0, 1<<62), MaxEgressLogBytes)
	rec.Lines, rec.Dropped = lines, rec.Dropped+dropped
	if err != nil {
		rec.Error = err.Error()
	}
	if lines > 0 || err == nil {
		rec.Path = p
	}
	return rec
}

// CopyEgressLog writes the decision lines of src (JSON objects, one a line) to a new file
// dst (0600, not following a symlink) while they fit in quota bytes, and returns how many
// it kept and how many it dropped (over the quota, longer than 64 KiB, not JSON or cut
// off at the end of src).
func CopyEgressLog(dst string, src io.Reader, quota int64) (kept, dropped int, err error) {
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, 0, fmt.Errorf("write egress log %s: %w", dst, err)
	}
	w := bufio.NewWriter(out)
	r := bufio.NewReaderSize(src, maxEgressLine)
	var written int64
	for {
		line, rerr := r.ReadSlice('\n')
		switch {
		case errors.Is(rerr, bufio.ErrBufferFull):
			dropped++
			rerr = skipLine(r)
		case len(line) == 0:
		case line[len(line)-1] != '\n' || !json.Valid(bytes.TrimSuffix(line, []byte("\n"))):
			dropped++
		case written+int64(len(line)) > quota:
			dropped++
		default:
			if _, err := w.Write(line); err != nil {
				out.Close()
				return kept, dropped, fmt.Errorf("write egress log %s: %w", dst, err)
			}
			written += int64(len(line))
			kept++
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			out.Close()
			return kept, dropped, fmt.Errorf("read egress log for %s: %w", dst, rerr)
		}
	}
	if err := errors.Join(w.Flush(), out.Close()); err != nil {
		return kept, dropped, fmt.Errorf("write egress log %s: %w", dst, err)
	}
	return kept, dropped, nil
}

// skipLine consumes r up to and including the next newline.
func skipLine(r *bufio.Reader) error {
	for {
		_, err := r.ReadSlice('\n')
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

// printEgressLog tells where the whole decision log is and whether decisions are missing
// from it.
func printEgressLog(prog Progress, l *EgressLog) {
	if l.Path != "" {
		prog.Printf("egress decisions: %d kept in %s, %d dropped", l.Lines, diff.Escape(l.Path), l.Dropped)
	}
	if l.Error != "" {
		prog.Warn("the egress decision log was not kept in full: %s", diff.Escape(l.Error))
	}
	if l.Dropped > 0 {
		prog.Warn("%d egress decision(s) are missing from the log (its byte quota, %d MiB, was reached)", l.Dropped, MaxEgressLogBytes>>20)
	}
}
