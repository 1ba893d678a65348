package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/helper/api"
)

// buildTimeout bounds an on-demand build as brood waits for it: the helper's own bound
// on one build (30 minutes) plus slack. The build goes on in the helper when brood stops
// waiting, and its image is kept.
const buildTimeout = 35 * time.Minute

// progressLineEvery is the least time between two count lines of one build phase.
const progressLineEvery = 5 * time.Second

// buildOnDemand asks the helper at socket to build image name (api.CallBuildImage), or
// to pull name when it is a digest reference, and prints its progress to errw: a line
// per phase, a count line at most every progressLineEvery, and the result.
// Helper-supplied text is escaped. Errors: the helper's (a CodePolicy error names
// on_demand_builds and the administrator's command, or the allowed_images rule), or a
// failed build with the last lines of its log and where the full log is.
func buildOnDemand(ctx context.Context, errw io.Writer, socket, name string) (api.BuildStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	c, err := api.Dial(ctx, socket)
	if err != nil {
		return api.BuildStatus{}, fmt.Errorf("build image %s: %w\n%s", name, err, helperHint(err, socket))
	}
	defer c.Close()
	t0 := time.Now()
	p := &buildPrinter{w: errw, name: name}
	follow := c.BuildImage
	if refOf(name) != "" {
		follow = c.PullImage
	}
	st, err := follow(ctx, name, p.print)
	var bf *api.ErrBuildFailed
	switch {
	case errors.As(err, &bf):
		return st, buildFailedErr(bf.Status)
	case err != nil && ctx.Err() != nil:
		return st, fmt.Errorf("build image %s: stopped waiting (%w); the helper finishes the build and keeps the image", name, ctx.Err())
	case err != nil:
		return st, fmt.Errorf("build image %s: %w", name, err)
	}
	fmt.Fprintf(errw, "brood: image %s ready after %s: %s (%d MiB)\n", name, time.Since(t0).Round(time.Second), diff.Escape(st.File), st.Size>>20)
	return st, nil
}

// buildFailedErr is the error of a failed build: the helper's reason, the last lines of
// the build log, and where the full log is (all escaped: the helper relays them).
func buildFailedErr(st api.BuildStatus) error {
	var b strings.Builder
	fmt.Fprintf(&b, "build image %s failed: %s", st.Name, diff.Escape(st.Error))
	if len(st.Tail) > 0 {
		b.WriteString("\nlast lines of the build log:")
		for _, l := range st.Tail {
			b.WriteString("\n  " + diff.Escape(l))
		}
	}
	fmt.Fprintf(&b, "\nfull log: %s", diff.Escape(st.Log))
	return errors.New(b.String())
}

// buildPrinter prints one build's progress as lines.
type buildPrinter struct {
	w       io.Writer
	name    string
	state   string
	phase   string
	printed time.Time
	joined  bool
}

// print is the api.Client.BuildImage callback: p is a progress record, or nil after
// each answer (st then carries the state).
func (b *buildPrinter) print(st api.BuildStatus, p *api.BuildProgress) {
	if p == nil {
		if st.Joined && !b.joined {
			b.joined = true
			fmt.Fprintf(b.w, "brood: image %s: following the build another user started\n", b.name)
		}
		if st.State != b.state && st.State == api.BuildQueued {
			fmt.Fprintf(b.w, "brood: image %s: queued behind another image build\n", b.name)
		}
		b.state = st.State
		return
	}
	switch {
	case p.Phase != b.phase:
		b.phase, b.printed = p.Phase, time.Now()
		fmt.Fprintf(b.w, "brood: building image %s: %s\n", b.name, diff.Escape(p.Phase))
	case time.Since(b.printed) >= progressLineEvery:
		b.printed = time.Now()
		fmt.Fprintf(b.w, "brood: building image %s: %s: %d lines, %d KiB of log: %s\n",
			b.name, diff.Escape(p.Phase), p.Lines, p.Bytes>>10, diff.Escape(p.Text))
	}
}

// onDemand wraps a run's check of the helper's capabilities: when the image is not in
// the store but is one of the helper's recipes or was named by a digest reference, and
// --no-build does not say otherwise, it has the helper build or pull it first (printing
// the progress to errw) and then checks as if it were there. A refused or failed build
// ends the run before anything is snapshotted.
func onDemand(ctx context.Context, errw io.Writer, r runRequest, socket string, check func(api.Capabilities) error) func(api.Capabilities) error {
	return func(caps api.Capabilities) error {
		if r.flags.noBuild || caps.Images == nil || slices.Contains(caps.Images, r.image) {
			return check(caps)
		}
		what := r.ref
		if what == "" {
			l, err := askImages(ctx, socket)
			if err != nil || !slices.Contains(l.Recipes, r.image) || isPulledName(r.image) {
				return check(caps)
			}
			what = r.image
			fmt.Fprintf(errw, "brood: image %s is not built yet: the helper builds it now (first run only; it is kept)\n", r.image)
		} else {
			fmt.Fprintf(errw, "brood: image %s is not pulled yet: the helper pulls it now (first run only; it is kept)\n", diff.Escape(r.ref))
		}
		if _, err := buildOnDemand(ctx, errw, socket, what); err != nil {
			if api.IsCode(err, api.CodeUnknownCall) { // a helper older than build_image
				return check(caps)
			}
			if api.IsCode(err, api.CodePolicy) {
				return refusedErr(fmt.Errorf("%w: %q: %w", ErrNoImage, r.image, err))
			}
			return fmt.Errorf("%w: %q: %w", ErrNoImage, r.image, err)
		}
		caps.Images = append(slices.Clone(caps.Images), r.image)
		return check(caps)
	}
}
