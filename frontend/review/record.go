package review

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"brood.dev/brood/internal/atomicfile"
)

// RecordDir is the directory under a session directory that keeps one JSON record per
// review (reviews/<unix ns>.json, mode 0600).
const RecordDir = "reviews"

// Record is what a review decided, kept in the session directory so that rejections and
// skips are visible later (`brood review` again, `brood undo`, audits).
type Record struct {
	Time      time.Time     `json:"time"`
	Mode      string        `json:"mode"`    // "interactive", "all", "paths", "reject-all"
	Applied   bool          `json:"applied"` // the accepted items were flushed
	Decisions []RecordEntry `json:"decisions"`
}

// RecordEntry is one decision. Path is the raw path as a JSON string (encoding/json turns
// invalid UTF-8 into U+FFFD), so PathEscaped keeps an exact, printable form as well.
type RecordEntry struct {
	Path        string  `json:"path"`
	PathEscaped string  `json:"path_escaped"`
	Kind        string  `json:"kind"`
	Verdict     Verdict `json:"verdict"`
	Partial     bool    `json:"partial,omitempty"` // accepted with chosen content (hunks, merge)
	Note        string  `json:"note,omitempty"`
}

// NewRecord builds the record of ds.
func NewRecord(mode string, ds []Decision, applied bool) Record {
	r := Record{Time: time.Now().UTC(), Mode: mode, Applied: applied}
	for _, d := range ds {
		r.Decisions = append(r.Decisions, RecordEntry{
			Path: d.Change.Path, PathEscaped: EscapeName(d.Change.Path), Kind: string(d.Change.Kind),
			Verdict: d.Verdict, Partial: d.Verdict == Accept && d.Content != nil, Note: d.Note,
		})
	}
	return r
}

// WriteRecord stores r under sessionDir/reviews/ atomically (temp file, fsync, rename) and
// returns the file's path.
func WriteRecord(sessionDir string, r Record) (string, error) {
	dir := filepath.Join(sessionDir, RecordDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create review record dir %q: %w", dir, err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode review record: %w", err)
	}
	path := filepath.Join(dir, strconv.FormatInt(r.Time.UnixNano(), 10)+".json")
	if err := atomicfile.WriteBytes(path, append(b, '\n')); err != nil {
		return "", fmt.Errorf("review record: %w", err)
	}
	return path, nil
}

// ReadRecords returns the records under sessionDir, oldest first (none: nil, nil).
func ReadRecords(sessionDir string) ([]Record, error) {
	dir := filepath.Join(sessionDir, RecordDir)
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list review records in %q: %w", dir, err)
	}
	var out []Record
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".json" || e.Name()[0] == '.' {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read review record: %w", err)
		}
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("parse review record %q: %w", e.Name(), err)
		}
		out = append(out, r)
	}
	return out, nil
}
