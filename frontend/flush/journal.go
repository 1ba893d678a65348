package flush

import (
	"bufio"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/internal/atomicfile"
)

// The journal lives in the session's journal directory, one sub-directory per apply
// (a transaction, "tx"), numbered 000001, 000002, … in the order they were made:
//
//	journal/.lock        flock(2)ed while an apply, undo or recover runs
//	journal/<tx>/plan    gob record: every operation with the prior and new state (a prior
//	                     file's extended attributes included)
//	journal/<tx>/b/<i>   prior content of operation i (hard link of the replaced inode when
//	                     W and the session are on one filesystem, else an fsync'd copy)
//	journal/<tx>/done    gob list of the operations that were applied (apply completed)
//	journal/<tx>/undone  empty marker: the tx was undone or rolled back
//
// The plan and every backup are fsync'd (files, b/, <tx>/ and journal/) before the
// workspace is touched. A tx with a plan but no done and no undone file was interrupted.
//
// journalVersion 1 recorded plain SHA-256 content hashes in entryState.Hash; version 2
// records content digests (package digest). readPlan refuses a version-1 plan by name.
const (
	journalVersion = 2
	planName       = "plan"
	backupDir      = "b"
	doneName       = "done"
	undoneName     = "undone"
	lockName       = ".lock"
)

// action is what one operation does to one workspace path.
type action uint8

const (
	actMkdir   action = iota + 1 // create a directory (Old absent, New dir)
	actCreate                    // create a file or symlink where nothing was (RENAME_NOREPLACE)
	actReplace                   // replace a file or symlink by a file or symlink (rename)
	actChmod                     // change permission bits only (fchmod)
	actDelete                    // remove a file or symlink (its inode is kept in b/)
	actRmdir                     // remove an empty directory
)

func (a action) String() string {
	switch a {
	case actMkdir:
		return "mkdir"
	case actCreate:
		return "create"
	case actReplace:
		return "replace"
	case actChmod:
		return "chmod"
	case actDelete:
		return "delete"
	case actRmdir:
		return "rmdir"
	}
	return "action(" + strconv.Itoa(int(a)) + ")"
}

// entryState is what a workspace path holds (or held): its type, permission bits (07777
// for the prior state, 0777 for the new), content digest (package digest) of a regular
// file's bytes, and a symlink's target.
type entryState struct {
	Type manifest.Type
	Mode uint32
	Hash []byte
	Link string
	// Xattrs are a prior regular file's extended attributes, sorted by name, when
	// XattrsRead (journals written before attributes were recorded have none).
	Xattrs     []Xattr
	XattrsRead bool
	// Flags are a prior regular file's inode flags (FS_IOC_GETFLAGS), when FlagsRead.
	Flags     uint32
	FlagsRead bool
}

// op is one journaled operation. Exported fields are the on-disk record (gob).
type op struct {
	Path     string
	Kind     diff.Kind
	Action   action
	Implicit bool // a parent directory created for another change, not a reviewed change
	Old, New entryState
	Temp     string // temp name in the parent directory (create/replace)
	Backup   bool   // b/<index> holds the prior inode or a copy of it

	content []byte     // Item.Content, nil when the bytes come from S
	keep    []Xattr    // replace: the prior file's attributes the new file gets
	lost    []MetaLoss // replace: the prior file's attributes it does not get
	// keepFlags: replace: the prior file's inode flags (of keepFlags) the new file gets.
	keepFlags uint32
	seen      unix.Stat_t // lstat of the W entry as checked (identity re-checked before writing)
	created   bool        // mkdir: this apply created the directory
	err       error       // first failure of this operation
}

type record struct {
	Version   int
	Tx        string
	Workspace string
	Created   int64 // ns since the Unix epoch
	Ops       []op
}

type doneRecord struct{ Done []int }

// journal is the locked journal directory of a session.
type journal struct {
	dir  string
	lock *os.File
}

// openJournal creates (0700) and locks the journal directory; ErrBusy if it is locked.
func openJournal(dir string) (*journal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create journal %q: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open journal lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, fmt.Errorf("lock journal %q: %w", dir, ErrBusy)
		}
		return nil, fmt.Errorf("lock journal %q: %w", dir, err)
	}
	return &journal{dir: dir, lock: f}, nil
}

func (j *journal) close() { j.lock.Close() }

// txs returns the tx names in order.
func (j *journal) txs() ([]string, error) {
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, fmt.Errorf("list journal %q: %w", j.dir, err)
	}
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() && len(e.Name()) == 6 {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

func (j *journal) nextTx() (string, error) {
	txs, err := j.txs()
	if err != nil {
		return "", err
	}
	n := 1
	if len(txs) > 0 {
		last, _ := strconv.Atoi(txs[len(txs)-1])
		n = last + 1
	}
	return fmt.Sprintf("%06d", n), nil
}

func (j *journal) txDir(tx string) string { return filepath.Join(j.dir, tx) }

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// txStatus reports whether tx completed (done) and whether it was undone.
func (j *journal) txStatus(tx string) (done, undone bool) {
	return exists(filepath.Join(j.txDir(tx), doneName)), exists(filepath.Join(j.txDir(tx), undoneName))
}

// writeFileSync writes v (gob) to dir/name atomically: temp file, fsync, rename, fsync dir.
func writeFileSync(dir, name string, v any) error {
	p := filepath.Join(dir, name)
	err := atomicfile.Write(p, func(w io.Writer) error {
		if v == nil {
			return nil
		}
		return gob.NewEncoder(w).Encode(v)
	})
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

func syncDir(dir string) error { return atomicfile.SyncDir(dir) }

func readGob(p string, v any) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("read journal: %w", err)
	}
	defer f.Close()
	if err := gob.NewDecoder(bufio.NewReader(f)).Decode(v); err != nil {
		return fmt.Errorf("decode journal %q: %w: %w", p, ErrJournal, err)
	}
	return nil
}

func (j *journal) readPlan(tx string) (*record, error) {
	var r record
	if err := readGob(filepath.Join(j.txDir(tx), planName), &r); err != nil {
		return nil, err
	}
	if r.Version == 1 {
		return nil, fmt.Errorf("journal %s is format version 1, written by an older brood: it "+
			"records plain SHA-256 content hashes, which this brood (format %d, block content "+
			"digests) cannot verify; undo or recover it with the brood that applied it: %w",
			tx, journalVersion, ErrJournal)
	}
	if r.Version != journalVersion || r.Tx != tx {
		return nil, fmt.Errorf("journal %s: version %d tx %q: %w", tx, r.Version, r.Tx, ErrJournal)
	}
	for i := range r.Ops {
		if err := ValidatePath(r.Ops[i].Path); err != nil {
			return nil, fmt.Errorf("journal %s: %w: %w", tx, ErrJournal, err)
		}
	}
	return &r, nil
}

func (j *journal) readDone(tx string) ([]int, error) {
	var d doneRecord
	if err := readGob(filepath.Join(j.txDir(tx), doneName), &d); err != nil {
		return nil, err
	}
	return d.Done, nil
}

// interrupted returns the txs that have a plan but were neither completed nor undone.
// A tx directory without a plan (crash while writing it) never touched the workspace and
// is removed.
func (j *journal) interrupted() ([]string, error) {
	txs, err := j.txs()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, tx := range txs {
		if !exists(filepath.Join(j.txDir(tx), planName)) {
			if err := os.RemoveAll(j.txDir(tx)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("remove empty journal tx %s: %w", tx, err)
			}
			continue
		}
		if done, undone := j.txStatus(tx); !done && !undone {
			out = append(out, tx)
		}
	}
	return out, nil
}
