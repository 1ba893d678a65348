package helper

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
	"brood.dev/brood/sandbox/assets"
	"brood.dev/brood/sandbox/image"
)

// ImageSubcommand is the broodd-helper subcommand that fills the artifact store:
// `broodd-helper image build NAME`, as root (`brood image list` asks a running helper
// what the store holds).
const ImageSubcommand = "image"

// imageBuildTimeout bounds one build (mmdebstrap, mkfs.erofs, the kernel fetch): ~30 s
// for `test`, ~1 min for `codex` on a fast mirror; a slow mirror gets ample slack.
const imageBuildTimeout = 30 * time.Minute

const imageUsage = `usage: broodd-helper image build [--config FILE] [--state-dir DIR] NAME
       broodd-helper image pull [--config FILE] [--state-dir DIR] REF`

// imageMain runs `broodd-helper image build ...` (or `image pull ...`: pullMain) with the
// arguments after "image" and returns the exit code: 0 built, 1 failed, 2 bad usage or
// no such recipe.
func imageMain(args []string) int {
	if len(args) > 0 && args[0] == "pull" {
		return pullMain(args[1:])
	}
	if len(args) == 0 || args[0] != "build" {
		fmt.Fprintln(os.Stderr, imageUsage)
		return 2
	}
	name, configPath, stateDir, ok := imageArgs("build", imageUsage, args[1:])
	if !ok {
		return 2
	}
	cfg, err := imageConfig(configPath, stateDir)
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM, unix.SIGINT)
		defer stop()
		var b builtImage
		if b, err = buildImage(ctx, &cfg, name, os.Stderr, nil); err == nil {
			fmt.Printf("%s %s %d\n", name, b.File, b.Size)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "broodd-helper: %v\n", err)
		if errors.Is(err, ErrUnknownImage) {
			return 2
		}
		return 1
	}
	return 0
}

// imageArgs parses the arguments of `broodd-helper image VERB` (after VERB): --config,
// --state-dir and exactly one operand (an image name or reference). ok is false after
// flag's own message or usage was printed to stderr (exit 2).
func imageArgs(verb, usage string, args []string) (operand, configPath, stateDir string, ok bool) {
	fs := flag.NewFlagSet("broodd-helper image "+verb, flag.ContinueOnError)
	cfgFlag := fs.String("config", DefaultConfigPath, "helper configuration `file` (TOML): state_dir, egress.policy_path")
	dirFlag := fs.String("state-dir", "", "override state_dir (the artifact store's root)")
	if err := fs.Parse(args); err != nil {
		return "", "", "", false
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, usage)
		return "", "", "", false
	}
	return fs.Arg(0), *cfgFlag, *dirFlag, true
}

// imageConfig loads the configuration the helper would run with and applies --state-dir.
func imageConfig(path, stateDir string) (Config, error) {
	cfg, err := LoadConfig(path)
	if err != nil {
		return cfg, err
	}
	if stateDir != "" {
		cfg.StateDir = stateDir
	}
	if err := absDir("state_dir", cfg.StateDir); err != nil {
		return cfg, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return cfg, nil
}

// recipeNames are the images buildImage can build, sorted.
func recipeNames() []string {
	names := make([]string, 0, len(image.Recipes))
	for n := range image.Recipes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// builtImage is what buildImage stored: the image's path and size in bytes.
type builtImage struct {
	File string
	Size int64
}

// buildImage builds image name from its recipe into cfg's artifact store, with the
// guest kernel and the base initramfs holding brood-guest (assets.FindGuest), then opens
// them the way StartVM does, so a build that succeeds is one the helper boots. Progress
// goes to log, and phase (may be nil) is called as each step starts ("kernel",
// "initramfs", "image", "verify"). Needs root: the store is root's.
func buildImage(ctx context.Context, cfg *Config, name string, log io.Writer, phase func(string)) (builtImage, error) {
	if _, ok := image.Recipes[name]; !ok {
		return builtImage{}, fmt.Errorf("image build %q: %w (recipes: %s)", name, ErrUnknownImage, strings.Join(recipeNames(), ", "))
	}
	if os.Geteuid() != 0 {
		return builtImage{}, fmt.Errorf("image build %s: needs root: the artifact store %s is root's, the only place the helper boots from; run: sudo broodd-helper image build %s",
			name, cfg.StateDir, name)
	}
	if err := EnsureDir(cfg.StateDir); err != nil {
		return builtImage{}, fmt.Errorf("image build %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, imageBuildTimeout)
	defer cancel()
	start := time.Now()
	fmt.Fprintf(log, "broodd-helper: building image %s in %s (mmdebstrap; output follows)\n", name, cfg.StateDir)
	set, err := assets.Ensure(ctx, assets.Options{Store: storeOf(cfg), Image: name, Rebuild: true, Log: log, Phase: phase})
	if errors.Is(err, assets.ErrNoGuest) {
		return builtImage{}, fmt.Errorf("image build %s: %w\nhint: install brood-guest (CGO_ENABLED=0 go build ./cmd/brood-guest) as %s, or set BROOD_GUEST",
			name, err, assets.GuestPaths[0])
	}
	if err != nil {
		return builtImage{}, fmt.Errorf("image build %s: %w", name, err)
	}
	fmt.Fprintf(log, "broodd-helper: image %s built in %s; kernel %s, initramfs %s\n",
		name, time.Since(start).Round(time.Second), set.Kernel.Release, set.Initramfs)
	if phase != nil {
		phase("verify")
	}
	a, err := openArtifacts(cfg, name)
	if err != nil {
		return builtImage{}, fmt.Errorf("image build %s: the helper would not boot it: %w", name, err)
	}
	defer a.Close()
	fi, err := a.Image.Stat()
	if err != nil {
		return builtImage{}, fmt.Errorf("image build %s: %w", name, err)
	}
	return builtImage{File: a.Image.Name(), Size: fi.Size()}, nil
}

// imageList is the answer to ListImages for cfg's store.
func imageList(cfg *Config) (api.ImageList, error) {
	imgs, err := listImages(cfg)
	if err != nil {
		return api.ImageList{}, fmt.Errorf("list images in %s: %w", cfg.StateDir, err)
	}
	pol, err := imagePolicy(cfg)
	if err != nil {
		return api.ImageList{}, fmt.Errorf("list images: %w", err)
	}
	return api.ImageList{Store: cfg.StateDir, Images: imgs, Recipes: recipeNames(), Policy: pol}, nil
}

// imagePolicy reads the system policy's [images] table (egress.policy_path) for display.
func imagePolicy(cfg *Config) (*api.ImagePolicy, error) {
	sys, err := netpolicy.LoadSystemPolicy(cfg.Egress.PolicyPath)
	if err != nil {
		return nil, err
	}
	p := &api.ImagePolicy{OnDemandBuilds: true, AllowedImages: []string{}}
	if sys != nil {
		p.File, p.RequireDigests, p.OnDemandBuilds = cfg.Egress.PolicyPath, sys.Images.RequireDigests, sys.Images.OnDemand()
		p.AllowedImages = append(p.AllowedImages, sys.Images.AllowedImages...)
	}
	return p, nil
}

func (s *Server) listImages(req *api.Request) (any, error) {
	var a api.ListImagesArgs
	if err := api.DecodeArgs(req.Args, &a); err != nil {
		return nil, err
	}
	return imageList(s.cfg)
}
