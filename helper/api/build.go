package api

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Build states (BuildStatus.State).
const (
	BuildQueued  = "queued"  // waiting for the build before it (the helper builds one image at a time)
	BuildRunning = "running" // the build child runs
	BuildDone    = "done"    // the image is in the store; StartVM boots it
	BuildFailed  = "failed"  // the build ended without an image: Error, Tail and Log say why
)

// Build progress bounds, enforced by the helper on what its build child reports:
// MaxBuildRecords records per BuildStatus (the frame stays far below MaxFrame: each
// record is at most MaxProgressText bytes of text plus its numbers), MaxBuildTail lines
// of MaxProgressText bytes in BuildStatus.Tail.
const (
	MaxBuildRecords = 64
	MaxBuildTail    = 20
	MaxProgressText = 240
)

// BuildPollWait is how long one build_image call waits for news (a record after
// BuildImageArgs.After, or the end of the build) before it answers with none.
const BuildPollWait = 5 * time.Second

// BuildImageArgs asks for the build of recipe Name (one of ImageList.Recipes: a name,
// never a path or a recipe), or for the pull of Ref (a digest reference
// "REGISTRY/REPO@sha256:<hex>", Name then empty), and the progress records after sequence
// number After. The first call (Follow false) starts the build unless the image is in
// the store already or another caller's build of the same image runs (then it follows
// that one); the next calls set Follow and After (the previous BuildStatus.Next) and see
// the same build to its end.
type BuildImageArgs struct {
	Name   string `json:"name,omitempty"`
	Ref    string `json:"ref,omitempty"`
	Follow bool   `json:"follow,omitempty"`
	After  int    `json:"after,omitempty"`
}

// BuildProgress is one progress record of a build: its phase ("start", "kernel",
// "initramfs", "image", "verify"), a line of text, and the bytes and lines of build log written so far.
type BuildProgress struct {
	Seq   int    `json:"seq"`
	Phase string `json:"phase"`
	Text  string `json:"text,omitempty"`
	Bytes int64  `json:"bytes,omitempty"`
	Lines int64  `json:"lines,omitempty"`
}

// BuildStatus answers BuildImage: the state of the build of store image Name (for a
// recipe, Key is its key's first 32 hex digits; for a pull, the digest reference), the progress records after the call's After (at most MaxBuildRecords;
// Next is the After of the next call), and, once it ended, the image (File, Size, the
// store's file name and bytes) or why not (Error, the last Tail lines of the build log,
// and Log, the full log's path on the host, readable by everyone).
type BuildStatus struct {
	Name     string          `json:"name"`
	Key      string          `json:"key"`
	State    string          `json:"state"`
	Joined   bool            `json:"joined,omitempty"` // another caller started this build
	Progress []BuildProgress `json:"progress"`
	Next     int             `json:"next"`
	File     string          `json:"file,omitempty"`
	Size     int64           `json:"size,omitempty"`
	Error    string          `json:"error,omitempty"`
	Tail     []string        `json:"tail,omitempty"`
	Log      string          `json:"log,omitempty"`
}

// Ended reports whether the build is over (done or failed).
func (b BuildStatus) Ended() bool { return b.State == BuildDone || b.State == BuildFailed }

// ErrBuildFailed is BuildImage's error for a build that ended without an image.
type ErrBuildFailed struct{ Status BuildStatus }

func (e *ErrBuildFailed) Error() string {
	return fmt.Sprintf("build image %s: %s\n  %s\nfull log: %s", e.Status.Name, e.Status.Error,
		strings.Join(e.Status.Tail, "\n  "), e.Status.Log)
}

// BuildImage builds image name through the helper (CallBuildImage) and follows it to its
// end, calling progress (may be nil) with each record and with each status (state
// changes included) in order. It returns the final status, a *ErrBuildFailed for a failed
// build, the helper's *Error (CodePolicy: on-demand builds are off; CodeLimit; an unknown
// recipe is CodeBadRequest), or ctx's error.
func (c *Client) BuildImage(ctx context.Context, name string, progress func(BuildStatus, *BuildProgress)) (BuildStatus, error) {
	return c.follow(ctx, BuildImageArgs{Name: name}, progress)
}

// PullImage is BuildImage for the pull of ref, a digest reference: the helper pulls it
// into its store when the system policy allows the reference (require_digests,
// allowed_images) and on-demand builds.
func (c *Client) PullImage(ctx context.Context, ref string, progress func(BuildStatus, *BuildProgress)) (BuildStatus, error) {
	return c.follow(ctx, BuildImageArgs{Ref: ref}, progress)
}

// follow makes build_image calls for a until the build ends.
func (c *Client) follow(ctx context.Context, a BuildImageArgs, progress func(BuildStatus, *BuildProgress)) (BuildStatus, error) {
	name := a.Name + a.Ref
	for {
		if err := ctx.Err(); err != nil {
			return BuildStatus{}, fmt.Errorf("build image %s: %w", name, err)
		}
		call, cancel := context.WithTimeout(ctx, BuildPollWait+DefaultCallTimeout)
		var st BuildStatus
		err := c.Call(call, CallBuildImage, a, &st)
		cancel()
		if err != nil {
			return BuildStatus{}, err
		}
		if progress != nil {
			for i := range st.Progress {
				progress(st, &st.Progress[i])
			}
			progress(st, nil)
		}
		a.After, a.Follow = st.Next, true
		switch st.State {
		case BuildDone:
			return st, nil
		case BuildFailed:
			return st, &ErrBuildFailed{Status: st}
		}
	}
}
