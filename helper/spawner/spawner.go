package spawner

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"brood.dev/brood/sandbox/store"
)

// Subcommand is the hidden subcommand of broodd-helper that runs the spawner (Main).
const Subcommand = "vm-spawn"

// RunnerSubcommand is the hidden subcommand of broodd-helper that the spawner execs as a
// VM runner (package runner's Main).
const RunnerSubcommand = "vm-run"

// BuildSubcommand is the hidden subcommand of broodd-helper that the spawner execs as an
// image build child (Op "build"): `broodd-helper image-build --state-dir DIR NAME`, or
// `... --state-dir DIR --policy FILE --ref REF` for a pull (BuildArgs).
const BuildSubcommand = "image-build"

// BuildFiles is the number of descriptors a build request carries: the write end of the
// pipe the build child writes its progress records to (its descriptor 3).
const BuildFiles = 1

// SocketFD is the spawner's end of the socketpair (contract step 1).
const SocketFD = 3

// RunnerFiles is the number of descriptors a spawn request carries: the runner's stderr
// (a pipe the helper reads) followed by the runner's descriptors 3..8 (package runner).
const RunnerFiles = 7

// MsgMax bounds a request or reply in bytes.
const MsgMax = 4096

// ErrSpawn reports a refused spawn request, a spawner that broke the protocol, or one
// that is gone.
var ErrSpawn = errors.New("runner spawner failed")

// Request asks the spawner to start `<exe> vm-run` as UID/GID with Groups (Op "spawn"),
// or to SIGKILL its runner Pid (Op "kill": the confined helper cannot signal processes
// outside its Landlock domain, and only the runner's parent knows for sure that a pid is
// still its runner).
type Request struct {
	Op     string   `json:"op"`
	UID    uint32   `json:"uid,omitempty"`
	GID    uint32   `json:"gid,omitempty"`
	Groups []uint32 `json:"groups,omitempty"`
	Pid    int      `json:"pid,omitempty"`
	// A build request (Op "build") names a recipe (Name) or a digest reference to pull
	// (Ref, with the system policy file Policy the pull is checked against again), and
	// the artifact store (StateDir).
	Name     string `json:"name,omitempty"`
	Ref      string `json:"ref,omitempty"`
	Policy   string `json:"policy,omitempty"`
	StateDir string `json:"state_dir,omitempty"`
}

// Spawner operations (Request.Op).
const (
	OpSpawn = "spawn"
	OpKill  = "kill"
	OpBuild = "build"
)

// Reply answers a Request: the runner's pid (also its process group), or Error. A
// successful spawn reply carries the runner's pidfd by SCM_RIGHTS.
type Reply struct {
	Pid   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
}

// Check validates a spawn request (contract step 5): never root (a zero uid or gid is an
// error, not a default), and at most the one extra group the helper may grant (kvm,
// kvmGID; -1: the host has none). Errors wrap ErrSpawn.
func Check(r Request, kvmGID int) error {
	if r.UID == 0 || r.GID == 0 {
		return fmt.Errorf("spawn runner as uid %d gid %d: root is refused: %w", r.UID, r.GID, ErrSpawn)
	}
	for _, g := range r.Groups {
		if kvmGID < 0 || g != uint32(kvmGID) || len(r.Groups) > 1 {
			return fmt.Errorf("spawn runner with groups %v: only the kvm group may be added: %w", r.Groups, ErrSpawn)
		}
	}
	return nil
}

// digestRefRe is the form of a pull's Ref the spawner passes on: registry and repository
// characters (no space, no leading '-', so it cannot be read as a flag), then a SHA-256
// digest; at most maxRefLen bytes in all (checked apart: a counted repetition would make
// the compiled expression, which every helper process holds, large). The build child
// parses it fully (go-containerregistry's name package).
var digestRefRe = regexp.MustCompile(`^[a-z0-9][a-zA-Z0-9._:/-]*@sha256:[0-9a-f]+$`)

// maxRefLen bounds a pull's Ref in bytes.
const maxRefLen = 512

// digestRef reports whether ref has digestRefRe's form, 64 hex digits and at most
// maxRefLen bytes.
func digestRef(ref string) bool {
	_, hex, _ := strings.Cut(ref, "@sha256:")
	return len(ref) <= maxRefLen && len(hex) == 64 && digestRefRe.MatchString(ref)
}

// CheckBuild validates a build request (contract step 5b): either Name is an image name
// (store.ValidImageName) and one of recipes, the recipe table compiled into the binary,
// or Ref is a digest reference (digestRefRe) and Policy an absolute clean path; StateDir
// is an absolute clean path. Errors wrap ErrSpawn.
func CheckBuild(r Request, recipes []string) error {
	switch {
	case r.Ref != "" && (r.Name != "" || !digestRef(r.Ref)):
		return fmt.Errorf("pull image %q: not a digest reference: %w", r.Ref, ErrSpawn)
	case r.Ref != "" && !cleanAbs(r.Policy):
		return fmt.Errorf("pull image %s: policy file %q is not an absolute clean path: %w", r.Ref, r.Policy, ErrSpawn)
	case r.Ref == "" && (!store.ValidImageName(r.Name) || !slices.Contains(recipes, r.Name)):
		return fmt.Errorf("build image %q: not one of the recipes %v: %w", r.Name, recipes, ErrSpawn)
	case !cleanAbs(r.StateDir):
		return fmt.Errorf("build image %s%s: state directory %q is not an absolute clean path: %w", r.Name, r.Ref, r.StateDir, ErrSpawn)
	}
	return nil
}

// BuildArgs are the arguments of the build child for a checked request (contract step
// 6b), after the subcommand.
func BuildArgs(r Request) []string {
	if r.Ref != "" {
		return []string{"--state-dir", r.StateDir, "--policy", r.Policy, "--ref", r.Ref}
	}
	return []string{"--state-dir", r.StateDir, r.Name}
}

func cleanAbs(p string) bool { return filepath.IsAbs(p) && filepath.Clean(p) == p }

// KVMGID returns the gid of group "kvm" (/etc/group through os/user), or -1.
func KVMGID() int {
	g, err := user.LookupGroup("kvm")
	if err != nil {
		return -1
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return -1
	}
	return gid
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
