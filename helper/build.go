package helper

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/netpolicy"
	"brood.dev/brood/sandbox/image"
	"brood.dev/brood/sandbox/ociref"
	"brood.dev/brood/sandbox/store"
)

// maxBuildsPerUser bounds the on-demand builds one uid has started that are queued or
// running; following a build another caller started costs nothing.
const maxBuildsPerUser = 2

// maxKeptRecords bounds the progress records the helper keeps per build (the newest;
// a caller that falls further behind skips to the oldest kept).
const maxKeptRecords = 256

// maxEndedBuilds bounds the ended builds the helper remembers (for callers still
// following them); older ones are forgotten, oldest first, so that requests for many
// different references cannot grow the table without bound.
const maxEndedBuilds = 32

// maxRecordLine bounds one line of a build child's progress pipe in bytes; a longer line
// ends the build as failed (the child breaks its protocol).
const maxRecordLine = 8 << 10

// buildChildTimeout is how long the helper waits for a build child's last record before
// it kills the child: the child's own bound (imageBuildTimeout) and a minute. A variable:
// tests shorten it.
var buildChildTimeout = imageBuildTimeout + time.Minute

// imageBuilder starts a build child: `broodd-helper image-build` for req (a recipe name
// or a digest reference to pull, into the store req.StateDir), writing progress records
// to progress (the caller closes its copy). spawner.Client is the real one (the child
// runs outside the helper's Landlock domain).
type imageBuilder interface {
	Build(req spawner.Request, progress *os.File) (int, *os.File, error)
	Kill(pid int) error
}

var _ imageBuilder = (*spawner.Client)(nil)

// builds is the helper's table of on-demand builds: one per recipe key, run one at a
// time, with each uid's started builds counted.
type builds struct {
	mu     sync.Mutex
	byKey  map[string]*build
	ended  []string // keys of ended builds, oldest first (at most maxEndedBuilds)
	perUID map[uint32]int
	slot   chan struct{} // held by the running build
	// started counts build children started (tests: two callers, one build).
	started atomic.Int64
}

func newBuilds() *builds {
	return &builds{byKey: map[string]*build{}, perUID: map[uint32]int{}, slot: make(chan struct{}, 1)}
}

// build is one on-demand build; its fields are guarded by builds.mu.
type build struct {
	name, key string
	ref       string // a pull's digest reference; "" for a recipe
	owner     uint32
	status    api.BuildStatus // State and the final fields; Progress unused
	recs      []api.BuildProgress
	seq       int
	changed   chan struct{} // closed and replaced at every change
}

// EnableBuilds lets build_image start builds with b (without it, build_image answers
// api.ErrUnavailable). Call it before Serve.
func (s *Server) EnableBuilds(b imageBuilder) { s.builder = b }

func (s *Server) callBuildImage(ctx context.Context, st *connState, req *api.Request, _ []*os.File) (any, []*os.File, error) {
	var a api.BuildImageArgs
	if err := api.DecodeArgs(req.Args, &a); err != nil {
		return nil, nil, err
	}
	b, fresh, err := s.buildFor(st.cred.UID, a)
	if err != nil {
		return nil, nil, err
	}
	if fresh { // the caller learns at once that its build is queued
		s.builds.mu.Lock()
		defer s.builds.mu.Unlock()
		return b.statusAfter(a.After, st.cred.UID), nil, nil
	}
	return s.builds.wait(ctx, b, a.After, st.cred.UID), nil, nil
}

// buildFor checks a build_image request (a recipe of this binary, or a digest reference
// the system policy allows; the policy's on_demand_builds; the caller's build quota) and
// returns the build it follows: the running build of the same image, the ended one a
// caller follows (Follow), or a new one (fresh; an image already in the store is a build
// that is done at once).
func (s *Server) buildFor(uid uint32, a api.BuildImageArgs) (_ *build, fresh bool, _ error) {
	name, key, err := s.buildTarget(a)
	if err != nil {
		return nil, false, err
	}
	t := s.builds
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := t.byKey[key]; b != nil && (!b.status.Ended() || a.Follow) {
		return b, false, nil
	}
	b := &build{name: name, key: key, ref: a.Ref, owner: uid, changed: make(chan struct{}),
		status: api.BuildStatus{Name: name, Key: key, State: api.BuildQueued, Log: storeOf(s.cfg).BuildLog(name)}}
	if im, ok := s.storedImage(b); ok {
		b.status.State, b.status.File, b.status.Size = api.BuildDone, im.File, im.Size
		return b, false, nil
	}
	if t.perUID[uid] >= maxBuildsPerUser {
		return nil, false, fmt.Errorf("build image %s: uid %d has %d builds queued or running (max %d): %w", name, uid, t.perUID[uid], maxBuildsPerUser, api.ErrLimit)
	}
	t.perUID[uid]++
	t.byKey[key] = b
	s.log.Info("audit: image build queued", "uid", uid, "image", name, "key", key)
	go s.runBuild(b)
	return b, true, nil
}

// buildTarget checks what a build_image request names and returns the store image name
// and the build table's key: a recipe's name and key (first 32 hex digits), or a pull's
// ociref.RefImageName and its digest reference.
func (s *Server) buildTarget(a api.BuildImageArgs) (name, key string, err error) {
	if a.Ref != "" {
		return s.pullTarget(a)
	}
	r, ok := image.Recipes[a.Name]
	if !ok || !store.ValidImageName(a.Name) {
		return "", "", fmt.Errorf("build image %q: no such recipe (recipes: %v): %w", a.Name, recipeNames(), api.ErrBadRequest)
	}
	if _, err := s.onDemandAllowed(a.Name); err != nil {
		return "", "", err
	}
	if s.builder == nil {
		return "", "", fmt.Errorf("build image %s: this helper runs no builds: %w", a.Name, api.ErrUnavailable)
	}
	if miss := missingBuildCaps(false); miss != "" {
		return "", "", fmt.Errorf("build image %s: on-demand builds need capabilities this helper does not have (%s: outside its capability set); an administrator runs: sudo broodd-helper image build %s: %w",
			a.Name, miss, a.Name, api.ErrUnavailable)
	}
	if key, err = r.Key(); err != nil {
		return "", "", fmt.Errorf("build image %s: %w", a.Name, err)
	}
	return a.Name, key[:store.DigestLen], nil
}

// pullTarget is buildTarget for a pull: a digest reference (a tag is refused: its digest
// must be recorded by whoever resolves it) that the system policy's [images] rules allow,
// and only when they name allowed_images (an empty list, any image for an
// administrator's pull, allows no on-demand pull).
func (s *Server) pullTarget(a api.BuildImageArgs) (name, key string, err error) {
	if a.Name != "" {
		return "", "", fmt.Errorf("build_image: both a name and a reference: %w", api.ErrBadRequest)
	}
	if name, err = ociref.RefImageName(a.Ref); err != nil {
		return "", "", fmt.Errorf("pull image: %v: %w", err, api.ErrBadRequest)
	}
	pol, err := s.onDemandAllowed(a.Ref)
	if err != nil {
		return "", "", err
	}
	if len(pol.AllowedImages) == 0 {
		// Any user of the helper could otherwise fill root's store from a registry of
		// their own; an administrator's pull is not limited this way.
		return "", "", fmt.Errorf("pull image %s: on-demand pulls need [images] allowed_images in the system policy %s; an administrator runs: sudo broodd-helper image pull %s: %w",
			a.Ref, s.cfg.Egress.PolicyPath, a.Ref, api.ErrPolicy)
	}
	if err := pol.CheckRef(a.Ref); err != nil {
		return "", "", fmt.Errorf("pull image: %v (system policy %s): %w", err, s.cfg.Egress.PolicyPath, api.ErrPolicy)
	}
	if s.builder == nil {
		return "", "", fmt.Errorf("pull image %s: this helper runs no builds: %w", a.Ref, api.ErrUnavailable)
	}
	if miss := missingBuildCaps(true); miss != "" {
		return "", "", fmt.Errorf("pull image %s: on-demand pulls need capabilities this helper does not have (%s: outside its capability set); an administrator runs: sudo broodd-helper image pull %s: %w",
			a.Ref, miss, a.Ref, api.ErrUnavailable)
	}
	return name, a.Ref, nil
}

// onDemandAllowed reads the system policy's [images] table (egress.policy_path) and
// refuses with api.ErrPolicy when on_demand_builds is false or the file cannot be read;
// what names the image (a recipe name or a reference) goes into the administrator's
// command. It returns the [images] rules (the zero Policy without a file).
func (s *Server) onDemandAllowed(what string) (ociref.Policy, error) {
	sys, err := netpolicy.LoadSystemPolicy(s.cfg.Egress.PolicyPath)
	if err != nil {
		return ociref.Policy{}, fmt.Errorf("build image %s: read the system policy: %v: %w", what, err, api.ErrPolicy)
	}
	if sys == nil {
		return ociref.Policy{}, nil
	}
	if !sys.Images.OnDemand() {
		verb := "build"
		if ociref.IsReference(what) {
			verb = "pull"
		}
		return ociref.Policy{}, fmt.Errorf("%s image %s: on-demand builds are off ([images] on_demand_builds = false in %s); an administrator runs: sudo broodd-helper image %s %s: %w",
			verb, what, s.cfg.Egress.PolicyPath, verb, what, api.ErrPolicy)
	}
	return sys.Images, nil
}

// storedImage returns the store's image of b when it is there: for a recipe, the file
// its key names; for a pull, the image of its name (the name holds the digest).
func (s *Server) storedImage(b *build) (api.Image, bool) {
	imgs, err := listImages(s.cfg)
	if err != nil {
		return api.Image{}, false
	}
	for _, im := range imgs {
		if im.Name == b.name && (b.ref != "" || im.File == store.ImageFile(b.name, b.key)) {
			return im, true
		}
	}
	return api.Image{}, false
}

// runBuild runs b when the build slot is free: it starts the build child through the
// builder, reads its progress records until the pipe ends, and then believes only the
// store (the image the recipe key names must be there). The build goes on when every
// caller has gone; its image is kept.
func (s *Server) runBuild(b *build) {
	t := s.builds
	t.slot <- struct{}{}
	defer func() { <-t.slot }()
	t.update(b, func() { b.status.State = api.BuildRunning })
	final, err := s.runBuildChild(b)
	im, stored := s.storedImage(b)
	t.update(b, func() {
		switch {
		case err == nil && final.Phase == phaseDone && stored:
			b.status.State, b.status.File, b.status.Size = api.BuildDone, im.File, im.Size
		default:
			b.status.State = api.BuildFailed
			b.status.Error = clip(final.Error)
			if err != nil {
				b.status.Error = err.Error()
			} else if b.status.Error == "" {
				b.status.Error = "the build ended without an image in the store"
			}
			b.status.Tail = clipTail(final.Tail)
		}
		if t.perUID[b.owner]--; t.perUID[b.owner] <= 0 {
			delete(t.perUID, b.owner)
		}
		t.forgetOld(b.key)
	})
	s.log.Info("audit: image build ended", "uid", b.owner, "image", b.name, "key", b.key, "state", b.status.State, "err", b.status.Error)
}

// runBuildChild starts b's build child and relays its records; it returns the final one.
func (s *Server) runBuildChild(b *build) (buildRecord, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return buildRecord{}, fmt.Errorf("build image %s: %w", b.name, err)
	}
	defer r.Close()
	req := spawner.Request{Name: b.name, StateDir: s.cfg.StateDir}
	if b.ref != "" {
		req = spawner.Request{Ref: b.ref, Policy: s.cfg.Egress.PolicyPath, StateDir: s.cfg.StateDir}
	}
	pid, pidfd, err := s.builder.Build(req, w)
	w.Close()
	if err != nil {
		return buildRecord{}, err
	}
	pidfd.Close()
	s.builds.started.Add(1)
	s.log.Info("audit: image build started", "uid", b.owner, "image", b.name, "pid", pid)
	r.SetReadDeadline(time.Now().Add(buildChildTimeout))
	final, err := readBuildRecords(r, func(rec buildRecord) {
		s.builds.update(b, func() { b.add(rec) })
	})
	if err != nil {
		s.builder.Kill(pid)
		return final, fmt.Errorf("build image %s: %w", b.name, err)
	}
	return final, nil
}

// readBuildRecords reads a build child's progress lines from r until it ends, passing
// each record to progress, and returns the final one ("done" or "failed"). A line over
// maxRecordLine bytes or one that is not a record ends it with an error; so does a pipe
// that ends without a final record.
func readBuildRecords(r io.Reader, progress func(buildRecord)) (buildRecord, error) {
	br := bufio.NewReaderSize(r, maxRecordLine)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return buildRecord{}, fmt.Errorf("progress record over %d bytes", maxRecordLine)
		}
		if err != nil {
			return buildRecord{}, fmt.Errorf("the build child ended without a result: %w", err)
		}
		var rec buildRecord
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			return buildRecord{}, fmt.Errorf("malformed progress record: %w", err)
		}
		if rec.Phase == phaseDone || rec.Phase == phaseFailed {
			return rec, nil
		}
		progress(rec)
	}
}

// add appends rec as the next progress record, its text clipped.
func (b *build) add(rec buildRecord) {
	b.seq++
	b.recs = append(b.recs, api.BuildProgress{Seq: b.seq, Phase: clip(rec.Phase), Text: clip(rec.Text), Bytes: rec.Bytes, Lines: rec.Lines})
	if len(b.recs) > maxKeptRecords {
		b.recs = b.recs[len(b.recs)-maxKeptRecords:]
	}
}

// forgetOld records that the build of key ended and forgets the oldest ended builds
// beyond maxEndedBuilds. The caller holds t.mu.
func (t *builds) forgetOld(key string) {
	t.ended = append(slices.DeleteFunc(t.ended, func(k string) bool { return k == key }), key)
	for len(t.ended) > maxEndedBuilds {
		if b := t.byKey[t.ended[0]]; b != nil && b.status.Ended() {
			delete(t.byKey, t.ended[0])
		}
		t.ended = t.ended[1:]
	}
}

// update changes b under the table's lock and wakes b's waiters.
func (t *builds) update(b *build, change func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	change()
	close(b.changed)
	b.changed = make(chan struct{})
}

// wait returns b's status with the records after after once there is news (a record
// after after, the build's end, or any change of b, like queued to running), or when
// api.BuildPollWait has passed or ctx is done.
func (t *builds) wait(ctx context.Context, b *build, after int, uid uint32) api.BuildStatus {
	t.mu.Lock()
	news, changed := b.seq > after || b.status.Ended(), b.changed
	t.mu.Unlock()
	if !news {
		timer := time.NewTimer(api.BuildPollWait)
		defer timer.Stop()
		select {
		case <-changed:
		case <-timer.C:
		case <-ctx.Done():
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return b.statusAfter(after, uid)
}

// statusAfter is b's status for a caller uid with the records after after (at most
// api.MaxBuildRecords). The end of a build is reported only with its last record: a
// caller with records still to fetch sees it running.
func (b *build) statusAfter(after int, uid uint32) api.BuildStatus {
	st := b.status
	st.Joined = uid != b.owner
	st.Progress = []api.BuildProgress{}
	st.Next = max(after, 0)
	for _, r := range b.recs {
		if r.Seq > after && len(st.Progress) < api.MaxBuildRecords {
			st.Progress = append(st.Progress, r)
			st.Next = r.Seq
		}
	}
	if st.Ended() && st.Next < b.seq {
		st.State = api.BuildRunning
		st.File, st.Size, st.Error, st.Tail = "", 0, "", nil
	}
	return st
}

// clipTail bounds a failed build's tail: at most api.MaxBuildTail lines, each clipped.
func clipTail(lines []string) []string {
	if len(lines) > api.MaxBuildTail {
		lines = lines[len(lines)-api.MaxBuildTail:]
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = clip(l)
	}
	return out
}
