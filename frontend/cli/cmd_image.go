package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox/ociref"
	"brood.dev/brood/sandbox/store"
)

// imageTimeout bounds the helper calls of `brood image`.
const imageTimeout = 30 * time.Second

// buildCommand is what builds image name: the privileged binary, as root (brood itself
// never runs as root and links no builder). A pulled image's name (oci-<digest32>) is
// made by pulling the digest reference it stands for.
func buildCommand(name string) string {
	if isPulledName(name) {
		return pullCommand("REGISTRY/REPO@sha256:<digest>") + " (the digest reference " + name + " stands for)"
	}
	return "sudo broodd-helper image build " + name
}

func newImageCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "image",
		Short: "List the rootfs images the helper boots, and say how to build or pull one",
	}
	c.AddCommand(newImageBuildCommand(), newImageListCommand(), newImagePullCommand())
	return c
}

func newImageBuildCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "build NAME",
		Short: "Have the helper build an image from one of its recipes",
		Long: `Images are built by the privileged binary into the helper's artifact store (its
state_dir, by default ` + store.DefaultRoot + `), the only place the helper boots from.
This command asks the running helper to build the image NAME from its own recipe
(mmdebstrap, then mkfs.erofs; the guest kernel and the initramfs with brood-guest too)
and prints the build's progress; brood run does the same for a missing image. An image
whose recipe is unchanged is not rebuilt. When the system policy turns on-demand builds
off ([images] on_demand_builds = false), or no helper answers, an administrator runs:

  ` + buildCommand("NAME"),
		Args: namedArgs(1, 1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runImageBuild(cmd.Context(), cmd.ErrOrStderr(), args[0], api.SocketPath())
		},
	}
}

// runImageBuild checks name against the helper's recipes and has the helper build it,
// with progress on errw. Without a helper, or for a name it has no recipe for, it returns
// the usage error that names the recipes or the command to run as root.
func runImageBuild(ctx context.Context, errw io.Writer, name, socket string) error {
	if !store.ValidImageName(name) {
		return usageErr("image build: %q is not an image name (lower-case letters, digits, '.', '_', '-')", name)
	}
	lctx, cancel := context.WithTimeout(orBackground(ctx), imageTimeout)
	l, err := askImages(lctx, socket)
	cancel()
	switch {
	case err != nil:
		return usageErr("image build %s: no helper answers (%v); images are built by the privileged binary into the helper's artifact store; run:\n  %s",
			name, err, buildCommand(name))
	case !slices.Contains(l.Recipes, name):
		return usageErr("image build: no recipe %q (recipes: %s)", name, strings.Join(l.Recipes, ", "))
	}
	if _, err := buildOnDemand(orBackground(ctx), errw, socket, name); err != nil {
		if api.IsCode(err, api.CodePolicy) {
			return refusedErr(fmt.Errorf("image build: %w", err))
		}
		return fmt.Errorf("image build: %w", err)
	}
	return nil
}

// askImages asks the helper at socket which images it boots.
func askImages(ctx context.Context, socket string) (api.ImageList, error) {
	c, err := api.Dial(ctx, socket)
	if err != nil {
		return api.ImageList{}, err
	}
	defer c.Close()
	return c.ListImages(ctx)
}

func newImageListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the images the helper boots and the recipes not built yet",
		Long: `Asks the helper which images its artifact store holds: the images StartVM would boot,
one per name (the newest build), with the recipes not built yet.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), imageTimeout)
			defer cancel()
			return runImageList(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), api.SocketPath())
		},
	}
}

// runImageList prints the helper's image list to out and where its store is to errw.
func runImageList(ctx context.Context, out, errw io.Writer, socket string) error {
	l, err := askImages(ctx, socket)
	if err != nil {
		return fmt.Errorf("image list: ask the helper which images it boots: %w\n%s", err, helperHint(err, socket))
	}
	fmt.Fprintf(errw, "brood: images in the helper's artifact store %s\n", l.Store)
	if p := l.Policy; p != nil {
		fmt.Fprintln(errw, imagePolicyLine(p))
	}
	return writeImageList(out, l)
}

// imagePolicyLine is the helper's [images] rules in one line. Helper-supplied text is
// escaped.
func imagePolicyLine(p *api.ImagePolicy) string {
	src := "no system policy file"
	if p.File != "" {
		src = diff.Escape(p.File)
	}
	allowed := "any image"
	if len(p.AllowedImages) > 0 {
		allowed = diff.Escape(strings.Join(p.AllowedImages, ", "))
	}
	return fmt.Sprintf("brood: image policy (%s): require_digests %v, on_demand_builds %v, allowed_images: %s",
		src, p.RequireDigests, p.OnDemandBuilds, allowed)
}

// writeImageList prints l as a table: one line per image (name, build time, size,
// digest), then one per recipe not built yet with the command that builds it.
func writeImageList(w io.Writer, l api.ImageList) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tBUILT\tSIZE\tDIGEST")
	for _, im := range l.Images {
		fmt.Fprintf(tw, "%s\t%s\t%d MiB\t%s\n", im.Name, time.Unix(im.Built, 0).Local().Format(time.DateTime), im.Size>>20, im.Digest)
	}
	for _, r := range l.Recipes {
		if !slices.ContainsFunc(l.Images, func(im api.Image) bool { return im.Name == r }) {
			fmt.Fprintf(tw, "%s\tnot built\t-\t(%s)\n", r, buildCommand(r))
		}
	}
	return tw.Flush()
}

func newImagePullCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "pull REF",
		Short: "Have the helper pull an OCI image by digest, or print the command that pulls a tag",
		Long: `OCI images are pulled by the privileged binary into the helper's artifact store. For a
digest reference (REGISTRY/REPO@sha256:<hex>) this command asks the running helper to
pull it, with progress, when the system policy's [images] rules allow the reference
(allowed_images) and on-demand builds (on_demand_builds); brood run does the same for
a missing image. A tag (REGISTRY/REPO:TAG) is resolved by an administrator, who records
the digest it prints:

  ` + pullCommand("REF") + `

fetches REF under the same rules, unpacks its layers as an unprivileged, confined
process, makes the image and prints the digest reference to use: image =
"REGISTRY/REPO@sha256:<hex>" in the user config, --image, or brood run-image (all map it
to the stored image without the network).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runImagePull(cmd.Context(), cmd.ErrOrStderr(), args[0], api.SocketPath())
		},
	}
}

// runImagePull checks ref's form; a digest reference is pulled by the helper at socket
// (progress on errw), a tag gets the usage error that names the command to run as root.
func runImagePull(ctx context.Context, errw io.Writer, ref, socket string) error {
	if err := (ociref.Policy{}).CheckRef(ref); err != nil { // the zero policy only parses
		return usageErr("image pull: %v", err)
	}
	if _, err := ociref.RefImageName(ref); err != nil {
		return usageErr("image pull %s: a tag is resolved by the privileged binary, which prints the digest reference to use; run:\n  %s",
			ref, pullCommand(ref))
	}
	if _, err := buildOnDemand(orBackground(ctx), errw, socket, ref); err != nil {
		if api.IsCode(err, api.CodePolicy) {
			return refusedErr(fmt.Errorf("image pull: %w", err))
		}
		return fmt.Errorf("image pull: %w\nan administrator can run: %s", err, pullCommand(ref))
	}
	return nil
}
