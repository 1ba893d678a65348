package helper

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/vmhost"
	"brood.dev/brood/netpolicy/nftrules"
)

// sessionRecord is the daemon's record of one session, a row of its Table: the wire view
// (api.Session) plus the resources the helper holds for it. (A session's network is an
// egress.Session, its VM a vmhost.Handle.)
type sessionRecord struct {
	api.Session
	gid      uint32   // the owner's primary gid at CreateSession (the runner's gid)
	share    *os.File // workspace share descriptor passed by the owner
	starting bool     // StartVM is preparing the VM (state still "created")
	vm       *vmhost.Handle
	// cpus and memMiB are the VM's sizes booked against the owner's quota (reserve),
	// counted while the VM starts or runs.
	cpus, memMiB int
}

// Table is the helper's session table. Every operation takes the caller's uid and checks
// ownership: a session is visible and destroyable only by its owner and by root.
type Table struct {
	mu      sync.Mutex
	byID    map[string]*sessionRecord
	perUser int
}

// NewTable returns an empty table allowing perUser sessions per uid. The table names a
// session's tap (api.Session.Tap) but never creates or deletes it: the egress layer does,
// for the VM's lifetime (egress.Manager.Start, egress.Manager.Stop).
func NewTable(perUser int) *Table {
	return &Table{byID: map[string]*sessionRecord{}, perUser: perUser}
}

// newSessionID returns 8 random lower-case hex digits (api.ValidSessionID).
func newSessionID() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate session id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Create adds a session owned by owner, taking ownership of share. It fails with
// api.ErrLimit when owner already holds the maximum number of sessions.
func (t *Table) Create(owner, gid uint32, share *os.File) (api.Session, error) {
	return t.createAt(owner, gid, share, time.Now())
}

// createAt is Create with the creation time now (the TTL of never-started sessions
// counts from it; tests inject it).
func (t *Table) createAt(owner, gid uint32, share *os.File, now time.Time) (api.Session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, s := range t.byID {
		if s.Owner == owner {
			n++
		}
	}
	if n >= t.perUser {
		return api.Session{}, fmt.Errorf("create session for uid %d: %d sessions open, max_sessions_per_user %d: %w", owner, n, t.perUser, api.ErrLimit)
	}
	var id string
	for {
		var err error
		if id, err = newSessionID(); err != nil {
			return api.Session{}, err
		}
		if _, dup := t.byID[id]; !dup {
			break
		}
	}
	tap, err := nftrules.TapName(id)
	if err != nil {
		return api.Session{}, fmt.Errorf("create session for uid %d: %w", owner, err)
	}
	s := &sessionRecord{
		Session: api.Session{ID: id, Owner: owner, State: api.SessionCreated, Tap: tap, Created: now.Unix()},
		gid:     gid,
		share:   share,
	}
	t.byID[id] = s
	return s.Session, nil
}

// lookup returns the session id if uid may act on it: api.ErrNotFound when it does not
// exist, api.ErrPermissionDenied when it belongs to someone else (and uid is not root).
// The caller holds t.mu.
func (t *Table) lookup(id string, uid uint32) (*sessionRecord, error) {
	s, ok := t.byID[id]
	if !ok {
		return nil, fmt.Errorf("session %q: %w", id, api.ErrNotFound)
	}
	if s.Owner != uid && uid != 0 {
		return nil, fmt.Errorf("session %q of another user: %w", id, api.ErrPermissionDenied)
	}
	return s, nil
}

// Get returns session id as seen by uid (see lookup for errors).
func (t *Table) Get(id string, uid uint32) (api.Session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, err := t.lookup(id, uid)
	if err != nil {
		return api.Session{}, err
	}
	return s.Session, nil
}

// List returns uid's sessions (all sessions for root), ordered by id.
func (t *Table) List(uid uint32) []api.Session {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := []api.Session{}
	for _, s := range t.byID {
		if s.Owner == uid || uid == 0 {
			out = append(out, s.Session)
		}
	}
	slices.SortFunc(out, func(a, b api.Session) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Destroy removes session id on behalf of uid and releases its resources: a running VM
// is stopped (its runner reaped and its network, tap included, removed by the VM's
// supervisor through egress.Manager.Stop) first, then the share descriptor goes.
// Errors of lookup are returned before anything is touched; a session whose VM is being
// started cannot be destroyed (api.ErrState).
func (t *Table) Destroy(id string, uid uint32) error {
	t.mu.Lock()
	s, err := t.lookup(id, uid)
	if err == nil && s.starting {
		err = fmt.Errorf("destroy session %q: its VM is starting: %w", id, api.ErrState)
	}
	if err == nil {
		delete(t.byID, id)
	}
	t.mu.Unlock()
	if err != nil {
		return err
	}
	t.release(s)
	return nil
}

// release stops s's VM (stop returns once the supervisor has torn its network down),
// frees what its handle kept (the egress decision log) and closes the share descriptor.
func (t *Table) release(s *sessionRecord) {
	if s.vm != nil {
		s.vm.Stop()
		s.vm.Release()
	}
	if s.share != nil {
		s.share.Close()
	}
}

// Len returns the number of live sessions.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// DestroyAll removes every session (helper shutdown), stopping their VMs.
func (t *Table) DestroyAll() {
	t.mu.Lock()
	all := t.byID
	t.byID = map[string]*sessionRecord{}
	t.mu.Unlock()
	for _, s := range all {
		t.release(s)
	}
}

// beginStart marks session id (owned by uid, state created, no start under way) as
// starting and returns it. The caller must call endStart.
func (t *Table) beginStart(id string, uid uint32) (*sessionRecord, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, err := t.lookup(id, uid)
	if err != nil {
		return nil, err
	}
	if s.State != api.SessionCreated || s.starting {
		return nil, fmt.Errorf("start VM of session %q in state %q (starting: %v): %w", id, s.State, s.starting, api.ErrState)
	}
	s.starting = true
	return s, nil
}

// endStart records the outcome of a start begun with beginStart: vm is nil when the
// start failed (the session stays "created").
func (t *Table) endStart(s *sessionRecord, vm *vmhost.Handle) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s.starting = false
	if vm == nil {
		return
	}
	s.vm = vm
	if s.State == api.SessionCreated {
		s.State = api.SessionRunning
	}
}

// vmExited marks s stopped (its VMM is gone).
func (t *Table) vmExited(s *sessionRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s.State = api.SessionStopped
}

// vmOf returns the VM of session id as seen by uid (lookup's errors), api.ErrState when
// no VM was ever started.
func (t *Table) vmOf(id string, uid uint32) (*vmhost.Handle, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, err := t.lookup(id, uid)
	if err != nil {
		return nil, err
	}
	if s.vm == nil {
		return nil, fmt.Errorf("session %q has no VM (state %q): %w", id, s.State, api.ErrState)
	}
	return s.vm, nil
}
