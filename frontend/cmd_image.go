package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"brood.dev/brood/sandbox/assets"
	"brood.dev/brood/sandbox/image"
)

func init() { commands = append(commands, newImageCommand) }

// imageBuildTimeout bounds one image build (mmdebstrap + mke2fs): ~30 s for `test`,
// ~1 min for `codex` on a 2-core host with a nearby mirror; a slow mirror gets ample slack.
const imageBuildTimeout = 30 * time.Minute

func newImageCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "image",
		Short: "Build and list the rootfs images VMs boot from",
	}
	c.AddCommand(newImageBuildCommand(), newImageListCommand())
	return c
}

func recipeNames() []string {
	names := make([]string, 0, len(image.Recipes))
	for n := range image.Recipes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func newImageBuildCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "build NAME",
		Short: "Build a rootfs image from Debian packages (as root)",
		Long: `Build the image NAME from its recipe (` + strings.Join(recipeNames(), ", ") + `) with mmdebstrap and store it
as a read-only image in ` + image.SystemCacheDir + `, where the helper boots images
from, and make sure the guest kernel (Debian's, fetched with apt-get download) and the
initramfs with brood-guest are there too. Those directories are root's, so this needs
root: sudo brood image build NAME. An unchanged tree reuses the image already built.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runImageBuild(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], os.Geteuid())
		},
	}
}

func runImageBuild(ctx context.Context, out, errw io.Writer, name string, euid int) error {
	if _, ok := image.Recipes[name]; !ok {
		return usageErr("image build: no recipe %q (recipes: %s)", name, strings.Join(recipeNames(), ", "))
	}
	if euid != 0 {
		return fmt.Errorf("image build %s: needs root: images live in %s, owned by root, the only place the helper boots them from; run: sudo brood image build %s",
			name, image.SystemCacheDir, name)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, imageBuildTimeout)
	defer cancel()
	start := time.Now()
	fmt.Fprintf(errw, "brood: building image %s (mmdebstrap; output follows)\n", name)
	p, err := image.Build(ctx, image.SystemCacheDir, name, errw)
	if err != nil {
		return fmt.Errorf("image build %s: %w", name, err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("image build %s: %w", name, err)
	}
	fmt.Fprintf(errw, "brood: image %s built in %s\n", name, time.Since(start).Round(time.Second))
	// The image is useless without a kernel and an initramfs holding brood-guest: make
	// sure they are in the helper's cache too (fetched and built once per version).
	fmt.Fprintf(errw, "brood: guest kernel and initramfs ...\n")
	set, err := assets.Ensure(ctx, assets.Options{Image: name})
	if errors.Is(err, assets.ErrNoGuest) {
		return fmt.Errorf("image build %s: %w\nhint: install brood-guest (CGO_ENABLED=0 go build ./cmd/brood-guest) as %s, or set BROOD_GUEST",
			name, err, assets.GuestPaths[0])
	}
	if err != nil {
		return fmt.Errorf("image build %s: guest kernel and initramfs: %w", name, err)
	}
	fmt.Fprintf(errw, "brood: kernel %s, initramfs %s\n", set.Kernel.Release, set.Initramfs)
	fmt.Fprintf(out, "%s %s %d\n", name, p, fi.Size())
	return nil
}

// imageFileRe matches the file names sandbox/image gives images:
// <name>-<first 32 hex digits of the tree digest>.<ext4|erofs>.
var imageFileRe = regexp.MustCompile(`^([a-z0-9][a-z0-9._-]*)-[0-9a-f]{32}\.(?:ext4|erofs)$`)

func newImageListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List built images and the recipes not built yet",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runImageList(cmd.OutOrStdout(), image.SystemCacheDir)
		},
	}
}

// runImageList prints one line per image name in dir: the newest image's path, size
// and time, or "not built" for a recipe without an image.
func runImageList(out io.Writer, dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("image list: %w", err)
	}
	names := map[string]bool{}
	for _, n := range recipeNames() {
		names[n] = true
	}
	for _, e := range ents {
		if m := imageFileRe.FindStringSubmatch(e.Name()); m != nil && e.Type().IsRegular() {
			names[m[1]] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tBUILT\tSIZE\tPATH")
	for _, n := range sorted {
		p, err := image.Cached(dir, n)
		if err != nil {
			fmt.Fprintf(tw, "%s\tnot built\t-\t(sudo brood image build %s)\n", n, n)
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d MiB\t%s\n", n, fi.ModTime().Local().Format(time.DateTime), fi.Size()>>20, p)
	}
	return tw.Flush()
}
