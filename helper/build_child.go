package helper

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/sandbox/ociref"
)

// progressFD is the build child's descriptor 3: the write end of the progress pipe
// (spawner contract step 6b).
const progressFD = 3

// progressEvery is the least time between two log progress records of a build child
// (phase changes and the final record are sent at once).
const progressEvery = time.Second

// buildRecord is one line (JSON) a build child writes on its progress pipe: a phase
// change, log counts, or the final record (Phase "done" with File and Size, or "failed"
// with Error and Tail). The helper bounds every field it reads (readBuildRecords).
type buildRecord struct {
	Phase string   `json:"phase"`
	Text  string   `json:"text,omitempty"`
	Bytes int64    `json:"bytes,omitempty"`
	Lines int64    `json:"lines,omitempty"`
	File  string   `json:"file,omitempty"`
	Size  int64    `json:"size,omitempty"`
	Error string   `json:"error,omitempty"`
	Tail  []string `json:"tail,omitempty"`
}

// Final phases of a buildRecord.
const (
	phaseDone   = "done"
	phaseFailed = "failed"
)

// buildChildMain is `broodd-helper image-build --state-dir DIR NAME` (or `...
// --policy FILE --ref REF`), the build child the spawner starts for the helper (spawner
// contract step 6b): it builds image NAME (buildImage), or pulls REF under the system
// policy FILE (pullImage), into the store at DIR with its full log in the store's build
// log, and writes only progress records on descriptor 3. Exit 0 built, 1 failed, 2 bad
// usage.
func buildChildMain(args []string) int {
	fs := flag.NewFlagSet("broodd-helper "+spawner.BuildSubcommand, flag.ContinueOnError)
	dir := fs.String("state-dir", "", "the artifact store's root")
	ref := fs.String("ref", "", "a digest reference to pull instead of a recipe")
	policy := fs.String("policy", "", "the system policy file a pull is checked against")
	if err := fs.Parse(args); err != nil || fs.NArg() != btoi(*ref == "") || *dir == "" || (*ref != "") != (*policy != "") {
		fmt.Fprintf(os.Stderr, "usage: broodd-helper %s --state-dir DIR (NAME | --policy FILE --ref REF)\n", spawner.BuildSubcommand)
		return 2
	}
	unix.CloseOnExec(progressFD)
	rep := &recorder{out: os.NewFile(progressFD, "progress")}
	cfg := DefaultConfig()
	cfg.StateDir, cfg.Egress.PolicyPath = *dir, *policy
	name := fs.Arg(0)
	if *ref != "" {
		var err error
		if name, err = ociref.RefImageName(*ref); err != nil {
			rep.final(buildRecord{Phase: phaseFailed, Error: err.Error()})
			return 1
		}
	}
	log, err := openBuildLog(&cfg, name)
	if err != nil {
		rep.final(buildRecord{Phase: phaseFailed, Error: err.Error()})
		return 1
	}
	defer log.Close()
	rep.log = log
	// Whatever else this process or a program it runs writes (a panic, a stray message)
	// lands in the log too, not in /dev/null.
	for _, fd := range []int{1, 2} {
		unix.Dup3(int(log.Fd()), fd, 0)
	}
	rep.phase("start")
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM, unix.SIGINT)
	defer stop()
	b, err := childWork(ctx, &cfg, name, *ref, rep)
	if err != nil {
		fmt.Fprintf(rep, "broodd-helper: %v\n", err)
		rep.final(buildRecord{Phase: phaseFailed, Error: err.Error(), Tail: rep.tail()})
		return 1
	}
	rep.final(buildRecord{Phase: phaseDone, File: b.File, Size: b.Size})
	return 0
}

// childWork builds image name, or pulls ref (phase "pull"), logging to rep.
func childWork(ctx context.Context, cfg *Config, name, ref string, rep *recorder) (builtImage, error) {
	if ref == "" {
		return buildImage(ctx, cfg, name, rep, rep.phase)
	}
	rep.phase("pull")
	p, err := pullImage(ctx, cfg, ref, rep)
	if err != nil {
		return builtImage{}, err
	}
	fi, err := os.Stat(p.File)
	if err != nil {
		return builtImage{}, fmt.Errorf("image pull %s: %w", ref, err)
	}
	return builtImage{File: p.File, Size: fi.Size()}, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// openBuildLog creates (or truncates) the build log of name in cfg's store, mode 0644,
// never through a symlink.
func openBuildLog(cfg *Config, name string) (*os.File, error) {
	l := storeOf(cfg)
	for _, d := range []string{cfg.StateDir, l.Logs()} {
		if err := EnsureDir(d); err != nil {
			return nil, fmt.Errorf("build log of %s: %w", name, err)
		}
	}
	f, err := os.OpenFile(l.BuildLog(name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("build log of %s: %w", name, err)
	}
	return f, f.Chmod(0o644)
}

// recorder is the build child's log writer: it copies the build's output into the log
// file, counts its bytes and lines, keeps its last api.MaxBuildTail lines, and writes a
// progress record on out at a phase change ("start", then buildImage's) and at most
// every progressEvery otherwise.
type recorder struct {
	out *os.File
	log io.Writer

	mu        sync.Mutex
	phaseName string
	bytes     int64
	lines     int64
	partial   []byte   // the last line, not ended yet
	last      []string // the last lines, oldest first
	sent      time.Time
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.log != nil {
		r.log.Write(p) // a full disk must not end the build; the tail still says why it failed
	}
	r.bytes += int64(len(p))
	r.partial = append(r.partial, p...)
	for {
		i := bytes.IndexByte(r.partial, '\n')
		if i < 0 {
			break
		}
		r.lines++
		r.last = append(r.last, clip(string(r.partial[:i])))
		if len(r.last) > api.MaxBuildTail {
			r.last = r.last[1:]
		}
		r.partial = r.partial[i+1:]
	}
	if len(r.partial) > api.MaxProgressText {
		r.partial = r.partial[:api.MaxProgressText]
	}
	if time.Since(r.sent) >= progressEvery {
		r.sendLocked(buildRecord{Phase: r.phaseName, Text: r.lastLine()})
	}
	return len(p), nil
}

// phase records the start of build step p.
func (r *recorder) phase(p string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phaseName = p
	r.sendLocked(buildRecord{Phase: p})
}

// tail returns the last lines of the log.
func (r *recorder) tail() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.last...)
}

// final writes the last record and closes the pipe.
func (r *recorder) final(rec buildRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sendLocked(rec)
	r.out.Close()
}

func (r *recorder) lastLine() string {
	if len(r.last) == 0 {
		return ""
	}
	return r.last[len(r.last)-1]
}

// sendLocked writes rec with the current counts as one line. A write error (the helper
// is gone) is ignored: the build goes on and its image is kept.
func (r *recorder) sendLocked(rec buildRecord) {
	rec.Bytes, rec.Lines = r.bytes, r.lines
	b, _ := json.Marshal(rec)
	r.out.Write(append(b, '\n'))
	r.sent = time.Now()
}

// clip cuts s to api.MaxProgressText bytes and replaces what a terminal would act on.
func clip(s string) string {
	if len(s) > api.MaxProgressText {
		s = s[:api.MaxProgressText]
	}
	return strings.ToValidUTF8(strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s), "?")
}
