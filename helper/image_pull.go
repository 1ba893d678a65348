package helper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/hostexec"
	"brood.dev/brood/netpolicy"
	"brood.dev/brood/sandbox/image"
	"brood.dev/brood/sandbox/oci"
	"brood.dev/brood/sandbox/ociref"
)

// UnpackSubcommand is the hidden subcommand `broodd-helper image-unpack` that `image
// pull` starts as unpackUID to run the registry client and the tar parser (unpack.go).
const UnpackSubcommand = "image-unpack"

// unpackUID is the uid and gid the unpacker runs as: 65534, nobody/nogroup on Debian
// (base-passwd). It owns nothing in the store; the tree it writes lives below a
// root-only directory it reaches only through an inherited descriptor.
const unpackUID = 65534

// maxUnpackAnswer bounds the unpacker's JSON answer (256 MiB): the owner table of a tree
// at the entry cap (1,000,000 entries of at most PATH_MAX bytes) is far below it in
// practice, and a hostile child cannot make root buffer more.
const maxUnpackAnswer = 256 << 20

// unpackTestEnv and unpackTestExe are for tests: extra environment for the unpacker, and
// the binary to run instead of this one (a copy the unpacker's uid may execute), so
// that their re-executed test binary runs Main.
var (
	unpackTestEnv []string
	unpackTestExe string
)

const pullUsage = `usage: broodd-helper image pull [--config FILE] [--state-dir DIR] REF`

// unpackRequest is what `image pull` sends the unpacker on its stdin (JSON).
type unpackRequest struct {
	Ref    string        `json:"ref"`
	Policy ociref.Policy `json:"policy"`
}

// unpackAnswer is what the unpacker writes on its stdout (JSON): the pull, or the error,
// and its own credentials and confinement as it saw them from inside.
type unpackAnswer struct {
	Pulled     *oci.Pulled `json:"pulled,omitempty"`
	Error      string      `json:"error,omitempty"`
	Policy     bool        `json:"policy,omitempty"` // Error wraps ociref.ErrPolicy
	UID        int         `json:"uid"`
	GID        int         `json:"gid"`
	NoNewPrivs bool        `json:"no_new_privs"`
	Landlock   int         `json:"landlock"` // the Landlock ABI enforced; 0: none
}

// pullMain runs `broodd-helper image pull ...` with the arguments after "pull": exit 0
// pulled, 1 failed or refused, 2 bad usage.
func pullMain(args []string) int {
	ref, configPath, stateDir, ok := imageArgs("pull", pullUsage, args)
	if !ok {
		return 2
	}
	cfg, err := imageConfig(configPath, stateDir)
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM, unix.SIGINT)
		defer stop()
		var p *pulledImage
		if p, err = pullImage(ctx, &cfg, ref, os.Stderr); err == nil {
			fmt.Printf("%s %s %s\n", p.Pinned, p.Name, p.File)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "broodd-helper: %v\n", err)
		return 1
	}
	return 0
}

// pulledImage is what pullImage stored.
type pulledImage struct {
	Pinned string // "REGISTRY/REPO@sha256:<hex>": write this into the configuration
	Name   string // the store image name (ociref.ImageName)
	File   string // the image file under <state_dir>/images
	Unpack unpackAnswer
}

// pullImage pulls ref into cfg's store under the system policy's [images] rules
// (egress.policy_path): the unpacker (a re-exec as unpackUID, no_new_privs, Landlock)
// fetches and unpacks into a tree, then root applies the recorded owners
// (oci.ApplyOwners, no tar parsing) and makes the image (image.FromDir). Needs root.
func pullImage(ctx context.Context, cfg *Config, ref string, log io.Writer) (*pulledImage, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("image pull %s: needs root: the artifact store %s is root's; run: sudo broodd-helper image pull %s", ref, cfg.StateDir, ref)
	}
	sys, err := netpolicy.LoadSystemPolicy(cfg.Egress.PolicyPath)
	if err != nil {
		return nil, fmt.Errorf("image pull %s: %w", ref, err)
	}
	var pol ociref.Policy
	if sys != nil {
		pol = sys.Images
	}
	if err := pol.CheckRef(ref); err != nil {
		return nil, err
	}
	images := storeOf(cfg).Images()
	for _, d := range []string{cfg.StateDir, images} {
		if err := EnsureDir(d); err != nil {
			return nil, fmt.Errorf("image pull %s: %w", ref, err)
		}
	}
	work, err := os.MkdirTemp(images, ".pull-") // mode 0700, root's
	if err != nil {
		return nil, fmt.Errorf("image pull %s: %w", ref, err)
	}
	defer os.RemoveAll(work)
	ctx, cancel := context.WithTimeout(ctx, imageBuildTimeout)
	defer cancel()
	ans, err := runUnpacker(ctx, work, unpackRequest{Ref: ref, Policy: pol}, log)
	if err != nil {
		return nil, fmt.Errorf("image pull %s: %w", ref, err)
	}
	return storePulled(ctx, images, filepath.Join(work, "u", "rootfs"), ans, log)
}

// storePulled gives the unpacked tree its recorded owners (the root directory root's),
// and makes its image in images.
func storePulled(ctx context.Context, images, tree string, ans *unpackAnswer, log io.Writer) (*pulledImage, error) {
	p := ans.Pulled
	n, err := ociref.ImageName(p.Digest)
	if err != nil {
		return nil, fmt.Errorf("image pull %s: %w", p.Ref, err)
	}
	if err := oci.ApplyOwners(tree, p.Owners); err != nil {
		return nil, fmt.Errorf("image pull %s: %w", p.Pinned(), err)
	}
	if err := unix.Fchownat(unix.AT_FDCWD, tree, 0, 0, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, fmt.Errorf("image pull %s: chown tree root: %w", p.Pinned(), err)
	}
	fmt.Fprintf(log, "broodd-helper: %s: %d entries, %d bytes, %d neutralised; making the image\n",
		p.Pinned(), p.Report.Entries, p.Report.Bytes, len(p.Report.Notes)+p.Report.Dropped)
	for _, note := range p.Report.Notes {
		fmt.Fprintf(log, "broodd-helper:   layer %s %s: %s\n", note.Layer, note.Path, note.What)
	}
	file, err := image.FromDir(ctx, images, n, tree)
	if err != nil {
		return nil, fmt.Errorf("image of %s: %w", p.Pinned(), err)
	}
	return &pulledImage{Pinned: p.Pinned(), Name: n, File: file, Unpack: *ans}, nil
}

// runUnpacker starts `broodd-helper image-unpack` as unpackUID in a new PID namespace
// (when it exits, anything it forked dies with it) with work/u (owned by unpackUID,
// below the root-only work) as descriptor 3, req on stdin, its stderr on log, and
// returns its answer.
func runUnpacker(ctx context.Context, work string, req unpackRequest, log io.Writer) (*unpackAnswer, error) {
	u := filepath.Join(work, "u")
	if err := os.Mkdir(u, 0o700); err != nil {
		return nil, err
	}
	if err := os.Lchown(u, unpackUID, unpackUID); err != nil {
		return nil, err
	}
	dir, err := os.OpenFile(u, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	exe, err := os.Executable()
	if unpackTestExe != "" {
		exe = unpackTestExe
	}
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	cmd := hostexec.SelfContext(ctx, exe, UnpackSubcommand)
	cmd.Env = append(proxyEnv(), unpackTestEnv...)
	cmd.Stdin = strings.NewReader(string(body))
	cmd.Stderr = log
	cmd.ExtraFiles = []*os.File{dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: unpackUID, Gid: unpackUID, Groups: []uint32{}},
		Cloneflags: unix.CLONE_NEWPID,
		Pdeathsig:  unix.SIGKILL,
		Setpgid:    true,
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the unpacker: %w", err)
	}
	var ans unpackAnswer
	derr := json.NewDecoder(io.LimitReader(out, maxUnpackAnswer)).Decode(&ans)
	io.Copy(io.Discard, out)
	werr := cmd.Wait()
	switch {
	case derr == nil && ans.Error != "" && ans.Policy:
		return nil, fmt.Errorf("%s: %w", ans.Error, ociref.ErrPolicy)
	case derr == nil && ans.Error != "":
		return nil, errors.New(ans.Error)
	case derr != nil || werr != nil || ans.Pulled == nil:
		return nil, fmt.Errorf("the unpacker failed (%v, answer: %v)", werr, derr)
	}
	return &ans, nil
}

// proxyEnv is the environment the unpacker gets: only the HTTP proxy settings
// (net/http's ProxyFromEnvironment), nothing else of the invoker's.
func proxyEnv() []string {
	var env []string
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
