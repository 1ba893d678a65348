// Package session manages brood session directories: one per snapshot, under
// $XDG_STATE_HOME/brood/sessions/<id>/ (default ~/.local/state/brood/sessions), owned by
// the developer, mode 0700.
//
// Layout of a session directory:
//
//	session.json  metadata (Meta), written atomically
//	snapshot/     the snapshot S (the only thing a VM ever sees)
//	manifest      the snapshot manifest (package manifest)
//	base/         optional reflinked copies of W's files at snapshot time (three-way merge)
//	journal/      the flush journal (package flush)
//
// Privilege: none; it runs in brood as the developer.
package session

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	"brood.dev/brood/internal/atomicfile"
)

// Errors returned by this package, checked with errors.Is.
var (
	ErrNotFound  = errors.New("no such session")
	ErrInvalidID = errors.New("invalid session id")
)

// State is the life-cycle state of a session recorded in session.json.
type State string

const (
	StateSnapshotting State = "snapshotting" // snapshot in progress (or crashed during it)
	StateReady        State = "ready"        // snapshot complete, nothing applied
	StateRunning      State = "running"      // a VM is using the snapshot
	StateStopped      State = "stopped"      // VM gone; ready for diff/review
	StateApplied      State = "applied"      // at least one apply completed
)

// Meta is the content of session.json.
type Meta struct {
	ID        string    `json:"id"`
	Workspace string    `json:"workspace"` // absolute path of W
	Created   time.Time `json:"created"`
	State     State     `json:"state"`
	Agent     string    `json:"agent,omitempty"`
	Note      string    `json:"note,omitempty"`
	// HelperSession is the helper's id of the session whose VM uses the snapshot (8 hex
	// digits, api.ValidSessionID), recorded when the VM starts: a command that finds the
	// state "running" asks the helper whether that VM still exists.
	HelperSession string `json:"helper_session,omitempty"`
	// Direct: the VM mounted the workspace itself (brood run --workspace-mode direct): the
	// session has no snapshot and nothing to review.
	Direct bool `json:"direct,omitempty"`
}

// Session is an open session directory.
type Session struct {
	Meta
	Dir string // absolute path of the session directory
}

var idRE = regexp.MustCompile(`^[a-z0-9]{6,32}$`)

// ValidID reports whether id has the shape NewID produces (lowercase letters and digits,
// 6–32 bytes), so that an id can never name a path outside the sessions root.
func ValidID(id string) bool { return idRE.MatchString(id) }

// NewID returns a fresh random session id (12 lowercase hex characters, 48 bits).
func NewID() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux ≥ 3.17
	}
	return hex.EncodeToString(b[:])
}

// Root returns the sessions root: $BROOD_STATE_DIR/sessions if set (tests), else
// $XDG_STATE_HOME/brood/sessions, else ~/.local/state/brood/sessions.
func Root() (string, error) {
	if d := os.Getenv("BROOD_STATE_DIR"); d != "" {
		return filepath.Join(d, "sessions"), nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "brood", "sessions"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find sessions root: %w", err)
	}
	return filepath.Join(home, ".local", "state", "brood", "sessions"), nil
}

// SnapshotDir is the path of S.
func (s *Session) SnapshotDir() string { return filepath.Join(s.Dir, "snapshot") }

// ManifestPath is the path of the manifest file.
func (s *Session) ManifestPath() string { return filepath.Join(s.Dir, "manifest") }

// BaseDir is the path of the optional base copies used for three-way merges.
func (s *Session) BaseDir() string { return filepath.Join(s.Dir, "base") }

// JournalDir is the path of the flush journal.
func (s *Session) JournalDir() string { return filepath.Join(s.Dir, "journal") }

// Create makes a new session directory (mode 0700) for workspace (made absolute) and writes
// session.json with state StateSnapshotting.
func Create(workspace string) (*Session, error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	ws, err := filepath.Abs(workspace)
	if err != nil {
		return nil, fmt.Errorf("resolve workspace %q: %w", workspace, err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("create sessions root %q: %w", root, err)
	}
	id := NewID()
	dir := filepath.Join(root, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create session dir %q: %w", dir, err)
	}
	s := &Session{Meta: Meta{ID: id, Workspace: ws, Created: time.Now().UTC(), State: StateSnapshotting}, Dir: dir}
	if err := s.Save(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Open loads the session id. It returns ErrInvalidID or ErrNotFound (wrapped).
func Open(id string) (*Session, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("open session %q: %w", id, ErrInvalidID)
	}
	root, err := Root()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, id)
	b, err := os.ReadFile(filepath.Join(dir, "session.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open session %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("open session %q: %w", id, err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(dir, "session.json"), err)
	}
	if m.ID != id {
		return nil, fmt.Errorf("session %q: session.json names id %q", id, m.ID)
	}
	return &Session{Meta: m, Dir: dir}, nil
}

// Save writes session.json atomically (package atomicfile).
func (s *Session) Save() error {
	b, err := json.MarshalIndent(s.Meta, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteBytes(filepath.Join(s.Dir, "session.json"), append(b, '\n')); err != nil {
		return fmt.Errorf("save session %s: %w", s.ID, err)
	}
	return nil
}

// SetState records st in session.json.
func (s *Session) SetState(st State) error {
	s.State = st
	return s.Save()
}

// List returns every session under Root, oldest first. Directories without a readable
// session.json are skipped.
func List() ([]*Session, error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list sessions in %q: %w", root, err)
	}
	var out []*Session
	for _, e := range ents {
		if !e.IsDir() || !ValidID(e.Name()) {
			continue
		}
		s, err := Open(e.Name())
		if err != nil {
			continue
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// Remove deletes the session directory id and everything in it. Files in a snapshot may
// have had their write bits removed by the agent; Remove restores owner write permission on
// directories as needed.
func Remove(id string) error {
	s, err := Open(id)
	if err != nil {
		return err
	}
	filepath.WalkDir(s.Dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(s.Dir); err != nil {
		return fmt.Errorf("remove session %s: %w", id, err)
	}
	return nil
}
